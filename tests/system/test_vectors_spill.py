"""Spilled vector chunks (projections/vectors/spill.py): a fold's full chunks are shared maps of
temporary files in the snapshot directory, released from the process once full and once written
to a sidecar; the rows, the hash, the sidecar and the answers are those of anonymous chunks."""

from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from memstream.projections.vectors import VectorProjection
from memstream.projections.vectors.segment import CHUNK
from memstream.projections.vectors.spill import Spill, page_out, release, spilled
from memstream.streams.snapshots import SnapshotStore
from tests.support.blob_watch import resident_while_saving
from tests.support.vector_events import DIM, A, store, unit, update

ROWS = CHUNK + CHUNK // 2  # one full chunk and a partial one

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps")


def vectors(n: int) -> np.ndarray:
    v = np.random.default_rng(7).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def folded(directory: Path, *, spill: bool) -> VectorProjection:
    proj = VectorProjection(SnapshotStore(directory), hnsw=False)
    if not spill:
        proj.spill = None
    for i, v in enumerate(vectors(ROWS)):
        proj.apply(i, store(i + 1, v))
    return proj


def mapping_of(arr: np.ndarray) -> tuple[str, int]:
    """The file and the resident kB (/proc/self/smaps) of the mapping holding ``arr``'s data."""
    at = arr.__array_interface__["data"][0]
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        head = line.split()
        if "-" not in head[0] or len(head) < 5:
            continue
        lo, hi = (int(x, 16) for x in head[0].split("-"))
        if lo <= at < hi:
            rss = next(int(x.split()[1]) for x in lines[i + 1 :] if x.startswith("Rss:"))
            return " ".join(head[5:]), rss
    raise AssertionError("no mapping holds the array")


def test_a_fold_keeps_its_full_chunks_in_files_of_the_snapshot_directory(tmp_path: Path) -> None:
    proj = folded(tmp_path, spill=True)
    seg = next(iter(proj._agents["a"].segs.values()))
    assert seg.n == ROWS and len(seg.chunks) == 2
    for chunk in seg.chunks:
        assert spilled(chunk) is not None
        path, _ = mapping_of(chunk)
        assert path.startswith(str(tmp_path)), path  # a temporary file there, not anonymous memory
    # the full chunk's pages left the process once it filled; its rows read back from the file
    assert mapping_of(seg.chunks[0])[1] == 0
    assert np.array_equal(seg.gather(np.arange(ROWS)), vectors(ROWS))


def test_spilled_and_anonymous_chunks_give_the_same_state_sidecar_and_answers(tmp_path: Path) -> None:
    spilt = folded(tmp_path / "s", spill=True)
    plain = folded(tmp_path / "p", spill=False)
    assert spilled(next(iter(plain._agents["a"].segs.values())).chunks[0]) is None
    assert spilt.content_hash == plain.content_hash
    q = vectors(ROWS)[123]
    scope = A
    assert spilt.search(scope, q, 5) == plain.search(scope, q, 5)
    body_s, body_p = spilt.to_snapshot(), plain.to_snapshot()
    assert body_s == body_p
    name = body_s["blob"] + ".blob"
    assert (tmp_path / "s" / name).read_bytes() == (tmp_path / "p" / name).read_bytes()
    # after the checkpoint the rows are views of the sidecar, none of them resident yet
    seg = next(iter(spilt._agents["a"].segs.values()))
    assert all(spilled(c) is None for c in seg.chunks)
    path, rss = mapping_of(seg.chunks[0])
    assert path.endswith(name) and rss == 0
    assert spilt.search(scope, q, 5) == plain.search(scope, q, 5)


