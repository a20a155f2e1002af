"""A save killed between its write and its rename leaves a temporary file holding folded state
(plaintext an erasure may take later); the next store on the directory removes it, and never a
file a save of its own is writing or one of a live writer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
