"""The files a Kafka worker's checkpoint sweep reads (each checkpoint's holder and marker) and
deletes (api/kafka/worker/checkpoint_sweep.py; the decision: tests/unit/test_checkpoint_sweep.py)."""

from __future__ import annotations

from pathlib import Path

from memstream.api.kafka.worker import checkpoints
from memstream.api.kafka.worker.checkpoint_sweep import OnDisk, delete, hold, scan
from memstream.streams.snapshots import SnapshotStore

ME = "worker-a"


def write_checkpoint(directory: Path, offset: int, text: str) -> SnapshotStore:
    store = SnapshotStore(directory)
    checkpoints.write(store, [("memories", {"offset": offset, "state": {"text": text}})], offset, "anchor")
    store.save_blob("vectors-abc", text.encode())
    return store


def test_scan_reads_holders_and_markers_and_delete_leaves_no_byte(tmp_path: Path) -> None:
    root = tmp_path / "kafka-checkpoints" / "events"
    hold(write_checkpoint(root / "p0", 7, "Zebulon's secret"), ME)
    write_checkpoint(root / "p1", 3, "other")
    (root / "p2").mkdir()  # an empty directory: nothing to delete there
    SnapshotStore(root / "p3").save("memories", {"offset": 1, "state": {}})  # no marker: being written
    assert scan(root) == {0: OnDisk(0, ME, 7), 1: OnDisk(1, None, 3), 3: OnDisk(3, None, None)}

    delete(root, [0])
    assert (root / "p0").is_dir() and list((root / "p0").iterdir()) == []  # the directory stays
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and b"Zebulon" in p.read_bytes()]
    assert set(scan(root)) == {1, 3}
