"""The vector projection's snapshots on disk (a SnapshotStore in a temporary directory): round
trip and rebuild equality (H2), also through ProjectionRunner, damaged and missing sidecars,
sidecar collection, and the replay property with a snapshot restored mid-way. The folds, the
window and the graph: tests/unit/test_vectors.py."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.projections.runner import ProjectionRunner, digest_of, replay
from memstream.projections.scope import ScopeFilter
from memstream.projections.vectors import SnapshotRejected, VectorProjection
from memstream.streams.log.port import LogRecord
from memstream.streams.snapshots import SnapshotStore
from tests.support.blob_watch import mapped_rss_kb
from tests.support.vector_events import (
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


def test_a_mapped_sidecar_is_verified_aligned_and_private(tmp_path: Path) -> None:
    """The vectors sidecar loads as a private map of its file: damage is caught as on a read,
    its arrays are aligned (views, no copy), and what the fold then writes (a deleted row
    zeroed) stays in the process: the file keeps its bytes, a later load is unaffected."""
    snaps = SnapshotStore(tmp_path)
    live = Feed(VectorProjection(snaps))(*[store(i + 1, unit(i)) for i in range(70)])
    body = live.proj.to_snapshot()
    blob = body["blob"]
    path = snaps.blob_path(blob)
    on_disk = path.read_bytes()
    mapped = snaps.map_blob(blob)
    assert mapped is not None and bytes(mapped) == bytes(snaps.load_blob(blob) or b"")
    restored = VectorProjection(snaps)
    restored.load_snapshot(body)
    seg = next(iter(restored._agents["a"].segs.values()))
    assert all(c.flags.aligned and not c.flags.owndata for c in seg.chunks)  # views of the map
    assert [c.shape[0] for c in seg.chunks] == [70]  # the tail chunk as long as its rows
    later = [event("memory.deleted", {"id": 3}), store(71, unit(5))]
    for off, ev in enumerate(later, start=70):
        restored.apply(off, ev)
    assert path.read_bytes() == on_disk
    again = VectorProjection(snaps)
    again.load_snapshot(body)
    assert again.count(A) == 70
    live(*later)
    assert small_answers(restored) == small_answers(live.proj)
    assert digest_of(restored) == digest_of(live.proj)  # (writes a new sidecar, drops this one)
    raw = bytearray(on_disk)
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    assert snaps.map_blob(blob) is None
    path.write_bytes(on_disk[:-1])
    assert snaps.map_blob(blob) is None
    path.unlink()
    assert snaps.map_blob(blob) is None


def test_a_checkpoint_maps_the_vectors_it_wrote(tmp_path: Path) -> None:
    """After a checkpoint the segments' vectors are views of the sidecar just written (the
    fold's own arrays are let go), with the same answers and digest as a twin never
    checkpointed; later folds (stores, updates, deletes) write private pages, not the file;
    the next checkpoint maps its own sidecar."""
    snaps = SnapshotStore(tmp_path)
    evs = mixed_events(120)
    live, twin = Feed(VectorProjection(snaps)), Feed()
    live(*evs)
    twin(*evs)
    body = live.proj.to_snapshot()
    path = snaps.blob_path(body["blob"])
    on_disk = path.read_bytes()
    for ag in live.proj._agents.values():
        for seg in ag.segs.values():
            assert seg.chunks and all(not c.flags.owndata and c.flags.aligned for c in seg.chunks)
            assert not seg._extra  # the key index was brought up to date, without a compaction
    assert answers(live.proj) == answers(twin.proj)
    assert digest_of(live.proj) == digest_of(twin.proj)
    later = [
        store(500, unit(500)),
        update(5, unit(505)),
        event("memory.deleted", {"id": 8}),
        reembed(10, unit(510), "m2"),
        store(501, unit(501), agent="b"),
    ]
    live(*later)
    twin(*later)
    assert path.read_bytes() == on_disk  # the map is private: the fold's writes stay in memory
    assert answers(live.proj) == answers(twin.proj)
    assert digest_of(live.proj) == digest_of(twin.proj)
    second = live.proj.to_snapshot()
    assert second["blob"] != body["blob"]
    restored = VectorProjection(snaps)
    restored.load_snapshot(second)
    assert answers(restored) == answers(twin.proj) == answers(live.proj)
    assert digest_of(restored) == digest_of(twin.proj)


def test_a_loaded_sidecar_is_not_held_resident(tmp_path: Path) -> None:
    """Loading reads the whole sidecar for its checksum; those pages are then let go from the
    process (page cache only), and come back as a search reads the rows, with right answers."""
    snaps = SnapshotStore(tmp_path)
    live = Feed(VectorProjection(snaps))(*[store(i + 1, unit(i, 256)) for i in range(3000)])
    body = live.proj.to_snapshot()
    path = snaps.blob_path(body["blob"])
    assert path.stat().st_size > 3_000_000
    restored = VectorProjection(snaps)
    restored.load_snapshot(body)
    assert mapped_rss_kb(path) < 64  # 3 MB were read to verify it; none held after
    q = unit(7, 256)
    assert restored.search(A, q, 5, window=3000) == live.proj.search(A, q, 5, window=3000)
    assert mapped_rss_kb(path) > 1000  # the rows the window scanned, read again from the file


# -- property: any history, replayed, gives the same state and answers --------------------------


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
