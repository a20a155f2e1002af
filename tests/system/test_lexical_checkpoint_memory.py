"""What a lexical checkpoint holds at once: the sidecar's arrays are made as they are written,
a keyword merge moves its postings a run at a time, and the rows are hashed and listed without
a second copy (docs/benchmarks.md, "The cold start's peak"). Memory is read with tracemalloc,
which counts numpy's buffers; no timing is asserted."""

from __future__ import annotations

import hashlib
import random
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from memstream.projections.lexical import LexicalProjection, sidecar
from memstream.projections.lexical import words as wordsmod
from memstream.projections.lexical.index import AgentIndex
from memstream.projections.lexical.rows import SnapshotRows, rows_of
from memstream.projections.lexical.words import WordIndex
from memstream.projections.vectors.spill import page_out
from memstream.streams.snapshots import SnapshotStore
from tests.support.blob_watch import mapped_rss_kb as mapped_kb
from tests.support.blob_watch import resident_while_saving
from tests.unit.test_lexical import A, answers, deleted, fold, stored


def traced_peak(work: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def many_rows(n: int, seed: int = 7) -> LexicalProjection:
    """Rows of 20 words from a small vocabulary: postings, not strings, make up the sidecar."""
    rng = random.Random(seed)
    vocab = [f"word{i}" for i in range(300)]
    p = LexicalProjection()
    p.apply_many((i, stored(i, " ".join(rng.choice(vocab) for _ in range(20)))) for i in range(1, n + 1))
    return p


def test_the_sidecar_is_written_as_it_is_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wordsmod, "MOVE_RUN", 4096, raising=False)
    p = many_rows(20_000)
    store = SnapshotStore(tmp_path)
    peak = traced_peak(lambda: sidecar.write(store, "lexical-h", p.agents, "h"))
    size = store.blob_path("lexical-h").stat().st_size
    # Made whole before the first byte was written, the sidecar was held 2.4 times over.
    assert peak < 0.8 * size, (peak, size)
    restored = LexicalProjection()
    mv = store.map_blob("lexical-h")
    assert mv is not None
    restored.agents = sidecar.read(mv, "h", rows_of(orjson.loads(orjson.dumps(p.to_snapshot()))))
    restored.offset = p.offset
    assert answers(restored) == answers(p)


def test_a_merge_moves_postings_a_run_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(3)
    pairs = [(slot, [f"w{rng.randrange(2000)}" for _ in range(15)]) for slot in range(30_000)]

    def built(run: int) -> tuple[WordIndex, int]:
        monkeypatch.setattr(wordsmod, "MOVE_RUN", run, raising=False)
        monkeypatch.setattr(WordIndex, "MERGE_MIN", 10**9)  # everything pending, merged below
        w = WordIndex()
        for slot, ws in pairs[:29_000]:
            w.add(slot, dict.fromkeys(ws))
        w.merge()
        for slot, ws in pairs[29_000:]:
            w.add(slot, dict.fromkeys(ws))
        return w, traced_peak(w.merge)

    whole, _ = built(1 << 40)
    for run in (1, 7, 4096):
        w, peak = built(run)
        assert np.array_equal(w.ptr, whole.ptr) and np.array_equal(w.flat, whole.flat)
        assert w.slots(np.arange(50)).tolist() == whole.slots(np.arange(50)).tolist()
    # The merged flat array itself, plus the few pending pairs' and the words' scratch; the old
    # postings' int64 positions made at once were over twice the flat array on top of it.
    _, peak = built(4096)
    assert peak < 2.2 * whole.flat.nbytes, (peak, whole.flat.nbytes)


def test_rows_are_listed_and_hashed_as_before() -> None:
    """The sidecar's name hashes the rows in version 3's layout (a list each), so a version-3
    checkpoint's sidecar keeps its name; the body's columns hold the same rows."""
    p = fold(stored(3, "gamma row"), stored(1, "alpha row"), stored(2, "beta row"), deleted(1), stored(4, "delta"))
    for idx in p.agents.values():
        assert idx.snapshot_rows() == [list(r) for r in idx.live_rows()]
    for proj in (p, many_rows(3_000)):
        body = orjson.loads(orjson.dumps(proj.to_snapshot()))
        lists = {a: idx.snapshot_rows() for a, idx in sorted(proj.agents.items()) if idx.slot_of}
        expected = hashlib.sha256(b"%d:" % sidecar.FORMAT + orjson.dumps(lists)).hexdigest()[:32]
        assert body["blob"] == f"lexical-{expected}"
        assert {a: list(r.rows()) for a, r in rows_of(body).items()} == {
            a: [tuple(r) for r in rows] for a, rows in lists.items()
        }


