"""The vector projection (projections/vectors/): folds, the scan window and the far list
(CONTRACTS R8), isolation (R10), the model filter, snapshots and their sidecars, rebuild
equality (H2), the graph against exact search on real sentence vectors, and a replay property."""

from __future__ import annotations

import functools
import itertools
import random
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.projections.runner import ProjectionRunner, digest_of, replay
from memstream.projections.scope import ScopeFilter
from memstream.projections.vectors import SnapshotRejected, VectorProjection
from memstream.streams import commands as c
from memstream.streams.decision.dispatch import decide
from memstream.streams.decision.limits import Limits
from memstream.streams.decision.state import DecisionState
from memstream.streams.decision.verdict import DecideContext
from memstream.streams.events import Actor, Embedding, Scope, decode
from memstream.streams.log.port import LogRecord
from memstream.streams.snapshots import SnapshotStore

DIM = 16
T0 = "2026-01-01T00:00:00+00:00"


def unit(seed: int, dim: int = DIM) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


def event(
    type_: str,
    payload: dict[str, Any],
    *,
    agent: str = "a",
    project: str = "",
    channel: str = "",
    vec: np.ndarray | None = None,
    model: str = "m1",
) -> dict[str, Any]:
    """An event as folds receive it: Event.model_dump() decoded, the attachment as ``vector``."""
    ev: dict[str, Any] = {
        "id": "e",
        "type": type_,
        "v": 1,
        "scope": {"agent_id": agent, "project_id": project, "channel": channel},
        "actor": {"client_id": "t", "agent_id": agent, "session_id": ""},
        "occurred_at": T0,
        "command_id": "c",
        "payload": dict(payload),
    }
    if vec is not None:
        raw = np.ascontiguousarray(vec, dtype="<f4")
        ev["payload"]["embedding"] = {"model": model, "dim": int(raw.shape[0]), "dtype": "f32"}
        ev["vector"] = raw.tobytes()
    elif type_ in ("memory.stored", "memory.updated", "episode.archived"):
        ev["payload"]["embedding"] = None
    return ev


def store(mid: int, vec: np.ndarray | None, **kw: Any) -> dict[str, Any]:
    return event("memory.stored", {"id": mid, "content": f"m{mid}"}, vec=vec, **kw)


def archive(eid: int, vec: np.ndarray | None, **kw: Any) -> dict[str, Any]:
    return event("episode.archived", {"id": eid, "summary": f"e{eid}"}, vec=vec, **kw)


def update(mid: int, vec: np.ndarray | None, **kw: Any) -> dict[str, Any]:
    return event("memory.updated", {"id": mid, "content": f"m{mid}'", "metadata": None}, vec=vec, **kw)


def reembed(ident: int, vec: np.ndarray, model: str, kind: str = "mem", **kw: Any) -> dict[str, Any]:
    return event("memory.reembedded", {"id": ident, "kind": kind}, vec=vec, model=model, **kw)


class Feed:
    """Applies events at increasing offsets and keeps them for replays."""

    def __init__(self, proj: VectorProjection | None = None) -> None:
        self.proj = proj or VectorProjection()
        self.events: list[dict[str, Any]] = []

    def __call__(self, *evs: dict[str, Any]) -> Feed:
        for ev in evs:
            self.proj.apply(len(self.events), ev)
            self.proj.offset = len(self.events)
            self.events.append(ev)
        return self

    def replayed(self, **kw: Any) -> VectorProjection:
        fresh = VectorProjection(**kw)
        for off, ev in enumerate(self.events):
            fresh.apply(off, ev)
        return fresh


def refs(hits: list[tuple[str, float]]) -> list[str]:
    return [r for r, _ in hits]


A = ScopeFilter("a")


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


# -- snapshots, rebuild (H2), damaged sidecars ---------------------------------------------------


