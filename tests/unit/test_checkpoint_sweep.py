"""Which checkpoints of partitions a Kafka worker does not hold it deletes after an erasure
(api/kafka/worker/checkpoint_sweep.py); the files it reads and deletes:
tests/system/test_checkpoint_sweep_files.py."""

from __future__ import annotations

from memstream.api.kafka.worker.checkpoint_sweep import OnDisk, to_delete

ME, PEER = "worker-a", "worker-b"


def test_a_destruction_deletes_what_this_worker_held_and_lost() -> None:
    on_disk = [OnDisk(0, ME, 10), OnDisk(1, ME, 10), OnDisk(2, ME, None)]
    assert to_delete(on_disk, held={1}, busy=(), me=ME, erased_last={}, destroyed=True) == [0, 2]


def test_without_a_destruction_nothing_held_or_lost_is_deleted() -> None:
    on_disk = [OnDisk(0, ME, 10), OnDisk(1, ME, 10)]
    assert to_delete(on_disk, held={1}, busy=(), me=ME, erased_last={0: 5, 1: 5}, destroyed=False) == []


def test_a_held_partition_keeps_its_checkpoint_even_when_outdated() -> None:
    """Its owner rewrites it after the erasure (it folds the erasure itself)."""
    on_disk = [OnDisk(0, ME, 3), OnDisk(1, None, 3)]
    assert to_delete(on_disk, held={0, 1}, busy=(), me=ME, erased_last={0: 9, 1: 9}, destroyed=True) == []


def test_a_shared_directory_leaves_the_current_holders_checkpoint_to_it() -> None:
    """Another worker on this directory took the partition after this one: it rewrites it."""
    on_disk = [OnDisk(0, PEER, 10)]
    assert to_delete(on_disk, held=(), busy=(), me=ME, erased_last={0: 8}, destroyed=True) == []


def test_an_outdated_checkpoint_is_deleted_whoever_held_it() -> None:
    """A holder that stopped (a restarted worker has another id), or none named: the marker
    older than the partition's last completed erasure says it may hold the erased record."""
    on_disk = [OnDisk(0, PEER, 4), OnDisk(1, None, 4), OnDisk(2, PEER, 9), OnDisk(3, None, None)]
    assert to_delete(on_disk, held=(), busy=(), me=ME, erased_last={0: 5, 1: 5, 2: 5, 3: 5}, destroyed=False) == [0, 1]


def test_a_checkpoint_being_written_or_restored_is_never_deleted() -> None:
    on_disk = [OnDisk(0, ME, 1), OnDisk(1, ME, 1)]
    assert to_delete(on_disk, held=(), busy={0}, me=ME, erased_last={0: 5, 1: 5}, destroyed=True) == [1]
