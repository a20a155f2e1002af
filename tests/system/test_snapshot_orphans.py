"""A save killed between its write and its rename leaves a temporary file holding folded state
(plaintext an erasure may take later); the next store on the directory removes it, and never a
file a save of its own is writing or one of a live writer."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from memstream.streams import json_pieces, snapshots
from memstream.streams.snapshots import SnapshotStore


def _dead_pid() -> int:
    code = "import os; print(os.getpid())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(proc.stdout)


def test_orphans_of_dead_writers_and_of_this_pid_are_removed(tmp_path: Path) -> None:
    dead = tmp_path / f".memories.snap.{_dead_pid()}.tmp"
    mine = tmp_path / f".lexical.blob.{os.getpid()}.tmp"  # a restarted process that got the same pid
    live = tmp_path / f".versions.snap.{os.getppid()}.tmp"  # another process, still writing
    unrelated = tmp_path / ".notes.tmp"
    for f in (dead, mine, live, unrelated):
        f.write_bytes(b"the secret text")
    store = SnapshotStore(tmp_path)
    assert not dead.exists() and not mine.exists()
    assert live.exists() and unrelated.exists()
    assert store.sweep_orphans() == []


def test_a_save_in_flight_is_not_swept(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    tmp = store._begin(store.path("memories"))
    try:
        tmp.write_bytes(b"half written")
        SnapshotStore(tmp_path)  # e.g. another read model's store on the same directory
        assert tmp.exists()
    finally:
        store._end(tmp)
    assert store.sweep_orphans() == [tmp]  # once its save is over, a leftover is an orphan


def test_saves_leave_no_temporary_file(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    store.save("memories", {"rows": [1, 2, 3]})
    store.save_blob("vectors", b"\x00" * 100)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memories.snap", "vectors.blob"]
    assert store.load("memories") == {"rows": [1, 2, 3]}


def test_orphans_named_before_each_save_had_its_own_number_are_removed(tmp_path: Path) -> None:
    old = tmp_path / f".memories.snap.{_dead_pid()}.tmp"  # left by a version before wave 14
    new = tmp_path / f".memories.snap.{_dead_pid()}-3.tmp"
    for f in (old, new):
        f.write_bytes(b"the secret text")
    SnapshotStore(tmp_path)
    assert not old.exists() and not new.exists()


@pytest.mark.parametrize("kind", ["checkpoint", "blob"])
def test_two_saves_of_one_name_at_once_each_write_their_own_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # A rebuild's checkpoint of a read model and the running server's, in one process: both
    # are mid-write at once. Sharing one temporary file, the second truncated the first's and
    # the later rename failed (FileNotFoundError), or a torn mix was renamed into place.
    store = SnapshotStore(tmp_path)
    both_writing = threading.Barrier(2, timeout=30)

    def pieces(body: Any) -> Iterator[bytes]:
        head, *rest = json_pieces.pieces(body)
        yield head
        both_writing.wait()
        yield from rest

    def save(n: int) -> None:
        body = {"rows": list(range(n * 1000, n * 1000 + 500))}
        if kind == "checkpoint":
            store.save("memories", body)
        else:
            store.save_blob("memories", chunks(n))

    def chunks(n: int) -> Iterator[bytes]:
        yield bytes([n]) * 4096
        both_writing.wait()
        yield bytes([n]) * 4096

    monkeypatch.setattr(snapshots, "payload_pieces", pieces)
    with ThreadPoolExecutor(max_workers=2) as pool:
        for done in [pool.submit(save, 1), pool.submit(save, 2)]:
            done.result()
    if kind == "checkpoint":
        assert store.load("memories") in ({"rows": list(range(n * 1000, n * 1000 + 500))} for n in (1, 2))
    else:
        blob = store.load_blob("memories")
        assert blob is not None and bytes(blob) in (bytes([n]) * 8192 for n in (1, 2))
    assert not list(tmp_path.glob(".*.tmp"))