def mixed_events(n: int = 120) -> list[dict[str, Any]]:
    evs: list[dict[str, Any]] = []
    for i in range(1, n + 1):
        project = ("", "x", "y")[i % 3]
        if i % 7 == 0:
            evs.append(archive(i, unit(i), project=project, channel="c"))
        elif i % 11 == 0:
            evs.append(store(i, None, project=project))
        else:
            evs.append(store(i, unit(i), project=project, agent=("a", "b")[i % 2], model=("m1", "m2")[i % 5 == 0]))
        if i % 13 == 0:
            evs.append(event("memory.deleted", {"id": i - 2}, agent=("a", "b")[(i - 2) % 2]))
        if i % 17 == 0:
            evs.append(update(i - 1, unit(1000 + i), agent=("a", "b")[(i - 1) % 2]))
        if i % 19 == 0:
            evs.append(reembed(i - 3, unit(2000 + i), "m2", agent=("a", "b")[(i - 3) % 2]))
    return evs


def answers(proj: VectorProjection) -> list[Any]:
    out = []
    for agent in ("a", "b"):
        for scope in (ScopeFilter(agent), ScopeFilter(agent, "x"), ScopeFilter(agent, "", "c")):
            for seed in (1, 5, 50):
                for model in (None, "m1", "m2"):
                    out.append(proj.search(scope, unit(seed), 4, window=8, reach=40, model=model))
            out.append(proj.count(scope))
    return out


def test_snapshot_round_trip_and_rebuild_equal_live(tmp_path: Path) -> None:
    store_ = SnapshotStore(tmp_path)
    live = Feed(VectorProjection(store_))(*mixed_events())
    live.proj.search(A, unit(1), 3)  # searches compact and sort; the state must not change
    body = live.proj.to_snapshot()
    assert len(str(body)) < 400  # vectors are in the sidecar, not the JSON
    restored = VectorProjection(store_)
    restored.load_snapshot(body)  # raises SnapshotRejected when the sidecar is not accepted
    rebuilt = live.replayed()
    assert digest_of(restored) == digest_of(live.proj) == digest_of(rebuilt)
    assert answers(restored) == answers(live.proj) == answers(rebuilt)
    # restored and live keep agreeing as more events arrive
    more = [store(500 + i, unit(500 + i), project="x") for i in range(10)] + [event("memory.deleted", {"id": 1})]
    for off, ev in enumerate(more, start=len(live.events)):
        restored.apply(off, ev)
    live(*more)
    assert digest_of(restored) == digest_of(live.proj) == digest_of(live.replayed())
    # equal states, equal snapshots: a state reached another way digests the same
    assert digest_of(Feed()(store(1, unit(1)), store(2, unit(2)))(event("memory.deleted", {"id": 2})).proj) == (
        digest_of(Feed()(store(1, unit(1))).proj)
    )
    # every part of a row is state: vector, model, scope, kind, recency, and ghosts too
    one = digest_of(Feed()(store(1, unit(1))).proj)
    assert one != digest_of(Feed()(store(1, unit(2))).proj)
    assert one != digest_of(Feed()(store(1, unit(1), model="m2")).proj)
    assert one != digest_of(Feed()(store(1, unit(1), project="x")).proj)
    assert one != digest_of(Feed()(store(1, unit(1), channel="c")).proj)
    assert one != digest_of(Feed()(store(1, unit(1), agent="b")).proj)
    assert one != digest_of(Feed()(archive(1, unit(1))).proj)
    assert one != digest_of(Feed()(store(9, None), store(1, unit(1))).proj)  # recency 1, plus a ghost
    assert digest_of(Feed()(store(9, None)).proj) != digest_of(Feed().proj)


