"""The vector projection (projections/vectors/): folds, the scan window and the far list
(CONTRACTS R8), isolation (R10), the model filter, the graph against exact search on real
sentence vectors, and a graph-maintenance property. Snapshots, their sidecars and the replay
property write to disk: tests/system/test_vectors_snapshots.py."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.projections.runner import digest_of
from memstream.projections.scope import ScopeFilter
from memstream.projections.vectors import VectorProjection
from memstream.streams import commands as c
from memstream.streams.decision.dispatch import decide
from memstream.streams.decision.limits import Limits
from memstream.streams.decision.state import DecisionState
from memstream.streams.decision.verdict import DecideContext
from memstream.streams.events import Actor, Embedding, Scope, decode
from tests.support.hits import refs
from tests.support.vector_events import (
    DIM,
    A,
    Feed,
    archive,
    build,
    event,
    ops,
    reembed,
    small_answers,
    store,
    unit,
    update,
)

# -- folds -------------------------------------------------------------------------------------


def test_store_update_delete_fold() -> None:
    f = Feed()(store(1, unit(1)), store(2, unit(2)), store(3, None))
    assert f.proj.count(A) == 2
    hits, far = f.proj.search(A, unit(1), 5)
    assert far == []
    assert hits[0] == ("mem:1", pytest.approx(1.0))
    assert set(refs(hits)) == {"mem:1", "mem:2"}  # mem:3 has no vector

    f(update(1, unit(11)))  # new vector replaces the old one
    assert f.proj.search(A, unit(11), 1)[0] == [("mem:1", pytest.approx(1.0))]
    assert f.proj.search(A, unit(1), 1)[0][0][1] < 0.99

    f(update(2, None))  # an update without an embedding drops the stale vector
    assert f.proj.count(A) == 1
    assert "mem:2" not in refs(f.proj.search(A, unit(2), 5)[0])

    f(update(3, unit(3)))  # a memory stored without a vector gains one on update
    assert f.proj.search(A, unit(3), 1)[0] == [("mem:3", pytest.approx(1.0))]

    f(event("memory.deleted", {"id": 1}), event("memory.deleted", {"id": 99}))
    assert "mem:1" not in refs(f.proj.search(A, unit(11), 5)[0])
    assert f.proj.count(A) == 1


def test_reembed_adds_a_second_model_and_the_switch_moves_recall_over() -> None:
    f = Feed()(store(1, unit(1)), store(2, None), *[store(10 + i, unit(10 + i)) for i in range(5)])
    assert f.proj.model_of("a") == "m1"
    f(reembed(1, unit(101), "m2"), reembed(2, unit(102), "m2"))
    # mem:1 is in both models now; the stored-without-vector mem:2 only in m2
    assert f.proj.models("a") == {"m1": 6, "m2": 2}
    assert refs(f.proj.search(A, unit(101), 5, model="m2")[0])[0] == "mem:1"
    # recall without a model stays on the agent's model, old vectors included, until the switch
    assert f.proj.model_of("a") == "m1"
    assert refs(f.proj.search(A, unit(1), 1)[0]) == ["mem:1"]
    # A re-embedded row keeps the recency of its store: with a window of one, the newest m2 row
    # is mem:2 (stored after mem:1), whatever order the re-embeds came in.
    assert refs(f.proj.search(A, unit(101), 5, window=1, model="m2")[0]) == ["mem:2"]
    # re-embedding the same record again with the same model overwrites in place
    f(reembed(1, unit(201), "m2"))
    assert refs(f.proj.search(A, unit(201), 1, model="m2")[0]) == ["mem:1"]
    assert f.proj.models("a") == {"m1": 6, "m2": 2}
    # an update replaces every model's vector with the update's own
    f(update(10, unit(310)))
    assert f.proj.models("a") == {"m1": 6, "m2": 2}
    f(*[reembed(10 + i, unit(110 + i), "m2") for i in range(5)])
    f(archive(50, unit(50)), reembed(50, unit(150), "m2", kind="ep"), reembed(77, unit(77), "m2"))
    assert refs(f.proj.search(A, unit(150), 1, model="m2")[0]) == ["ep:50"]
    f(event("embedding.switched", {"model": "m2", "previous": "m1"}))
    assert f.proj.model_of("a") == "m2"
    assert f.proj.models("a") == {"m2": 8}
    assert refs(f.proj.search(A, unit(114), 1)[0]) == ["mem:14"]
    assert f.proj.search(A, unit(1), 5, model="m1") == ([], [])
    assert digest_of(f.proj) == digest_of(f.replayed())


def test_the_agent_model_is_part_of_the_digest() -> None:
    f = Feed()(store(1, unit(1)))
    before = digest_of(f.proj)
    g = Feed()(store(1, unit(1)), event("embedding.switched", {"model": "m1", "previous": "m1"}))
    assert digest_of(g.proj) == before  # switching to the model it has changes nothing
    h = Feed()(store(1, None), event("embedding.switched", {"model": "m9", "previous": None}))
    assert h.proj.model_of("a") == "m9"
    assert digest_of(h.proj) != digest_of(Feed()(store(1, None)).proj)


def test_episodes_and_agent_data_deleted() -> None:
    f = Feed()(store(1, unit(1)), store(2, unit(2)), archive(3, unit(3)), archive(4, unit(4)))
    f(store(5, unit(5), agent="b"))
    assert refs(f.proj.search(A, unit(3), 1)[0]) == ["ep:3"]
    f(event("episode.deleted", {"id": 3}))
    assert "ep:3" not in refs(f.proj.search(A, unit(3), 10)[0])
    # mem:2 is locked, so the decider left it out of memory_ids: it survives
    f(event("agent_data.deleted", {"memory_ids": [1], "episode_ids": [4], "profile": False, "kept_locked": [2]}))
    assert refs(f.proj.search(A, unit(2), 10)[0]) == ["mem:2"]
    assert f.proj.count(A) == 1
    assert f.proj.count(ScopeFilter("b")) == 1  # another agent's rows are untouched


def test_events_from_the_decider_fold() -> None:
    """Real events (decided, encoded, decoded, attachment re-attached) have the shape folded here."""
    state = DecisionState(4)
    ids = itertools.count()
    scope = Scope(agent_id="a", project_id="p")
    actor = Actor(client_id="t")
    when = datetime(2026, 1, 1, tzinfo=UTC)
    proj = VectorProjection()
    offset = 0

    def run(cmd: c.Command) -> Any:
        nonlocal offset
        d = decide(state, cmd, DecideContext(0, Limits(), lambda: f"e{next(ids)}"))
        for ev in d.events:
            raw = decode(ev.encode())
            state.apply_event(offset, raw)
            if ev.vector is not None:
                raw["vector"] = ev.vector
            proj.apply(offset, raw)
            offset += 1
        return d.outcome

    base = {"scope": scope, "actor": actor, "received_at": when}
    out = run(c.StoreMemory(command_id="1", content="hello", embedding=Embedding.from_vector("m1", unit(1)), **base))
    run(c.StoreMemory(command_id="2", content="world", embedding=Embedding.from_vector("m1", unit(2)), **base))
    run(c.ArchiveEpisode(command_id="3", summary="ep", embedding=Embedding.from_vector("m1", unit(3)), **base))
    hits, _ = proj.search(ScopeFilter("a", "p"), unit(1), 3)
    assert hits[0] == (f"mem:{out.id}", pytest.approx(1.0))
    assert len(hits) == 3
    run(c.UpdateMemory(command_id="4", memory_id=out.id, content="hi", embedding=None, **base))
    run(c.ReembedMemory(command_id="5", memory_id=out.id, embedding=Embedding.from_vector("m2", unit(9)), **base))
    assert refs(proj.search(ScopeFilter("a"), unit(9), 3, model="m2")[0]) == [f"mem:{out.id}"]


# -- the window (R8) -----------------------------------------------------------------------


def test_window_hides_old_rows_and_reach_ranks_them_as_a_far_list() -> None:
    f = Feed()(*[store(i, unit(i)) for i in range(1, 31)])  # mem:1 is the oldest
    hits, far = f.proj.search(A, unit(1), 5, window=10)
    assert "mem:1" not in refs(hits)
    assert set(refs(hits)) <= {f"mem:{i}" for i in range(21, 31)}
    assert far == []
    hits2, far = f.proj.search(A, unit(1), 5, window=10, reach=30)
    assert hits2 == hits  # the window list is unchanged by the reach
    assert far[0] == ("mem:1", pytest.approx(1.0))
    assert set(refs(far)) <= {f"mem:{i}" for i in range(1, 21)}
    # rows beyond the reach are invisible to both lists
    _, far = f.proj.search(A, unit(1), 5, window=10, reach=25)
    assert "mem:1" not in refs(far) and set(refs(far)) <= {f"mem:{i}" for i in range(6, 21)}
    # reach <= window: no far list
    assert f.proj.search(A, unit(1), 5, window=10, reach=10)[1] == []
    assert f.proj.search(A, unit(1), 5, window=10, reach=3)[1] == []
    # at most k each, best first
    hits, far = f.proj.search(A, unit(25), 3, window=10, reach=30)
    assert len(hits) == 3 and len(far) == 3
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)


def test_window_is_per_kind_and_an_update_keeps_recency() -> None:
    f = Feed()
    for i in range(1, 16):
        f(store(i, unit(i)), archive(100 + i, unit(100 + i)))
    # the newest 5 memories and the newest 5 episodes are each in the window
    hits, _ = f.proj.search(A, unit(1), 100, window=5)
    assert set(refs(hits)) == {f"mem:{i}" for i in range(11, 16)} | {f"ep:{100 + i}" for i in range(11, 16)}
    # an update changes the vector, not the row's place: mem:1 stays out of the window
    f(update(1, unit(500)))
    assert "mem:1" not in refs(f.proj.search(A, unit(500), 100, window=5)[0])
    assert refs(f.proj.search(A, unit(500), 1, window=5, reach=15)[1]) == ["mem:1"]
    # deleting window rows lets older rows in: the window is the newest live rows
    f(*[event("memory.deleted", {"id": i}) for i in range(11, 16)])
    hits, _ = f.proj.search(A, unit(1), 100, window=5)
    assert {r for r in refs(hits) if r.startswith("mem:")} == {f"mem:{i}" for i in range(6, 11)}


def test_window_counts_rows_in_scope_only() -> None:
    f = Feed()(store(1, unit(1), project="x"))
    f(*[store(10 + i, unit(10 + i), project="y") for i in range(20)])  # newer rows elsewhere
    # in project x's scope, mem:1 is the newest row: inside a window of 1
    assert refs(f.proj.search(ScopeFilter("a", "x"), unit(1), 5, window=1)[0]) == ["mem:1"]
    # over every project it is the oldest: outside a window of 5, in the far list
    hits, far = f.proj.search(A, unit(1), 5, window=5, reach=50)
    assert "mem:1" not in refs(hits) and refs(far)[0] == "mem:1"


def test_far_list_on_the_graph_path_matches_exact() -> None:
    rng = np.random.default_rng(3)
    vecs = rng.standard_normal((3000, DIM)).astype(np.float32)
    graph = Feed(VectorProjection(hnsw_threshold=500, flush_batch=64, exact_far_limit=0))
    exact = Feed(VectorProjection(hnsw=False))
    evs = [store(i + 1, vecs[i], project="p" if i % 2 else "") for i in range(3000)]
    graph(*evs)
    exact(*evs)
    assert graph.proj.stats["graph_builds"] >= 1
    for i in range(0, 3000, 150):
        for scope in (A, ScopeFilter("a", "p"), ScopeFilter("a", "")):
            gw, gf = graph.proj.search(scope, vecs[i], 5, window=200, reach=2500)
            ew, ef = exact.proj.search(scope, vecs[i], 5, window=200, reach=2500)
            assert gw == ew
            assert len(gf) == len(ef) == 5
            assert set(refs(gf)) <= set(refs(exact.proj.search(scope, vecs[i], 2500, window=200, reach=2500)[1]))
    assert graph.proj.stats["hnsw_far"] > 0


# -- isolation (R10) and the model filter ----------------------------------------------------


def test_scope_isolation() -> None:
    f = Feed()
    f(store(1, unit(1), project="x"), store(2, unit(2), project=""), store(3, unit(3), project="y"))
    f(store(4, unit(4), channel="c"), store(5, unit(5), channel="d"), store(6, unit(6), project="x", channel="c"))
    f(store(7, unit(7), agent="ab"), store(8, unit(8), agent="A"))

    def seen(scope: ScopeFilter) -> set[str]:
        return set(refs(f.proj.search(scope, unit(1), 100)[0]))

    assert seen(A) == {f"mem:{i}" for i in range(1, 7)}  # agent exact: not 'ab', not 'A'
    assert seen(ScopeFilter("ab")) == {"mem:7"}
    assert seen(ScopeFilter("x")) == set()
    assert seen(ScopeFilter("a", "x")) == {"mem:1", "mem:2", "mem:4", "mem:5", "mem:6"}  # x + ''
    assert seen(ScopeFilter("a", "")) == {"mem:2", "mem:4", "mem:5"}  # '' only
    assert seen(ScopeFilter("a", None, "c")) == {"mem:1", "mem:2", "mem:3", "mem:4", "mem:6"}  # c + ''
    assert seen(ScopeFilter("a", "x", "c")) == {"mem:1", "mem:2", "mem:4", "mem:6"}
    assert seen(ScopeFilter("a", None, "")) == seen(A)
    assert f.proj.count(ScopeFilter("a", "x")) == 5
    assert f.proj.count(ScopeFilter("a", "x", "c")) == 4
    assert f.proj.count(ScopeFilter("nobody")) == 0
    # the far list obeys the same scope
    _, far = f.proj.search(ScopeFilter("a", "y"), unit(3), 10, window=1, reach=100)
    assert set(refs(far)) <= {"mem:2", "mem:3", "mem:4", "mem:5"}


def test_model_filter() -> None:
    f = Feed()(store(1, unit(1), model="m1"), store(2, unit(2), model="m2"), store(3, unit(3), model="m1"))
    f(store(4, unit(1), model="m2"))  # the same vector under another model
    assert refs(f.proj.search(A, unit(1), 10, model="m1")[0]) == ["mem:1", "mem:3"]
    assert set(refs(f.proj.search(A, unit(1), 10, model="m2")[0])) == {"mem:2", "mem:4"}
    assert f.proj.search(A, unit(1), 10, model="m9") == ([], [])
    # without a model: the agent's, i.e. its first vector's (a mixed log is only possible when
    # the decider did not write it; it refuses writes embedded with another model)
    assert set(refs(f.proj.search(A, unit(1), 10)[0])) == {"mem:1", "mem:3"}
    # the window counts rows of the searched model only
    assert refs(f.proj.search(A, unit(1), 10, window=1, model="m1")[0]) == ["mem:3"]
    with pytest.raises(ValueError):
        f.proj.search(A, np.ones(DIM + 1, np.float32), 3)
    assert f.proj.count(A) == 4  # count covers every model


# -- the graph against exact search, on real sentence vectors ----------------------------------


def real_texts(n: int) -> list[str]:
    wordnet = Path("/usr/share/wordnet/data.noun")
    if wordnet.is_file():
        out = []
        with open(wordnet, encoding="latin-1") as fh:
            for line in fh:
                if not line.startswith("  ") and " | " in line:
                    out.append(line.partition(" | ")[2].split(";")[0].strip())
        return out[:: max(1, len(out) // n)][:n]
    # without WordNet: varied sentences composed from a small vocabulary
    subjects = ["the engineer", "my neighbour", "a small dog", "the committee", "our teacher", "a tourist"]
    verbs = ["repaired", "painted", "forgot", "ordered", "described", "photographed", "sold", "cleaned"]
    objects = ["the old bicycle", "a red kite", "the kitchen sink", "three cakes", "the garden fence", "a laptop"]
    objects += ["the contract", "a violin"]
    places = ["in Paris", "at the harbour", "before lunch", "during the storm", "near the station", "on Sunday"]
    places += ["for the exam", "with great care"]
    combos = [" ".join(t) for t in itertools.product(subjects, verbs, objects, places)]  # 3,072
    random.Random(5).shuffle(combos)
    return combos[:n]


@pytest.fixture(scope="module")
def sentence_vectors() -> tuple[np.ndarray, np.ndarray]:
    from memstream.api.services.embedding import EmbeddingError, load_embedder

    try:
        emb = load_embedder()
    except EmbeddingError as exc:  # pragma: no cover - the default embedder is a dependency
        pytest.skip(f"no embedder: {exc}")
    texts = real_texts(2_600)
    vecs = emb.embed(texts)
    return vecs[:2_500], vecs[2_500:]


def test_graph_far_list_recall_on_real_vectors(sentence_vectors: tuple[np.ndarray, np.ndarray]) -> None:
    docs, queries = sentence_vectors
    graph = Feed(VectorProjection(hnsw_threshold=1_000, flush_batch=256, exact_far_limit=0))
    exact = Feed(VectorProjection(hnsw=False))
    evs = [store(i + 1, docs[i], model="minilm") for i in range(len(docs))]
    graph(*evs)
    exact(*evs)
    got = total = 0
    for q in queries:
        gw, gf = graph.proj.search(A, q, 10, window=500, reach=2_500)
        ew, ef = exact.proj.search(A, q, 10, window=500, reach=2_500)
        assert gw == ew  # the window is exact either way
        got += len(set(refs(gf)) & set(refs(ef)))
        total += len(ef)
    assert graph.proj.stats["hnsw_far"] > 0
    assert got / total >= 0.95


# -- property: graph maintenance never changes the state -------------------------------------


@settings(max_examples=40, deadline=None)
@given(ops)
def test_graph_maintenance_never_changes_the_state(spec: list[tuple[Any, ...]]) -> None:
    """With a graph from the first rows on, every add/remove/rebuild path runs; the state (and
    the window) must equal the exact-only fold's."""
    evs = build(spec)
    graph = Feed(VectorProjection(hnsw_threshold=2, flush_batch=2, exact_far_limit=0))(*evs)
    exact = Feed(VectorProjection(hnsw=False))(*evs)
    assert digest_of(graph.proj) == digest_of(exact.proj)
    for g, e in zip(small_answers(graph.proj), small_answers(exact.proj), strict=True):
        if isinstance(g, tuple):
            assert g[0] == e[0]
            assert len(g[1]) == len(e[1])
        else:
            assert g == e