def test_rows_appended_after_a_load_spill_too(tmp_path: Path) -> None:
    proj = folded(tmp_path, spill=True)
    body = proj.to_snapshot()
    again = VectorProjection(SnapshotStore(tmp_path), hnsw=False)
    again.load_snapshot(body)
    extra = vectors(ROWS + CHUNK)[ROWS:]
    for i, v in enumerate(extra):
        again.apply(ROWS + i, store(ROWS + i + 1, v))
    seg = next(iter(again._agents["a"].segs.values()))
    assert seg.n == ROWS + CHUNK and spilled(seg.chunks[-1]) is not None
    assert np.array_equal(seg.gather(np.arange(seg.n)), vectors(ROWS + CHUNK))


def test_release_leaves_anonymous_and_sidecar_arrays_alone(tmp_path: Path) -> None:
    plain = np.ones((64, DIM), np.float32)
    assert not release(plain) and plain.sum() == 64 * DIM  # DONTNEED would have zeroed it
    chunk = Spill(tmp_path).chunk(CHUNK, DIM)
    chunk[:] = 2.0
    assert release(chunk[:10])  # a view releases its whole chunk; the bytes stay the file's
    assert mapping_of(chunk)[1] == 0 and float(chunk.sum()) == 2.0 * CHUNK * DIM


def test_page_out_hands_back_a_sidecar_maps_pages_and_keeps_its_changed_rows(tmp_path: Path) -> None:
    path = tmp_path / "rows.bin"
    rows = np.arange(CHUNK * DIM, dtype=np.float32).reshape(CHUNK, DIM)
    with path.open("wb") as f:
        f.write(rows.tobytes())
        os.fsync(f.fileno())  # as save_blob leaves a sidecar: clean pages, which reclaim can take
    with path.open("rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # as map_blob maps a sidecar
    mapped = np.frombuffer(m, dtype=np.float32).reshape(CHUNK, DIM)
    assert float(mapped.sum()) == float(rows.sum())  # every page read: resident
    mapped[100] = -1.0  # a row the fold changed: the process's own page now
    assert mapping_of(mapped)[1] * 1024 >= mapped.nbytes
    assert page_out(mapped)
    assert mapping_of(mapped)[1] * 1024 < mapped.nbytes // 4  # the file's pages left the process
    assert np.all(mapped[100] == -1.0)  # the changed row survived (DONTNEED would have lost it)
    assert np.array_equal(np.delete(mapped, 100, axis=0), np.delete(rows, 100, axis=0))
    assert not page_out(np.ones((4, DIM), np.float32))  # anonymous memory: nothing to do


def test_a_checkpoint_hands_back_the_loaded_sidecars_pages_as_it_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server restored from a checkpoint has its vectors mapped from the sidecar; the next
    checkpoint reads every row to write the new sidecar, and must not keep them all resident
    (at a million rows, 1.5 GB on top of the server: wave 11)."""
    snaps = SnapshotStore(tmp_path)
    wide, n = 256, 3 * CHUNK
    live = VectorProjection(snaps, hnsw=False)
    for i in range(n):
        live.apply(i, store(i + 1, unit(i, wide)))
    body = live.to_snapshot()
    del live
    restored = VectorProjection(snaps, hnsw=False)
    restored.load_snapshot(body)
    old = snaps.blob_path(body["blob"])
    restored.apply(n, store(n + 1, unit(n, wide)))
    restored.apply(n + 1, update(5, -unit(4, wide)))  # changes a mapped row: a private page
    resident = resident_while_saving(monkeypatch, old)
    second = restored.to_snapshot()
    monkeypatch.undo()
    vectors_kb = n * wide * 4 // 1024
    assert resident and max(resident) < vectors_kb // 2  # all of it, before page_out
    again = VectorProjection(snaps, hnsw=False)
    again.load_snapshot(second)
    changed = -unit(4, wide)
    hits = again.search(A, changed, 3, window=n + 1)
    assert hits == restored.search(A, changed, 3, window=n + 1)
    assert hits[0][0] == ("mem:5", pytest.approx(1.0))  # the changed row, written as changed
    assert next(iter(again._agents["a"].segs.values())).n == n + 1
