"""The second stage's window signals (api/query/recall/window.py) and its trees
(api/query/recall/forest.py): the turns around a candidate and their cosines, and a forest's
scores, on hand-made data and through run_recall."""

from __future__ import annotations

import numpy as np
import pytest

from memstream.api.query.recall import forest, rerank, window
from tests.unit.test_recall_expand import _chat, _recall, _spy

# a line of turns mem:1 .. mem:6 in write order
LINE = {f"mem:{i}": (f"mem:{i - 1}" if i > 1 else None, f"mem:{i + 1}" if i < 6 else None) for i in range(1, 7)}


def test_members_walk_the_turns_either_side_one_ring_at_a_time() -> None:
    asked: list[list[str]] = []

    def adjacent(refs: list[str]) -> dict[str, tuple[str | None, str | None]]:
        asked.append(refs)
        return {r: LINE[r] for r in refs}

    known = {r: LINE[r] for r in ("mem:3", "mem:1")}  # the rest is read when the walk needs it
    spans = window.members(["mem:3", "mem:1"], known, adjacent, 2)
    assert spans["mem:3"] == ["mem:3", "mem:2", "mem:4", "mem:1", "mem:5"]
    assert spans["mem:1"] == ["mem:1", "mem:2", "mem:3"]  # nothing before the first turn
    assert asked == [["mem:2", "mem:4"]]  # mem:2's neighbours serve both windows
    # a refused neighbour ends the window on its side
    spans = window.members(["mem:3"], LINE, adjacent, 2, admit=lambda r: r != "mem:2")
    assert spans["mem:3"] == ["mem:3", "mem:4", "mem:5"]
    assert window.members(["mem:3"], LINE, adjacent, 0) == {"mem:3": ["mem:3"]}


def test_signals_are_the_best_and_mean_cosine_of_the_rows_read() -> None:
    around = {"mem:3": ["mem:3", "mem:2", "mem:4"], "mem:9": ["mem:9"]}
    got = window.signals(around, {"mem:3": 0.2, "mem:2": 0.8, "mem:4": 0.5})
    assert got["mem:3"] == pytest.approx((0.8, 0.5))
    assert got["mem:9"] == (0.0, 0.0)  # no cosine: no signal
    read: list[set[str]] = []

    def reader(refs: set[str]) -> dict[str, float]:
        read.append(refs)
        return {"mem:2": 0.8}

    out = window.around(
        ["mem:3"],
        LINE,
        lambda refs: {r: LINE[r] for r in refs},
        1,
        lambda _: True,
        {"mem:3": 0.2, "mem:4": 0.5},
        reader,
    )
    assert read == [{"mem:2"}] and out["mem:3"] == pytest.approx((0.8, 0.5))


def test_recall_reads_each_candidates_window(monkeypatch: pytest.MonkeyPatch) -> None:
    m = _chat()  # mem:20 is worded like the question (cosine 0.9), every other turn far below it
    seen = _spy(monkeypatch)
    monkeypatch.setattr(rerank, "WINDOW", 0)
    _recall(m)
    assert seen[-1][1].around is None
    monkeypatch.setattr(rerank, "WINDOW", 2)
    _recall(m)
    cands, s = seen[-1]
    assert s.around is not None and set(s.around) == {c.ref for c in cands}
    for ref, (best, mean) in s.around.items():
        p = int(ref.split(":")[1])
        assert (best == pytest.approx(0.9, abs=1e-6)) == (abs(p - 20) <= 2)  # the question two turns away
        assert 0.0 < mean <= best
    x = dict(zip(rerank.FEATURES, rerank.feature_rows(cands, s)[[c.ref for c in cands].index("mem:20")], strict=True))
    assert x["window_best"] == pytest.approx(0.9, abs=1e-6)


def test_a_forest_sums_its_trees_and_adds_to_the_linear_score() -> None:
    split: tuple[forest.Node, ...] = ((1, 0.5, 1, 2, 0.0), (-1, 0.0, -1, -1, -1.0), (-1, 0.0, -1, -1, 2.0))
    deeper: tuple[forest.Node, ...] = (
        (0, 0.0, 1, 2, 0.0),
        (-1, 0.0, -1, -1, 0.25),
        (1, 1.0, 3, 4, 0.0),
        (-1, 0.0, -1, -1, 0.5),
        (-1, 0.0, -1, -1, 1.5),
    )
    f = forest.Forest([split, deeper])
    rows = [[-1.0, 0.0], [1.0, 0.5], [1.0, 0.75], [1.0, 2.0]]
    assert f.scores(np.array(rows)).tolist() == [-0.75, -0.5, 2.5, 3.5]
    model = rerank.Model((1.0, 0.0), f)
    assert model.scores(rows) == [-1.75, 0.5, 3.5, 4.5]
    assert model.score(rows[0]) == -1.75
    assert rerank.Model((1.0, 0.0)).scores(rows) == [-1.0, 1.0, 1.0, 1.0]
    assert rerank.Model((1.0, 0.0)).scores(np.array(rows)) == [-1.0, 1.0, 1.0, 1.0]  # the fit's matrices


def test_lightgbm_trees_become_nodes() -> None:
    dump = {
        "tree_info": [
            {
                "tree_structure": {
                    "split_feature": 2,
                    "threshold": 0.3,
                    "decision_type": "<=",
                    "left_child": {"leaf_value": -0.1},
                    "right_child": {
                        "split_feature": 0,
                        "threshold": 1.5,
                        "decision_type": "<=",
                        "left_child": {"leaf_value": 0.2},
                        "right_child": {"leaf_value": 0.4},
                    },
                }
            },
            {"tree_structure": {"leaf_value": 0.05}},
        ]
    }
    trees = forest.from_lightgbm(dump)
    assert trees[0] == [
        (2, 0.3, 1, 2, 0.0),
        (-1, 0.0, -1, -1, -0.1),
        (0, 1.5, 3, 4, 0.0),
        (-1, 0.0, -1, -1, 0.2),
        (-1, 0.0, -1, -1, 0.4),
    ]
    assert trees[1] == [(-1, 0.0, -1, -1, 0.05)]
    with pytest.raises(ValueError):
        forest.from_lightgbm(
            {"tree_info": [{"tree_structure": {**dump["tree_info"][0]["tree_structure"], "decision_type": "=="}}]}
        )  # type: ignore[index]
