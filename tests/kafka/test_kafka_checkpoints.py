"""Workers' read-model checkpoints on the real broker: a worker that gains a partition starts
from the partition's checkpoint and folds only the tail, with state equal to a fold from offset
0; a checkpoint that is damaged, or not of this topic, is ignored and the partition is folded
from 0."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from memstream.api.kafka.router.app import Owners
from memstream.api.kafka.worker import checkpoints
from memstream.api.kafka.worker.replay import rebuild_partitions
from memstream.streams.log.kafka import KafkaConfig, events_end_offsets
from memstream.streams.log.port import partition_for
from memstream.streams.snapshots import SnapshotStore
from tests.support.deployment import PROCS, Deployment
from tests.support.faces import HttpFace
from tests.support.fleet import AGENTS, TOPICS, reads, stable

pytestmark = [pytest.mark.kafka]

PARTITIONS = 4
EVERY = 12  # events between checkpoints


def start_worker(dep: Deployment, data_dir: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MEMSTREAM_DATA_DIR": str(data_dir), "MEMSTREAM_KAFKA_CHECKPOINT_EVERY": str(EVERY)}
    args = [sys.executable, str(PROCS / "kafka_worker.py"), *dep.kafka_args, "--session-timeout", "6"]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dep.procs.append(proc)
    return proc


async def owner_health(cfg: KafkaConfig, not_url: str | None = None) -> tuple[str, dict[str, Any]]:
    """The URL and /health of the worker owning every partition (the only one running), once
    it has announced them all (and is not ``not_url``, a worker already stopped)."""
    owners = Owners(cfg)
    await owners.start()
    try:
        async with asyncio.timeout(90), httpx.AsyncClient() as client:
            while True:
                urls = {owners.urls.get(p) for p in range(cfg.partitions)}
                if len(urls) == 1 and None not in urls and not_url not in urls:
                    url = next(iter(urls))
                    assert url is not None
                    try:
                        return url, (await client.get(f"{url}/health")).json()
                    except httpx.TransportError:
                        pass
                await owners.wait_change(0.2)
    finally:
        await owners.close()


async def caught_up_digests(url: str, cfg: KafkaConfig) -> dict[int, Any]:
    ends = await events_end_offsets(cfg)
    async with asyncio.timeout(60), httpx.AsyncClient() as client:
        while True:
            body = (await client.get(f"{url}/digests")).json()
            if all(body[str(p)]["offset"] == ends[p] - 1 for p in range(cfg.partitions)):
                return {int(p): v for p, v in body.items()}
            await asyncio.sleep(0.2)


def agents_covering(partitions: int) -> list[str]:
    """The test's agents plus one more per partition none of them lands in."""
    out = list(AGENTS)
    i = 0
    while {partition_for(a, partitions) for a in out} != set(range(partitions)):
        name = f"agent-{i}"
        if partition_for(name, partitions) not in {partition_for(a, partitions) for a in out}:
            out.append(name)
        i += 1
    return out


async def test_a_new_owner_starts_from_checkpoints_it_can_trust(cfg: KafkaConfig, tmp_path: Path) -> None:
    dep = Deployment(cfg)
    data = tmp_path / "worker-data"
    face = HttpFace(dep.url)
    agents = agents_covering(cfg.partitions)
    client = httpx.AsyncClient()
    try:
        first = start_worker(dep, data)
        dep.router()
        await dep.ready()
        async with asyncio.timeout(240):
            for i in range(EVERY * len(agents) + 4):
                agent = agents[i % len(agents)]
                body = await face.call("store", {"agent_id": agent, "content": f"{TOPICS[i % 5]} {i}"})
                assert body["result"] == "stored", body
            url, health = await owner_health(cfg)
            # The worker's agent folded most of its own writes (fold-on-append); the tail folds
            # only what it could not (the models held by a checkpoint), so it may lag a moment.
            while True:
                fold = health["fold"].values()
                by_agent, by_tail = sum(v["by_agent"] for v in fold), sum(v["by_tail"] for v in fold)
                if by_agent + by_tail == EVERY * len(agents) + 4:
                    break
                await asyncio.sleep(0.2)
                health = (await client.get(f"{url}/health")).json()
            assert by_agent > by_tail
            while not all(v["last"] is not None for v in health["checkpoints"].values()):
                await asyncio.sleep(0.2)
                health = (await client.get(f"{url}/health")).json()
            for i in range(5):  # a tail past the checkpoints
                await face.call("store", {"agent_id": agents[i], "content": f"after the checkpoint {i}"})
            before = await reads(face)
            health = (await client.get(f"{url}/health")).json()
            saved = {int(p): v["last"] for p, v in health["checkpoints"].items()}
            first.send_signal(signal.SIGTERM)
            first.wait(timeout=60)

            # Damage partition 0's checkpoint; make partition 1's look like another topic's.
            store0 = SnapshotStore(checkpoints.checkpoint_dir(data, cfg, 0))
            store0.path("lexical").write_bytes(b"MSSNAP1\ntorn")
            store1 = SnapshotStore(checkpoints.checkpoint_dir(data, cfg, 1))
            meta = checkpoints.marker(store1)
            assert meta is not None
            store1.save(checkpoints.MARKER, {**meta, "anchor": "0" * 64})

            start_worker(dep, data)
            url2, health2 = await owner_health(cfg, not_url=url)
            restored = {int(p): v["restored_from"] for p, v in health2["checkpoints"].items()}
            assert restored[0] is None and restored[1] is None  # folded from 0
            for p in (2, 3):
                assert restored[p] is not None and restored[p] == saved[p]  # from its checkpoint

            live = await caught_up_digests(url2, cfg)
            rebuilt = await rebuild_partitions(cfg, jobs=1)
            assert {p: v["digests"] for p, v in live.items()} == {
                p: v["digests"] for p, v in rebuilt["partitions"].items()
            }
            assert stable(await reads(face)) == stable(before)
    finally:
        await client.aclose()
        await face.close()
        dep.stop()