class MemoryLog:
    """Enough of the EventLog port for the runner: records with their attachments."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        import orjson

        self.records = [
            LogRecord(
                i,
                0,
                ev["scope"]["agent_id"],
                ev["type"],
                orjson.dumps({k: v for k, v in ev.items() if k != "vector"}),
                ev.get("vector"),
            )
            for i, ev in enumerate(events)
        ]

    def end_offset(self) -> int:
        return len(self.records)

    def read(
        self, start: int = 0, stop: int | None = None, *, limit: int = 10_000, vectors: bool = True, **_: Any
    ) -> list[LogRecord]:
        recs = self.records[start : stop if stop is not None else len(self.records)][:limit]
        return recs if vectors else [LogRecord(r.offset, r.partition, r.agent_id, r.type, r.value) for r in recs]


def test_runner_checkpoint_restore_and_damaged_sidecars(tmp_path: Path) -> None:
    evs = mixed_events(300)
    log_ = MemoryLog(evs)
    snaps = SnapshotStore(tmp_path)
    graphs_early = functools.partial(VectorProjection, snaps, hnsw_threshold=50)
    runner = ProjectionRunner(log_, [graphs_early], snaps)  # type: ignore[arg-type]
    runner.catch_up()
    live = runner.projections[0]
    runner.checkpoint()
    fresh = replay(log_, [VectorProjection])  # type: ignore[arg-type]
    assert fresh.digests() == runner.digests()  # H2

    # a sound snapshot resumes at its offset with the same digest and answers
    r2 = ProjectionRunner(log_, [graphs_early], snaps)  # type: ignore[arg-type]
    r2.restore()
    assert r2.offset == len(evs) - 1
    assert r2.digests() == runner.digests()
    assert answers(r2.projections[0]) == answers(live)  # type: ignore[arg-type]

    # a damaged graph sidecar only costs a graph rebuild
    (blob,) = [b for b in snaps.blob_names("vectors-") if b.endswith(".hnsw")]
    path = snaps.blob_path(blob)
    raw = bytearray(path.read_bytes())
    raw[-10] ^= 0xFF
    path.write_bytes(bytes(raw))
    r3 = ProjectionRunner(log_, [graphs_early], snaps)  # type: ignore[arg-type]
    r3.restore()
    assert r3.offset == len(evs) - 1 and r3.digests() == runner.digests()
    assert r3.projections[0].stats["graph_builds"] >= 1  # type: ignore[attr-defined]

    # a damaged vector sidecar is no snapshot: the projection starts over from the log
    (blob,) = [b for b in snaps.blob_names("vectors-") if not b.endswith(".hnsw")]
    path = snaps.blob_path(blob)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    assert snaps.load_blob(blob) is None
    with pytest.raises(SnapshotRejected):
        VectorProjection(snaps).load_snapshot(snaps.load("vectors")["state"])  # type: ignore[index]
    r4 = ProjectionRunner(log_, [functools.partial(VectorProjection, snaps)], snaps)  # type: ignore[arg-type]
    r4.restore()
    proj = r4.projections[0]
    # rebuilt by its factory: empty, from offset -1, and still writing its sidecars to ``snaps``
    assert proj.offset == -1 and proj.count(A) == 0 and proj.blobs is snaps  # type: ignore[attr-defined]
    r4.catch_up()
    assert r4.digests() == runner.digests()

    # so is a missing one
    snaps.drop_blob(blob)
    r5 = ProjectionRunner(log_, [functools.partial(VectorProjection, snaps)], snaps)  # type: ignore[arg-type]
    r5.restore()
    assert r5.offset == -1
    # and a snapshot loaded with no sidecar store attached
    bare = VectorProjection()
    with pytest.raises(SnapshotRejected):
        bare.load_snapshot(live.to_snapshot())
    assert bare.offset == -1 and bare.count(A) == 0


def test_sidecars_are_content_addressed_and_collected(tmp_path: Path) -> None:
    snaps = SnapshotStore(tmp_path)
    f = Feed(VectorProjection(snaps))(store(1, unit(1)))
    snaps.save("vectors", {"offset": 0, "state": f.proj.to_snapshot()})
    first = set(snaps.blob_names("vectors-"))
    assert len(first) == 2
    f.proj.to_snapshot()  # unchanged state: nothing rewritten
    assert set(snaps.blob_names("vectors-")) == first
    f(store(2, unit(2)))
    f.proj.to_snapshot()  # a new state before its JSON is saved: the old sidecar is kept
    assert first < set(snaps.blob_names("vectors-"))
    snaps.save("vectors", {"offset": 1, "state": f.proj.to_snapshot()})
    f(store(3, unit(3)))
    snaps.save("vectors", {"offset": 2, "state": f.proj.to_snapshot()})
    assert not first & set(snaps.blob_names("vectors-"))
    assert len(snaps.blob_names("vectors-")) == 4  # the saved state's pair and the previous pair


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


# -- property: any history, replayed, gives the same state and answers --------------------------

ops = st.lists(
    st.tuples(
        st.sampled_from(
            ["store"] * 4 + ["store_bare", "episode", "update", "update_bare", "reembed", "delete", "delete_ep", "wipe"]
        ),
        st.integers(0, 30),  # which id (for updates/deletes) or vector seed
        st.sampled_from(["a", "b"]),
        st.sampled_from(["", "x"]),
        st.sampled_from(["", "c"]),
        st.sampled_from(["m1", "m2"]),
    ),
    max_size=70,
)


def build(spec: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    evs: list[dict[str, Any]] = []
    next_id = itertools.count(1)
    made: list[tuple[str, int, str]] = []  # (kind, id, agent)
    for op, n, agent, project, channel, model in spec:
        vec = unit(n % 12)  # a small pool of vectors: ties happen
        if op in ("store", "store_bare", "episode"):
            ident = next(next_id)
            if op == "episode":
                evs.append(archive(ident, vec, agent=agent, project=project, channel=channel, model=model))
                made.append(("ep", ident, agent))
            else:
                v = None if op == "store_bare" else vec
                evs.append(store(ident, v, agent=agent, project=project, channel=channel, model=model))
                made.append(("mem", ident, agent))
        elif made:
            kind, ident, owner = made[n % len(made)]
            if op == "update" and kind == "mem":
                evs.append(update(ident, vec, agent=owner, model=model))
            elif op == "update_bare" and kind == "mem":
                evs.append(update(ident, None, agent=owner))
            elif op == "reembed":
                evs.append(reembed(ident, vec, model, kind=kind, agent=owner))
            elif op == "delete" and kind == "mem":
                evs.append(event("memory.deleted", {"id": ident}, agent=owner))
            elif op == "delete_ep" and kind == "ep":
                evs.append(event("episode.deleted", {"id": ident}, agent=owner))
            elif op == "wipe":
                mine = [i for k, i, a in made if a == owner]
                evs.append(
                    event(
                        "agent_data.deleted",
                        {"memory_ids": mine[::2], "episode_ids": mine, "profile": False, "kept_locked": []},
                        agent=owner,
                    )
                )
    return evs


def small_answers(proj: VectorProjection) -> list[Any]:
    out = []
    for agent in ("a", "b"):
        for scope in (ScopeFilter(agent), ScopeFilter(agent, "x"), ScopeFilter(agent, "", "c")):
            for seed in (0, 3):
                for model in (None, "m2"):
                    out.append(proj.search(scope, unit(seed), 3, window=4, reach=12, model=model))
            out.append(proj.count(scope))
    return out


@settings(max_examples=150, deadline=None)
@given(ops, st.integers(0, 70))
def test_replay_gives_the_same_digest_and_answers(spec: list[tuple[Any, ...]], cut: int) -> None:
    evs = build(spec)
    live = Feed()
    with tempfile.TemporaryDirectory() as tmp:
        snaps = SnapshotStore(Path(tmp))
        restored: VectorProjection | None = None
        for off, ev in enumerate(evs):
            live(ev)
            if off % 9 == 4:
                small_answers(live.proj)  # searches compact/sort in place: state must not move
            if off == min(cut, len(evs) - 1):
                live.proj.blobs = snaps
                body = live.proj.to_snapshot()
                live.proj.blobs = None
                restored = VectorProjection(snaps)
                restored.load_snapshot(body)  # raises SnapshotRejected when the sidecar is not accepted
            elif restored is not None:
                restored.apply(off, ev)
        replayed = live.replayed()
        assert digest_of(replayed) == digest_of(live.proj)
        assert small_answers(replayed) == small_answers(live.proj)
        if restored is not None:
            assert digest_of(restored) == digest_of(live.proj)
            assert small_answers(restored) == small_answers(live.proj)


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
