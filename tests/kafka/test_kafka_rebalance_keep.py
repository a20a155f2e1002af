"""Kafka workers across rebalances, on the real broker: when a second worker joins, the first keeps
the read models of the partitions it keeps (its fold counters for them do not restart), and every
partition's read models still equal a rebuild from the topic; checkpoints keep up with a burst of
writes, and a restore drops the sidecars an interrupted checkpoint left."""

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
from memstream.streams.snapshots import SnapshotStore
from tests.kafka.test_kafka_checkpoints import agents_covering, owner_health
from tests.support.deployment import PROCS, Deployment
from tests.support.faces import HttpFace
from tests.support.fleet import TOPICS

pytestmark = [pytest.mark.kafka]

PARTITIONS = 4
WRITES = 40


def start_worker(dep: Deployment, data_dir: Path, every: int = 0) -> subprocess.Popen[bytes]:
    """A worker checkpointing every ``every`` events; without checkpoints (0), a partition it
    re-opens is folded from offset 0."""
    env = {**os.environ, "MEMSTREAM_DATA_DIR": str(data_dir), "MEMSTREAM_KAFKA_CHECKPOINT_EVERY": str(every)}
    args = [sys.executable, str(PROCS / "kafka_worker.py"), *dep.kafka_args, "--session-timeout", "6"]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dep.procs.append(proc)
    return proc


async def split_owners(cfg: KafkaConfig, first_url: str) -> dict[int, str]:
    """Each partition's owner once two workers share them, and the first one's /health agrees."""
    owners = Owners(cfg)
    await owners.start()
    try:
        async with asyncio.timeout(120), httpx.AsyncClient() as client:
            while True:
                urls = {p: owners.urls.get(p) for p in range(cfg.partitions)}
                if None not in urls.values() and len(set(urls.values())) == 2:
                    mine = {p for p, u in urls.items() if u == first_url}
                    health = (await client.get(f"{first_url}/health")).json()
                    if {int(p) for p in health["partitions"]} == mine:
                        return {p: u for p, u in urls.items() if u is not None}
                await owners.wait_change(0.2)
    finally:
        await owners.close()


async def caught_up(client: httpx.AsyncClient, cfg: KafkaConfig, owners: dict[int, str]) -> dict[int, Any]:
    """Every partition's digests from its owner, once its models hold the whole partition."""
    ends = await events_end_offsets(cfg)
    out: dict[int, Any] = {}
    async with asyncio.timeout(90):
        while len(out) < cfg.partitions:
            for url in set(owners.values()):
                body = (await client.get(f"{url}/digests")).json()
                for p, v in body.items():
                    if owners.get(int(p)) == url and v["offset"] == ends[int(p)] - 1:
                        out[int(p)] = v["digests"]
            if len(out) < cfg.partitions:
                await asyncio.sleep(0.2)  # the poll's step; the timeout bounds the wait
    return out


async def test_a_worker_keeps_the_models_of_partitions_it_keeps(cfg: KafkaConfig, tmp_path: Path) -> None:
    dep = Deployment(cfg)
    face = HttpFace(dep.url)
    agents = agents_covering(cfg.partitions)
    client = httpx.AsyncClient()
    try:
        start_worker(dep, tmp_path / "a")
        dep.router()
        await dep.ready()
        async with asyncio.timeout(300):
            for i in range(WRITES):
                agent = agents[i % len(agents)]
                body = await face.call("store", {"agent_id": agent, "content": f"{TOPICS[i % 5]} {i}"})
                assert body["result"] == "stored", body
            first_url, health = await owner_health(cfg)
            while sum(v["by_agent"] + v["by_tail"] for v in health["fold"].values()) < WRITES:
                await asyncio.sleep(0.2)  # the poll's step; the timeout bounds the wait
                health = (await client.get(f"{first_url}/health")).json()
            before = health["fold"]
            assert sum(v["by_agent"] for v in before.values()) > 0  # the agent folded its own writes

            start_worker(dep, tmp_path / "b")
            owners = await split_owners(cfg, first_url)
            kept = sorted(p for p, u in owners.items() if u == first_url)
            assert kept and len(kept) < cfg.partitions
            after = (await client.get(f"{first_url}/health")).json()["fold"]
            for p in kept:  # the same models: nothing folded again, by the tail or otherwise
                assert after[str(p)]["by_agent"] == before[str(p)]["by_agent"], (p, before, after)
                assert after[str(p)]["by_tail"] == before[str(p)]["by_tail"], (p, before, after)

            for i in range(len(agents)):  # writes after the rebalance, to both workers
                body = await face.call("store", {"agent_id": agents[i], "content": f"after the rebalance {i}"})
                assert body["result"] == "stored", body
            live = await caught_up(client, cfg, owners)
            rebuilt = await rebuild_partitions(cfg, jobs=1)
            assert live == {p: v["digests"] for p, v in rebuilt["partitions"].items()}
    finally:
        await client.aclose()
        await face.close()
        dep.stop()


