"""Checkpoints of a worker's read models, one set per partition of the events topic, used only
when provably complete and of this topic (a marker written last, anchored by the sha256 of the
event at its offset); otherwise the partition is folded from 0: a missing shortcut, never wrong
state. Why and how: docs/kafka-operations.md, "Checkpoints of the workers' read models"."""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Any

from memstream.streams.log.kafka import KafkaConfig
from memstream.streams.snapshots import SnapshotStore

log = logging.getLogger(__name__)

FORMAT = 1
MARKER = "checkpoint"


def checkpoint_dir(data_dir: Path, cfg: KafkaConfig, partition: int) -> Path:
    """Where a partition's checkpoint lives: per events topic, so deployments never mix."""
    return data_dir / "kafka-checkpoints" / cfg.events_topic / f"p{partition}"


def anchor_of(value: bytes) -> str:
    return hashlib.sha256(value).hexdigest()


def capture(projections: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every read model's snapshot body. Run while nothing applies events to them."""
    return [(p.name, {"offset": p.offset, "state": p.to_snapshot()}) for p in projections]


def write(store: SnapshotStore, bodies: list[tuple[str, dict[str, Any]]], offset: int, anchor: str) -> None:
    """Write a checkpoint: the marker goes first (dropped) and last (written), so a crash in
    between leaves no marker and the set reads as absent."""
    store.drop(MARKER)
    for name, body in bodies:
        store.save(name, body)
    store.save(MARKER, {"format": FORMAT, "offset": offset, "anchor": anchor, "saved_at": time.time()})


def drop_stale(projections: list[Any]) -> None:
    """After a checkpoint is written: sidecars (vectors, graphs) no snapshot on disk names are
    deleted, as the embedded runner does, so an erased vector lingers in none of them."""
    for p in projections:
        drop = getattr(p, "drop_stale_sidecars", None)
        if drop is not None:
            drop()


def remove(store: SnapshotStore) -> None:
    """Delete every file of a partition's checkpoint (the marker first: a crash midway leaves
    no checkpoint, the partition is folded from 0)."""
    store.drop(MARKER)
    for path in store.directory.iterdir():
        if path.is_file():
            path.unlink(missing_ok=True)


def marker(store: SnapshotStore) -> dict[str, Any] | None:
    """The checkpoint's marker ({offset, anchor}) when present and of this format."""
    meta = store.load(MARKER)
    if meta is None or meta.get("format") != FORMAT or not isinstance(meta.get("offset"), int):
        return None
    return meta


def restore(store: SnapshotStore, projections: list[Any], offset: int) -> bool:
    """Load every read model from the checkpoint at ``offset`` (its anchor already checked
    against the topic). False, with the projections left partly loaded, when any snapshot is
    missing, damaged, or of another offset: the caller then starts from fresh read models."""
    for p in projections:
        body = store.load(p.name)
        if body is None or body.get("offset") != offset:
            log.warning("checkpoint of %s at offset %s is incomplete (%s); folding from 0", store.directory, offset,
                        p.name)  # fmt: skip
            return False
        try:
            p.load_snapshot(body["state"])
        except Exception as exc:  # a snapshot of an older layout: fold from the topic instead
            log.warning("checkpoint %s: %s does not load (%s); folding from 0", store.directory, p.name, exc)
            return False
        p.offset = offset
    return True