# -- the segment's key index -------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "kill", "compact"]), st.integers(0, 40)), max_size=120))
def test_segment_key_index_matches_a_dict(script: list[tuple[str, int]]) -> None:
    """Positions by key, through appends, kills and compactions (keys in any order, so the
    sorted-array part is also used with its position column), equal a plain dict's."""
    from memstream.projections.vectors.segment import Segment

    seg = Segment("m", 0, 2, capacity=4)
    ref: dict[int, int] = {}
    recency = itertools.count()
    for op, n in script:
        key = (n * 7919 % 41) << 1  # keys in no particular order
        if op == "add" and key not in ref:
            seg.append(key, next(recency), 0, np.array([1.0, float(n)], np.float32))
            ref[key] = seg.n - 1
        elif op == "kill" and key in ref:
            assert seg.kill(key) == ref.pop(key)
        elif op == "compact":
            seg.compact()
            ref = {k: p for p, k in enumerate(seg.keys[: seg.n].tolist())}
        for probe in range(0, 84, 2):
            assert seg.pos(probe) == ref.get(probe)
            assert seg.has(probe) == (probe in ref)
        assert sorted(seg.live_keys()) == sorted(ref)
        assert seg.live_keys() == sorted(ref, key=ref.__getitem__)
    with pytest.raises(KeyError):
        seg.at(1)