async def test_checkpoints_keep_up_with_a_burst(cfg: KafkaConfig, tmp_path: Path) -> None:
    """Events folded while a checkpoint is written start none of their own; once the writes
    stop, every partition's last checkpoint must still be less than EVERY events behind its end
    (the worker checkpoints again after one finishes, when enough folded meanwhile)."""
    every = 5
    dep = Deployment(cfg)
    face = HttpFace(dep.url)
    agents = agents_covering(cfg.partitions)
    client = httpx.AsyncClient()
    try:
        start_worker(dep, tmp_path, every)
        dep.router()
        await dep.ready()
        async with asyncio.timeout(300):

            async def burst(agent: str) -> None:
                for i in range(30):
                    body = await face.call("store", {"agent_id": agent, "content": f"{TOPICS[i % 5]} {agent} {i}"})
                    assert body["result"] == "stored", body

            await asyncio.gather(*(burst(a) for a in agents))
            url, _ = await owner_health(cfg)
            ends = await events_end_offsets(cfg)
            async with asyncio.timeout(60):
                await checkpoints_within(client, url, ends, every)
    finally:
        await client.aclose()
        await face.close()
        dep.stop()


async def checkpoints_within(client: httpx.AsyncClient, url: str, ends: dict[int, int], every: int) -> None:
    """Until every partition's last checkpoint is less than ``every`` events behind its end."""
    while True:  # quiet now: whatever checkpoint is in flight ends, and any it makes due
        health = (await client.get(f"{url}/health")).json()
        lasts = {int(p): v["last"] for p, v in health["checkpoints"].items()}
        if all(last is not None and ends[p] - 1 - last < every for p, last in lasts.items()):
            return
        await asyncio.sleep(0.2)  # the poll's step; the caller's timeout bounds the wait


async def test_a_restore_drops_stale_sidecars(cfg: KafkaConfig, tmp_path: Path) -> None:
    """Sidecars no restored snapshot names (a worker stopped between a checkpoint's write and
    its cleanup) are gone once a new owner restored the partition, with no checkpoint of its own."""
    every = 5
    dep = Deployment(cfg)
    face = HttpFace(dep.url)
    agents = agents_covering(cfg.partitions)
    client = httpx.AsyncClient()
    try:
        first = start_worker(dep, tmp_path, every)
        dep.router()
        await dep.ready()
        async with asyncio.timeout(300):
            for i in range(every * 2 * len(agents)):
                agent = agents[i % len(agents)]
                body = await face.call("store", {"agent_id": agent, "content": f"{TOPICS[i % 5]} {i}"})
                assert body["result"] == "stored", body
            url, _ = await owner_health(cfg)
            async with asyncio.timeout(60):
                await checkpoints_within(client, url, await events_end_offsets(cfg), every)
            first.send_signal(signal.SIGTERM)
            first.wait(timeout=60)
            planted = []
            for p in range(cfg.partitions):
                store = SnapshotStore(checkpoints.checkpoint_dir(tmp_path, cfg, p))
                for kind in ("lexical", "vectors"):
                    kept = store.blob_names(f"{kind}-")
                    assert kept, (p, kind)
                    stale = store.blob_path(f"{kind}-stale{p}")
                    stale.write_bytes(store.blob_path(kept[0]).read_bytes())
                    planted.append(stale)

            start_worker(dep, tmp_path, every)
            _, health = await owner_health(cfg, not_url=url)
            assert all(v["restored_from"] is not None for v in health["checkpoints"].values()), health
            while any(path.exists() for path in planted):
                await asyncio.sleep(0.2)  # the poll's step; the timeout bounds the wait
    finally:
        await client.aclose()
        await face.close()
        dep.stop()
