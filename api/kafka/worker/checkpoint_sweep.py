"""Deleting the checkpoints of partitions a worker no longer holds once an erasure happened
(issue 16; docs/erasure.md, "Kafka mode"). A checkpoint holds folded plaintext; the owner of the
erased partition rewrites its own, but a worker that lost the partition (with a data directory
of its own) would keep its old copy until it took the partition again.

Two rules, both pure (``to_delete``), applied by the worker's sweep task:

- *holder*: each checkpoint directory names the worker that last held the partition there
  (``HOLDER``, written when a worker takes it). When a key destruction is observed (any
  erasure, of any partition: the key store's destruction count moves in every process), a
  worker deletes the checkpoints it was the last holder of and no longer holds. One it was
  not the last holder of belongs to a worker sharing the data directory, which rewrites it
  (it holds the partition) or deletes it (it lost it too).
- *outdated*: a checkpoint whose marker is older than the partition's last completed erasure
  (``erased_through`` in the keys topic) is deleted by any worker on the directory that does
  not hold the partition: it covers a holder that stopped (a restarted worker has another id),
  and erasures completed while no worker ran on the directory.

Holding a partition keeps its checkpoint: in the common case without erasures, a partition that
moves back finds its checkpoint (no refold from 0).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from memstream.api.kafka.worker import checkpoints
from memstream.streams.snapshots import SnapshotStore

log = logging.getLogger(__name__)

HOLDER = "holder"  # a snapshot in the checkpoint's directory: {"worker": id}
SWEEP_EVERY_S = 1.0  # how often a worker compares the key store's destruction count and marks


@dataclass(frozen=True)
class OnDisk:
    """A partition's checkpoint directory holding files: its last holder, and the offset of its
    marker (None: no complete checkpoint, e.g. one being written, whose files may hold plaintext)."""

    partition: int
    holder: str | None
    offset: int | None


def to_delete(
    on_disk: Collection[OnDisk],
    held: Collection[int],
    busy: Collection[int],
    me: str,
    erased_last: Mapping[int, int],
    destroyed: bool,
) -> list[int]:
    """The partitions whose checkpoint this worker deletes now.

    ``held``: the partitions whose checkpoints this worker keeps (it holds them); ``busy``: the
    partitions it is writing a checkpoint of (deleted at a later sweep, never under a write);
    ``erased_last``: each partition's last completed erasure; ``destroyed``: a key destruction
    was observed since the last sweep that deleted everything it had to."""
    out = []
    for d in on_disk:
        if d.partition in held or d.partition in busy:
            continue
        # No holder (written before holders were named): left to the outdated rule, since a
        # worker sharing the directory may hold the partition.
        mine = d.holder == me
        outdated = d.offset is not None and d.offset < erased_last.get(d.partition, -1)
        if (destroyed and mine) or outdated:
            out.append(d.partition)
    return sorted(out)


def topic_root(data_dir: Path, events_topic: str) -> Path:
    """Where the worker's checkpoints of the events topic live (``checkpoints.checkpoint_dir``)."""
    return data_dir / "kafka-checkpoints" / events_topic


def scan(root: Path) -> dict[int, OnDisk]:
    """Every partition's checkpoint directory under ``root`` that holds files."""
    out: dict[int, OnDisk] = {}
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        if not (d.is_dir() and d.name.startswith("p") and d.name[1:].isdigit()):
            continue
        if not any(f.is_file() for f in d.iterdir()):
            continue
        store = SnapshotStore(d)
        holder = store.load(HOLDER)
        meta = checkpoints.marker(store)
        p = int(d.name[1:])
        worker = holder.get("worker") if holder is not None else None
        out[p] = OnDisk(p, worker if isinstance(worker, str) else None, None if meta is None else int(meta["offset"]))
    return out


def hold(store: SnapshotStore, me: str) -> None:
    """Name this worker the last holder of the partition whose checkpoint ``store`` holds."""
    store.save(HOLDER, {"worker": me})


def delete(root: Path, partitions: Collection[int]) -> None:
    """Delete the checkpoints of ``partitions`` (the marker first: ``checkpoints.remove``); the
    directories stay, for a worker that holds a store on them."""
    for p in partitions:
        checkpoints.remove(SnapshotStore(root / f"p{p}"))
        log.warning("partition %d: checkpoint deleted (not held here, and an erasure happened)", p)
