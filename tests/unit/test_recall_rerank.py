"""Recall's learned second stage (api/query/recall/rerank.py): its signals, when it runs, and what
it leaves alone, on hand-made candidates and through ``run_recall`` over real read models."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from memstream.api.query.recall import coverage, dates, rerank
from memstream.api.query.recall.fusion import rrf
from memstream.api.query.recall.pipeline import RecallRequest, run_recall
from memstream.api.query.recall.speakers import spoken_by
from memstream.projections.lexical.text import query_tokens, tokens
from memstream.projections.scope import ScopeFilter
from tests.unit.test_recall_neighbours import DIM, Models, Opts, _stored, _vec

TURNS = {
    "mem:1": "[1 May 2023] Melanie: What did you paint last week?",
    "mem:2": "[1 May 2023] Caroline: A sunrise over the lake, with my kids watching",
    "mem:3": "[1 May 2023] Melanie: Wow!",
}


def _signals(
    vector: list[tuple[str, float]], lexical: list[tuple[str, float]], shares: dict[str, float]
) -> rerank.Signals:
    adjacency = {"mem:1": (None, "mem:2"), "mem:2": ("mem:1", "mem:3"), "mem:3": ("mem:2", None)}
    named = spoken_by(TURNS, {"caroline"})
    query = "When did Caroline paint in May 2023?"
    words = query_tokens(query)  # every query word as rare as the others
    held = {r: sum(1 << i for i, w in enumerate(words) if w in tokens(t)) for r, t in TURNS.items()}
    cover = coverage.Coverage([1.0] * len(words), held)
    return rerank.Signals(vector, lexical, shares, adjacency, named, dict(TURNS), query, cover)


def _row(x: list[float]) -> dict[str, float]:
    return dict(zip(rerank.FEATURES, x, strict=True))


def test_features_read_each_list_and_the_neighbours() -> None:
    vector = [("mem:1", 0.8), ("mem:2", 0.4)]
    lexical = [("mem:1", 9.0), ("mem:3", 2.0)]
    s = _signals(vector, lexical, {"mem:1": 0.5, "mem:3": 0.25})
    cands = rrf({"vector": vector, "lexical": lexical})
    rows = {c.ref: _row(x) for c, x in zip(cands, rerank.feature_rows(cands, s), strict=True)}
    answer = rows["mem:2"]
    assert answer["cosine"] == pytest.approx(0.4) and answer["cosine_gap"] == pytest.approx(-0.4)
    assert answer["share"] == answer["lexical_rr"] == answer["both"] == 0.0  # the lexical list lacks it
    assert answer["vector_rr"] == 0.5
    assert answer["previous_cosine"] == pytest.approx(0.8) and answer["previous_share"] == 0.5
    assert answer["next_cosine"] == 0.0 and answer["next_share"] == 0.25
    assert answer["speaker"] == 1.0  # Caroline's turn, and the query names her
    assert answer["words"] == pytest.approx(math.log1p(len(TURNS["mem:2"].split())))
    question = rows["mem:1"]
    assert question["both"] == 1.0 and question["share_rel"] == 1.0 and question["lexical_rr"] == 1.0
    assert question["speaker"] == 0.0 and rows["mem:3"]["share_rel"] == 0.5
    # "When ... in May 2023?": every turn is of a 1 May 2023 session; only the first says a time
    assert all(r["date_month"] == 1.0 and r["date_day"] == 0.0 for r in rows.values())
    assert [rows[r]["when_time"] for r in ("mem:1", "mem:2", "mem:3")] == [1.0, 0.0, 0.0]
    # 7 query words: the answer holds "Caroline", "May", "2023"; its question adds "did", "paint"
    assert answer["cover_previous"] == pytest.approx(5 / 7) and answer["cover_next"] == pytest.approx(3 / 7)


@pytest.mark.parametrize(
    ("text", "year", "month", "day"),
    [
        ("What did Tim say about his injury on 16 November, 2023?", 2023, 11, 16),
        ("How did Joanna feel on October 25, 2022?", 2022, 10, 25),
        ("What book did Tim finish on 8th December, 2023?", 2023, 12, 8),
        ("What did Nate share in November 2022?", 2022, 11, None),
        ("What charity event did John organize in 2024?", 2024, None, None),
        ("What may Caroline do next?", None, None, None),  # "may" is a verb, not the month
        ("1:56 pm on 8 May, 2023", 2023, 5, 8),
    ],
)
def test_date_in_reads_day_month_and_year(text: str, year: int | None, month: int | None, day: int | None) -> None:
    assert dates.date_in(text) == dates.Date(year, month, day)


def test_date_signals_match_the_session_date_the_question_names() -> None:
    turn = "[1:56 pm on 8 May, 2023] Caroline: I went to the support group yesterday"
    assert dates.signals(dates.question("What did Caroline do on 8 May, 2023?"), turn) == (1.0, 1.0, 0.0)
    assert dates.signals(dates.question("What did Caroline do on 9 May, 2023?"), turn) == (0.0, 1.0, 0.0)
    assert dates.signals(dates.question("What did Caroline do in May 2022?"), turn) == (0.0, 0.0, 0.0)
    assert dates.signals(dates.question("When did Caroline go to the group?"), turn) == (0.0, 0.0, 1.0)
    # a turn without a date prefix, or no turn, has no date to match
    undated = "Caroline: I went to the support group yesterday"
    assert dates.signals(dates.question("When did Caroline go, in May 2023?"), undated) == (0.0, 0.0, 1.0)
    assert dates.signals(dates.question("When, in May 2023?"), None) == (0.0, 0.0, 0.0)


def test_rerank_orders_by_the_model_and_keeps_each_rows_own_signals() -> None:
    vector = [("mem:1", 0.8), ("mem:2", 0.4), ("mem:3", 0.3)]
    s = _signals(vector, [], {})
    cands = rrf({"vector": vector})
    before = {c.ref: (c.cosine, c.rrf, set(c.lists)) for c in cands}
    # a model that only counts words: the longest turn leads, the shortest trails
    words_only = rerank.Model(tuple(1.0 if f == "words" else 0.0 for f in rerank.FEATURES))
    out = rerank.rerank(cands, s, words_only)
    assert [c.ref for c in out] == ["mem:2", "mem:1", "mem:3"]
    assert all(0.0 < c.fused < 1.0 for c in out)
    assert {c.ref: (c.cosine, c.rrf, set(c.lists)) for c in out} == before


def test_conversational_needs_half_of_the_rows_to_be_turns() -> None:
    content = {"mem:1": "Caroline: hi", "mem:2": "[8 May 2023] Melanie: hello", "mem:3": "a plain note"}
    assert rerank.conversational(content, content)
    content["mem:2"] = "another plain note"
    assert not rerank.conversational(content, content)
    notes = {"mem:1": "the checkout service times out under load", "mem:2": "ticket OPS-12 is closed"}
    assert not rerank.conversational(notes, notes)
    # notes that open with an identifier and a colon are not turns; "User:" and two-word names are
    ids = {"mem:1": "ADR-71205: we chose event sourcing", "mem:2": "Bug BUG-29880: the sync crashes"}
    assert not rerank.conversational(ids, ids)
    chat = {"mem:1": "User: where is my order?", "mem:2": "[2 May 2023] Melanie Smith: on its way"}
    assert rerank.conversational(chat, chat)
    assert not rerank.conversational([], content)
    assert not rerank.conversational(["ep:1"], {"ep:1": None})


# -- through run_recall ---------------------------------------------------------------------


def _chat() -> Models:
    """Twelve look-alike one-word turns close to the query (cosine 0.6), then the question turn
    (0.9) and a long answer whose own cosine (0.45) ranks it below all twelve."""
    m = Models()
    mid = 0
    for i in range(12):
        for cos, text in ((0.6, f"Melanie: look {i}"), (0.0, f"Caroline: aside {i}")):
            mid += 1
            m.apply(mid, _stored(mid, content=text, vec=_vec(cos, 1 + mid % (DIM - 1))))
    turns = [(0.9, "Melanie: what did Caroline paint last week?"), (0.45, "Caroline: a sunrise over the lake at dawn")]
    for cos, text in turns:
        mid += 1
        m.apply(mid, _stored(mid, content=text, vec=_vec(cos, 1 + mid % (DIM - 1))))
    return m


def _refs(m: Models, opts: Opts, query: str = "What did Caroline paint") -> list[str]:
    qvec = np.zeros(DIM, dtype=np.float32)
    qvec[0] = 1.0
    res = run_recall(m, opts, RecallRequest(ScopeFilter("a"), query, 10), qvec, "m1")
    return [c.ref for c in res.candidates]


def test_run_recall_second_stage_lifts_the_answer_turn() -> None:
    m = _chat()
    first = _refs(m, Opts(recall_rerank="off", recall_neighbour_weight=0.0))
    second = _refs(m, Opts(recall_rerank="learned", recall_neighbour_weight=0.0))
    assert "mem:26" not in first  # twelve look-alikes and the question fill the ten rows
    assert second.index("mem:26") <= 1  # its question turn leads the vector list, and Caroline is named
    # only the order moves under the second stage: the answer keeps its own cosine for the gate
    qvec = np.zeros(DIM, dtype=np.float32)
    qvec[0] = 1.0
    res = run_recall(m, Opts(recall_rerank="learned"), RecallRequest(ScopeFilter("a"), "x", 10), qvec, "m1")
    assert next(c for c in res.admitted if c.ref == "mem:26").cosine == pytest.approx(0.45, abs=1e-5)


def test_run_recall_second_stage_runs_only_under_evidence_rrf_with_both_retrievers() -> None:
    m = _chat()
    for config in (Opts(recall_retrievers="vector"), Opts(recall_mode="rsf"), Opts(rrf_evidence=False)):
        assert _refs(m, replace(config, recall_rerank="learned")) == _refs(m, replace(config, recall_rerank="off"))
    # under the default it runs (here the neighbours' vote alone already lifts the answer
    # second, so the first stage's own order is taken without it)
    bare = Opts(recall_neighbour_weight=0.0)
    assert _refs(m, replace(bare, recall_rerank="learned")) != _refs(m, replace(bare, recall_rerank="off"))


def test_run_recall_second_stage_leaves_notes_as_the_first_stage_ranks_them() -> None:
    m = Models()
    for mid in range(1, 31):
        cos = 0.3 + 0.02 * mid
        m.apply(mid, _stored(mid, content=f"note {mid} about the checkout service", vec=_vec(cos, 1 + mid % (DIM - 1))))
    learned = _refs(m, Opts(recall_rerank="learned"), "checkout service")
    assert learned == _refs(m, Opts(recall_rerank="off"), "checkout service")