# -- an agent's rows dropped in bulk -------------------------------------------------------------


class OneByOne(VectorProjection):
    """The fold as it was: every row of an agent's deletion or erasure removed on its own."""

    def _forget_many(self, ag: Any, keys: list[int]) -> None:
        for key in keys:
            self._forget(ag, key)


@settings(max_examples=40, deadline=None)
@given(ops, st.booleans(), st.integers(1, 3))
def test_bulk_drop_equals_removing_rows_one_by_one(spec: list[tuple[Any, ...]], erased: bool, every: int) -> None:
    """``agent_data.deleted`` (and an erasure) drops the named rows in one pass per segment; the
    state, the answers and a replay must equal the fold that removed them one at a time, graphs
    or none, whatever part of the agent's rows (ghosts, episodes, two models) it names."""
    evs = build(spec)
    idents = sorted({ev["payload"]["id"] for ev in evs if ev["type"] in ("memory.stored", "episode.archived")})
    evs.append(
        event(
            "agent_data.deleted",
            {"memory_ids": idents[::every], "episode_ids": idents[1::every], "erased": erased},
            agent="a",
        )
    )
    for kw in ({"hnsw_threshold": 2, "flush_batch": 2, "exact_far_limit": 0}, {"hnsw": False}):
        bulk = Feed(VectorProjection(**kw))(*evs)
        one = Feed(OneByOne(**kw))(*evs)
        assert digest_of(bulk.proj) == digest_of(one.proj)
        assert digest_of(bulk.replayed(**kw)) == digest_of(bulk.proj)
        assert small_answers(bulk.proj) == small_answers(one.proj)