def test_the_sidecar_is_written_before_the_rows_are_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each is ~0.14 GB at 1M memories: the rows are hashed a part at a time, the sidecar written,
    and only then are the rows listed for the body."""
    events: list[str] = []
    real_write, real_rows = sidecar.write, SnapshotRows.of_index

    def write(*args: Any) -> None:
        events.append("sidecar")
        real_write(*args)

    def rows(idx: AgentIndex) -> SnapshotRows:
        events.append("rows")
        return real_rows(idx)

    monkeypatch.setattr(sidecar, "write", write)
    monkeypatch.setattr(SnapshotRows, "of_index", rows)
    p = many_rows(5_000)
    p.blobs = SnapshotStore(tmp_path)
    body = p.to_snapshot()
    assert events == ["sidecar", "rows"]
    assert list(rows_of(body)["a"].rows()) == p.agents["a"].live_rows()


def test_a_restored_sidecar_is_written_again_from_its_own_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running server's checkpoint: the index was restored from a sidecar (its postings views
    of the map) and a few writes since unpacked some terms. The new sidecar copies the rest from
    the map in runs, without an index of every posting, and hands the pages back as it goes (at
    1M memories the two were +0.2 GB of the checkpoint's +0.4 GB: wave 12)."""
    store = SnapshotStore(tmp_path)
    live = many_rows(40_000)
    live.blobs = store
    body = orjson.loads(orjson.dumps(live.to_snapshot()))
    restored = LexicalProjection(store)
    restored.load_snapshot(body)
    old = store.blob_path(body["blob"])
    more = [stored(40_000 + i, f"word{i} word{7 * i} fresh{i}") for i in range(1, 6)]
    fold(*more, proj=restored)
    idx = restored.agents["a"]
    postings = sum(c.nbytes for c in idx.post.cols)
    assert idx.post.base  # most terms still packed: views of the map
    idx.kw.merge()  # the write's first step, whose own peak is test_a_merge_moves_postings_a_run_at_a_time's
    assert restored._mapped is not None
    page_out(np.frombuffer(restored._mapped, dtype=np.uint8))  # as long after a restore: none resident
    assert mapped_kb(old) < 64
    peak = traced_peak(lambda: sidecar.write(store, "lexical-again", restored.agents, "again"))
    # Copied through int64 positions of every posting, the base took twice its size again (2.0x here).
    assert peak < 0.5 * postings, (peak, postings)
    # Once more, watched (apart: reading /proc/self/smaps allocates, and tracemalloc counts it).
    page_out(np.frombuffer(restored._mapped, dtype=np.uint8))
    resident = resident_while_saving(monkeypatch, old)
    sidecar.write(store, "lexical-watched", restored.agents, "again")
    monkeypatch.undo()
    assert resident and max(resident) < old.stat().st_size // 1024 // 2  # all of it, before page-out
    again = LexicalProjection()
    mv = store.map_blob("lexical-again")
    assert mv is not None
    again.agents = sidecar.read(mv, "again", rows_of(orjson.loads(orjson.dumps(restored.to_snapshot()))))
    again.offset = restored.offset
    assert answers(again) == answers(fold(*more, proj=live))


def test_a_restored_sidecar_is_written_again_without_what_was_deleted_since(tmp_path: Path) -> None:
    """The runs of the map go through the same renumbering as before when rows died since the
    restore: their slots, and words and grams only they held, are left out of the new sidecar."""
    store = SnapshotStore(tmp_path)
    live = fold(stored(1, "zanzibarquux lonely harbour"), proj=many_rows(5_000))
    live.blobs = store
    restored = LexicalProjection(store)
    restored.load_snapshot(orjson.loads(orjson.dumps(live.to_snapshot())))
    more = [deleted(1), deleted(17), stored(6_000, "word3 fresh row"), deleted(4_000)]
    fold(*more, proj=restored)
    idx = restored.agents["a"]
    assert idx.post.base and idx.dead == 3  # packed views of the map, dead slots not compacted
    sidecar.write(store, "lexical-again", restored.agents, "again")
    blob = store.blob_path("lexical-again").read_bytes()
    assert b"zanzibarquux" not in blob and b"zanzibarqu" not in blob
    mv = store.map_blob("lexical-again")
    assert mv is not None
    again = LexicalProjection()
    again.agents = sidecar.read(mv, "again", rows_of(orjson.loads(orjson.dumps(restored.to_snapshot()))))
    again.offset = restored.offset
    assert answers(again) == answers(fold(*more, proj=live))
    assert again.keyword(A, "zanzib", 5) == [] and again.search(A, "lonely", 5) == []
