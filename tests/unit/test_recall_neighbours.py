"""Adjacent-turn evidence in recall (api/query/recall/neighbours.py): the smoothing arithmetic,
which memories are neighbours, the reorder within one list, and run_recall over real read models
(an answer turn just below the cut rises when the turn before it matches the query)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pytest

from memstream.api.query.recall.neighbours import memory_adjacency, neighbour_scores, reorder
from memstream.api.query.recall.pipeline import RecallRequest, run_recall
from memstream.projections.lexical import LexicalProjection
from memstream.projections.precision import PrecisionProjection
from memstream.projections.records import EpisodesProjection, MemoriesProjection, ProfilesProjection
from memstream.projections.scope import ScopeFilter
from memstream.projections.vectors import VectorProjection
from tests.support.vector_events import event

DIM = 16


def test_neighbour_scores_adds_a_share_of_the_best_neighbour() -> None:
    scores = {1: 0.2, 2: 0.8, 3: 0.5, 7: 0.4}

    def adjacent(k: int) -> tuple[int | None, int | None]:
        return (k - 1 if k > 1 else None, k + 1)

    out = neighbour_scores(scores, adjacent, 0.25)
    assert out == pytest.approx({1: 0.2 + 0.2, 2: 0.8 + 0.125, 3: 0.5 + 0.2, 7: 0.4})
    spread = neighbour_scores(scores, adjacent, 0.25, spread=True)
    # with spread, unscored neighbours of scored rows join with their neighbour's share alone
    assert spread[4] == pytest.approx(0.125) and spread[6] == pytest.approx(0.1) and spread[8] == pytest.approx(0.1)
    assert neighbour_scores(scores, adjacent, 0.0) == scores


def test_reorder_keeps_rows_and_their_scores_and_breaks_ties_by_the_list() -> None:
    ranked = [("mem:1", 0.9), ("mem:5", 0.6), ("mem:9", 0.5), ("mem:3", 0.5)]
    evidence = {"mem:1": 0.9, "mem:5": 0.6, "mem:9": 0.5, "mem:3": 0.5}
    adjacency = {"mem:1": (None, "mem:9"), "mem:9": ("mem:1", None)}  # 9 follows 1
    out, ev = reorder(ranked, evidence, adjacency, 0.25)
    assert out == [("mem:1", 0.9), ("mem:9", 0.5), ("mem:5", 0.6), ("mem:3", 0.5)]  # cosines unchanged
    assert ev == pytest.approx({"mem:1": 0.9 + 0.125, "mem:9": 0.5 + 0.225, "mem:5": 0.6, "mem:3": 0.5})
    same, _ = reorder(ranked, evidence, {}, 0.25)
    assert same == ranked


def test_reorder_without_neighbour_support_keeps_the_retrievers_order() -> None:
    # BM25's order and the rows' IDF shares can disagree: the retriever's order stands
    bm25 = [("mem:1", 7.0), ("mem:2", 6.0), ("mem:3", 5.0)]
    shares = {"mem:1": 0.2, "mem:2": 0.8, "mem:3": 0.1}
    out, ev = reorder(bm25, shares, {"mem:1": (None, None)}, 0.25)
    assert out == bm25 and ev == shares
    # a neighbour's support lifts a row over rows whose (capped) evidence is below its own plus the share
    out, _ = reorder(bm25, shares, {"mem:3": ("mem:2", None), "mem:2": (None, "mem:3")}, 0.25)
    assert [r for r, _ in out] == ["mem:3", "mem:2", "mem:1"]  # 3: 0.1 + 0.2 beats 2: 0.2 + 0.025 and 1: 0.2


def _stored(mid: int, agent: str = "a", channel: str = "", content: str = "", vec: Any = None) -> dict[str, Any]:
    return event("memory.stored", {"id": mid, "content": content or f"m{mid}"}, agent=agent, channel=channel, vec=vec)


def test_memory_adjacency_is_write_order_within_agent_and_scope() -> None:
    mems = MemoriesProjection()
    history = [
        _stored(1),
        _stored(2, agent="b"),  # another agent's row between two of a's
        _stored(3),
        _stored(4, channel="other"),  # a's row in another channel: not a neighbour of 3 or 5
        _stored(5),
        _stored(6),
    ]
    for off, ev in enumerate(history):
        mems.apply(off, ev)
    mems.apply(9, event("memory.deleted", {"id": 6}))
    adj = memory_adjacency(mems, ["mem:1", "mem:3", "mem:5", "mem:2", "mem:6", "ep:1"])
    assert adj["mem:1"] == (None, "mem:3")
    assert adj["mem:3"] == ("mem:1", None)  # the next row of a is in another channel
    assert adj["mem:5"] == (None, None)  # 4 is another channel's, 6 is deleted
    assert adj["mem:2"] == (None, None)  # b's only row
    assert adj["mem:6"] == adj["ep:1"] == (None, None)


# -- run_recall over real read models -------------------------------------------------------------


@dataclass
class Models:
    memories: MemoriesProjection = field(default_factory=MemoriesProjection)
    episodes: EpisodesProjection = field(default_factory=EpisodesProjection)
    profiles: ProfilesProjection = field(default_factory=ProfilesProjection)
    precision: PrecisionProjection = field(default_factory=PrecisionProjection)
    vectors: VectorProjection = field(default_factory=lambda: VectorProjection(hnsw=False))
    lexical: LexicalProjection = field(default_factory=LexicalProjection)

    def apply(self, offset: int, ev: dict[str, Any]) -> None:
        for model in (self.memories, self.episodes, self.profiles, self.precision, self.vectors, self.lexical):
            model.apply(offset, ev)


@dataclass
class Opts:
    recall_neighbour_weight: float = 0.25
    recall_speaker_boost: float = 0.5
    recall_rerank: Literal["learned", "off"] = "off"  # the first stage alone (test_recall_rerank.py: both)
    recall_mode: Literal["rrf", "rsf", "cascade"] = "rrf"
    recall_retrievers: Literal["all", "vector", "lexical"] = "all"
    max_memories: int = 10_000
    vector_reach: int = 0
    vector_far_limit: int = 0
    vector_min_similarity: float = 0.3
    rrf_k: int = 60
    rrf_evidence: bool = True
    rrf_lexical_weight: float = 1.0
    confidence_enabled: bool = False
    confidence_ordering: Literal["fusion", "legacy"] = "fusion"
    episode_penalty_enabled: bool = False
    episode_decay_rate: float = 0.01
    episode_decay_floor: float = 0.5
    autocut_enabled: bool = True
    autocut_min_gap_ratio: float = 0.15
    autocut_min_results: int = 3


def _vec(cos: float, axis: int) -> np.ndarray:
    """A unit vector at cosine ``cos`` to the query (axis 0), its rest on another axis."""
    v = np.zeros(DIM, dtype=np.float32)
    v[0], v[axis] = cos, np.sqrt(1 - cos * cos)
    return v


def _conversation() -> tuple[Models, dict[int, str]]:
    """Twelve look-alike turns (cosine 0.55 to the query), each followed by an unrelated one, then
    the question turn (0.9) and its answer (0.45): twelve rows outrank the answer on its own."""
    m = Models()
    names: dict[int, str] = {}
    mid = 0
    for i in range(12):
        for cos, name in ((0.55, f"look-alike {i}"), (0.0, f"aside {i}")):
            mid += 1
            names[mid] = name
            m.apply(mid, _stored(mid, content=f"w{mid}", vec=_vec(cos, 1 + mid % (DIM - 1))))
    for cos, name in ((0.9, "question"), (0.45, "answer")):
        mid += 1
        names[mid] = name
        m.apply(mid, _stored(mid, content=f"w{mid}", vec=_vec(cos, 1 + mid % (DIM - 1))))
    return m, names


def _recall(m: Models, opts: Opts) -> list[str]:
    query = np.zeros(DIM, dtype=np.float32)
    query[0] = 1.0
    req = RecallRequest(ScopeFilter("a"), "unrelated words", 10)
    res = run_recall(m, opts, req, query, "m1")
    return [c.ref for c in res.candidates]


def test_run_recall_lifts_the_answer_after_a_matching_question() -> None:
    m, names = _conversation()
    with_neighbours = [names[int(r.split(":")[1])] for r in _recall(m, Opts())]
    without = [names[int(r.split(":")[1])] for r in _recall(m, Opts(recall_neighbour_weight=0.0))]
    assert without[0] == with_neighbours[0] == "question"
    assert "answer" not in without and len(without) == 10
    assert "answer" in with_neighbours and with_neighbours.index("answer") == 1
    # other configurations keep their own order: dense-only recall never reorders
    dense = _recall(m, Opts(recall_retrievers="vector"))
    assert names[int(dense[0].split(":")[1])] == "question" and "mem:26" not in dense


def test_run_recall_keeps_the_real_cosine_for_the_gate() -> None:
    m, _ = _conversation()
    query = np.zeros(DIM, dtype=np.float32)
    query[0] = 1.0
    res = run_recall(m, Opts(), RecallRequest(ScopeFilter("a"), "unrelated words", 10), query, "m1")
    answer = next(c for c in res.candidates if c.ref == "mem:26")
    assert answer.cosine == pytest.approx(0.45, abs=1e-5)


def test_run_recall_favours_the_turn_of_the_speaker_the_query_names() -> None:
    m = Models()
    # the question turn leads both lists; the answer is Caroline's
    turns = [(0.80, "Melanie: did Caroline paint it?"), (0.75, "Caroline: a sunrise over the lake")]
    for mid, (cos, text) in enumerate(turns, start=1):
        m.apply(mid, _stored(mid, content=text, vec=_vec(cos, mid)))
    query = np.zeros(DIM, dtype=np.float32)
    query[0] = 1.0
    req = RecallRequest(ScopeFilter("a"), "What did Caroline paint", 10)

    def order(boost: float) -> list[str]:
        return [c.ref for c in run_recall(m, Opts(recall_speaker_boost=boost), req, query, "m1").candidates]

    assert order(0.0) == order(0.5) == ["mem:1", "mem:2"]  # a small boost does not outvote both lists
    assert order(3.0) == ["mem:2", "mem:1"]
    melanie = RecallRequest(ScopeFilter("a"), "What did Melanie paint", 10)
    assert run_recall(m, Opts(recall_speaker_boost=3.0), melanie, query, "m1").candidates[0].ref == "mem:1"