def test_bulk_drop_zeroes_the_dropped_vectors() -> None:
    """An erased agent's vectors leave no bytes in its segments, and the graph built over them
    is dropped (rebuilt from what is left once that reaches the threshold)."""
    f = Feed(VectorProjection(hnsw_threshold=4, flush_batch=1))
    f(*[store(i, unit(100 + i)) for i in range(1, 3001)], archive(3001, unit(7)))
    ag = f.proj._agents["a"]
    assert ag.graphs["m1"].index is not None

    def held() -> bytes:  # the rows held, dead ones too (a chunk's room past them is never saved)
        return b"".join(seg.row(p).tobytes() for seg in ag.segs.values() for p in range(seg.n))

    # too few dead rows for a compaction: they stay in place, zeroed
    f(event("agent_data.deleted", {"memory_ids": list(range(1, 501)), "episode_ids": [], "erased": True}))
    assert ag.segs[("m1", 0)].n == 3000
    raw = held()
    assert all(unit(100 + i).astype("<f4").tobytes() not in raw for i in range(1, 501))
    assert unit(100 + 501).astype("<f4").tobytes() in raw
    f(event("agent_data.deleted", {"memory_ids": list(range(501, 3000)), "episode_ids": [], "erased": True}))
    assert f.proj.count(A) == 2
    raw = held()
    assert all(unit(100 + i).astype("<f4").tobytes() not in raw for i in range(1, 3000))
    assert unit(100 + 3000).astype("<f4").tobytes() in raw
    g = ag.graphs["m1"]
    assert g.index is None  # two rows left, under the threshold: no graph until there are more
    assert g.pending == {3000 << 1, (3001 << 1) | 1}
    assert refs(f.proj.search(A, unit(100 + 3000), 1)[0]) == ["mem:3000"]
