"""A worker that lost a partition in a rebalance deletes its checkpoint of it once an erasure
happens (issue 16; api/kafka/worker/checkpoint_sweep.py): two workers with data directories of
their own on the test broker; worker A checkpoints every partition, loses some to worker B, B
erases a distinctive record of one of them, and within the documented bound no file of A's data
directory holds the text or its vector. The partition A kept keeps its checkpoint (no refold)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from memstream.api.kafka.worker import checkpoints
from memstream.streams.log.kafka import KafkaConfig
from memstream.streams.log.port import partition_for
from memstream.streams.snapshots import SnapshotStore
from tests.kafka.test_kafka_checkpoints import owner_health
from tests.kafka.test_kafka_erasure_deployment import hits, needles, stored
from tests.kafka.test_kafka_rebalance_keep import split_owners
from tests.support.deployment import PROCS, Deployment
from tests.support.faces import HttpFace
from tests.support.master_key import with_master_key

pytestmark = [pytest.mark.kafka]

PARTITIONS = 2
BOUND_S = 30.0  # docs/erasure.md says about 2 s; generous for a loaded test machine
NAMES = ["Wilhelmina", "Octavius", "Perpetua", "Barnabus", "Clementine", "Thaddeus"]


def start_worker(dep: Deployment, data_dir: Path) -> subprocess.Popen[bytes]:
    """A worker with a data directory of its own, checkpointing after every event."""
    env = with_master_key({"MEMSTREAM_DATA_DIR": str(data_dir), "MEMSTREAM_KAFKA_CHECKPOINT_EVERY": "1"})
    args = [sys.executable, str(PROCS / "kafka_worker.py"), *dep.kafka_args, "--session-timeout", "6"]
    proc = dep.logs.popen("worker", args, env)
    dep.procs.append(proc)
    dep.workers.append(proc)
    return proc


def secret_of(partition: int) -> str:
    return f"{NAMES[partition]} Brackenthorpe hides the vault code behind the cuckoo clock ({partition})"


def agent_of(partition: int, partitions: int) -> str:
    return next(a for a in (f"sweep-agent-{i}" for i in range(1000)) if partition_for(a, partitions) == partition)


async def until(check: Callable[[], bool], deadline_s: float) -> float:
    """Seconds until ``check()`` holds (polled), or the deadline."""
    start = time.monotonic()
    while not check() and time.monotonic() - start < deadline_s:
        await asyncio.sleep(0.2)  # the poll's step; the deadline bounds the wait
    return time.monotonic() - start


async def test_a_worker_deletes_its_checkpoint_of_a_lost_partition_after_an_erasure(
    cfg: KafkaConfig, tmp_path: Path
) -> None:
    dep = Deployment(cfg)
    face = HttpFace(dep.url)
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    agents = {p: agent_of(p, cfg.partitions) for p in range(cfg.partitions)}
    try:
        start_worker(dep, a_dir)
        dep.router()
        await dep.ready()
        ids = {p: await stored(face, agents[p], secret_of(p)) for p in range(cfg.partitions)}
        a_url, _ = await owner_health(cfg)
        # A checkpointed every partition: its data directory holds every secret.
        every = [secret_of(p).encode() for p in range(cfg.partitions)]
        await until(lambda: all(hits(a_dir, [s]) for s in every), 60)
        assert all(hits(a_dir, [s]) for s in every), "worker A checkpointed not every partition"

        start_worker(dep, b_dir)
        owners = await split_owners(cfg, a_url)
        lost = sorted(p for p, u in owners.items() if u != a_url)
        kept = sorted(p for p, u in owners.items() if u == a_url)
        assert lost and kept
        p, q = lost[0], kept[0]
        kept_marker = checkpoints.marker(SnapshotStore(checkpoints.checkpoint_dir(a_dir, cfg, q)))
        assert kept_marker is not None
        assert hits(a_dir, [secret_of(p).encode()]), "A's checkpoint of the lost partition is gone before the erasure"

        erased = await face.call("erase_memory", {"agent_id": agents[p], "memory_id": ids[p], "reason": "test"})
        assert erased["ok"] is True, erased
        gone = needles(secret_of(p))
        took = await until(lambda: not hits(a_dir, gone), BOUND_S)
        assert hits(a_dir, gone) == [], f"A's data directory still holds the erased record {BOUND_S:.0f} s after"
        print(f"worker A's copy of the erased record was deleted {took:.1f} s after the erasure answered")
        assert hits(b_dir, gone) == []  # the owner rewrote its own checkpoint

        # The partition A kept: its checkpoint stays (restorable), its record in it.
        after = checkpoints.marker(SnapshotStore(checkpoints.checkpoint_dir(a_dir, cfg, q)))
        assert after is not None and after["offset"] >= kept_marker["offset"]
        assert hits(a_dir, [secret_of(q).encode()])
    finally:
        await face.close()
        dep.stop()
