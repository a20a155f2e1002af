"""`memstream seal --kafka` on the real broker: a deployment's plaintext topics (written by the
decider with sealing off, then partly sealed) are migrated to a new prefix whose raw records hold
no plaintext, whose rebuild digests equal the old topics', where a record erased before the
migration reads redacted; a run killed mid-way is completed by the next; running workers refuse it."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from memstream.api.kafka.worker.replay import rebuild_partitions
from memstream.api.services.kafka_seal_migration import (
    KafkaSealError,
    deciders_group,
    deployment_topics,
    seal_topics,
)
from memstream.streams import commands as c
from memstream.streams.deciders.kafka import KafkaDecider
from memstream.streams.deciders.sealing import KafkaSealing
from memstream.streams.events import Actor, AuditRecord, Embedding, Scope, new_id
from memstream.streams.keys.kafka import kafka_master_key
from memstream.streams.log.kafka import KafkaConfig, KafkaLog, ensure_topics
from memstream.streams.log.port import partition_for
from tests.support.broker import drop_topics
from tests.support.kafka_commands import all_events, env

pytestmark = [pytest.mark.kafka]

PARTITIONS = 3
AGENTS = ("ann", "bob", "cyd", "dee")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def vector(agent: str, i: int) -> np.ndarray:
    """A vector whose bytes occur nowhere else (its first two floats name the record)."""
    return np.array([1000.0 + AGENTS.index(agent), 2000.0 + i, 0.123456, -7.654321], np.float32)


def secret(agent: str, i: int, tag: str) -> str:
    return f"{tag}-{agent}-{i}-zanzibar-cobalt"


def storing(agent: str, i: int, tag: str) -> c.StoreMemory:
    emb = Embedding.from_vector("m", vector(agent, i))
    return c.StoreMemory(content=secret(agent, i, tag), embedding=emb, metadata={"who": tag}, **env(agent))


def refusal(agent: str, tag: str) -> AuditRecord:
    """A refused store's audit copy: it carries the refused content (sealed in a sealed topic)."""
    return AuditRecord(
        id=new_id(),
        kind="refused",
        command="store",
        command_id=new_id(),
        scope=Scope(agent_id=agent),
        actor=Actor(client_id="it"),
        occurred_at=T0,
        outcome={"result": "refused", "error": "too_long"},
        request={"content": f"{tag}-refused-{agent}-zanzibar-cobalt"},
    )


async def write(decider: KafkaDecider, per_agent: int, tag: str, start: int = 0) -> dict[str, list[int]]:
    """Stores (and one refusal) of every agent through the decider; the memory ids per agent."""
    ids: dict[str, list[int]] = {}
    for agent in AGENTS:
        p = partition_for(agent, PARTITIONS)
        outs = await asyncio.gather(
            *(decider.submit_local(p, storing(agent, i, tag)) for i in range(start, start + per_agent))
        )
        ids[agent] = [int(o.outcome.id or 0) for o in outs]
        await decider.submit_local(p, refusal(agent, tag))
    return ids


async def plaintext_topics(cfg: KafkaConfig, per_agent: int) -> dict[str, list[int]]:
    """The deployment as the decider writes it with sealing off, with an erasure of one of
    ann's memories (which, on plaintext topics, reaches nothing of the log)."""
    await ensure_topics(cfg)
    decider = KafkaDecider(KafkaLog(cfg))
    decider.owned = set(range(PARTITIONS))
    try:
        ids = await write(decider, per_agent, "plain")
        ann = partition_for("ann", PARTITIONS)
        erase = c.EraseMemory(record_id=ids["ann"][0], reason="asked to", **env("ann"))
        assert (await decider.submit_local(ann, erase)).outcome.result == "applied"
        if decider._completing is not None:
            await decider._completing
    finally:
        await decider.kafka.close()
    return ids


async def sealed_writes(cfg: KafkaConfig, per_agent: int) -> None:
    """More writes by a decider that seals (the deployment after the upgrade, before migrating)."""
    sealing = await asyncio.to_thread(KafkaSealing.from_env, cfg)
    decider = KafkaDecider(KafkaLog(cfg, sealing), sealing=sealing)
    decider.owned = set(range(PARTITIONS))
    try:
        await write(decider, per_agent, "sealed", start=1000)
        if decider._completing is not None:
            await decider._completing
    finally:
        await decider.kafka.close()
        await asyncio.to_thread(sealing.close)


async def raw_records(cfg: KafkaConfig) -> list[Any]:
    kafka = KafkaLog(cfg)  # no opener: the bytes as the broker holds them
    await kafka.start()
    try:
        out = []
        for topic in (cfg.events_topic, cfg.audit_topic):
            for p in range(cfg.partitions):
                out.extend(await kafka.read_records(topic, p, 0, limit=1_000_000))
        return out
    finally:
        await kafka.close()


def digests(report: dict[str, Any]) -> dict[int, Any]:
    return {int(p): (v["offset"], v["digests"]) for p, v in report["partitions"].items()}


@pytest.fixture
async def new_cfg(cfg: KafkaConfig) -> Any:
    new = dataclasses.replace(cfg, prefix=f"{cfg.prefix}-sealed")
    yield new
    await drop_topics(new.prefix)


async def test_plaintext_topics_come_out_sealed_with_equal_digests(cfg: KafkaConfig, new_cfg: KafkaConfig) -> None:
    master, _ = kafka_master_key(os.environ)
    async with asyncio.timeout(240):
        ids = await plaintext_topics(cfg, per_agent=20)
        before_raw = await raw_records(cfg)
        assert any(b"plain-ann-1-zanzibar" in (r.value or b"") for r in before_raw)  # plaintext indeed
        await sealed_writes(cfg, per_agent=5)
        old_sealed = {(r.topic, r.partition, r.offset): r.value for r in await raw_records(cfg)}
        old_rebuild = await rebuild_partitions(cfg)

        report = await seal_topics(cfg, new_cfg.prefix, master)
        assert report["sealed"] and report["digests_equal"]
        assert report["records_sealed"] == len(AGENTS) * 21  # every plaintext store and refusal copy
        assert report["keys_copied"] > 0  # the sealed part's keys followed its records
        assert report["erased_keys_destroyed"] >= 1

        # A raw scan of the new topics: no content, no vector, in values or headers.
        raw = await raw_records(new_cfg)
        assert len(raw) == len(old_sealed)
        needles = [b"zanzibar", *(vector(a, i).tobytes() for a in AGENTS for i in (*range(20), *range(1000, 1005)))]
        for rec in raw:
            blob = (rec.value or b"") + b"".join(v for _, v in rec.headers)
            assert not any(n in blob for n in needles), (rec.topic, rec.offset)
        # Records sealed before the migration are copied byte for byte, at the same place.
        for rec in raw:
            old_value = old_sealed[(rec.topic.replace(new_cfg.prefix, cfg.prefix, 1), rec.partition, rec.offset)]
            if old_value is not None and old_value.startswith(b"\x00ms1"):
                assert rec.value == old_value

        # `memstream rebuild --kafka` of the new topics digests as the old ones' did.
        assert digests(await rebuild_partitions(new_cfg)) == digests(old_rebuild)

        # Opened: every memory reads back, but ann's erased one reads redacted.
        events = {
            (e["type"], e["payload"].get("id")): e for e in await all_events(new_cfg) if e["scope"]["agent_id"] == "ann"
        }
        erased = events[("memory.stored", ids["ann"][0])]
        assert erased.get("redacted") and "content" not in erased["payload"]
        kept = events[("memory.stored", ids["ann"][1])]
        assert kept["payload"]["content"] == secret("ann", 1, "plain") and not kept.get("redacted")

        # Again: nothing to do; then --delete-old retires the old topics (exactly those).
        again = await seal_topics(cfg, new_cfg.prefix, master, delete_old=True)
        assert again["already_migrated"] and set(deployment_topics(cfg)) <= set(again["deleted"])
        admin = AIOKafkaAdminClient(bootstrap_servers=cfg.bootstrap)
        await admin.start()
        try:
            left = set(await admin.list_topics())
        finally:
            await admin.close()
        assert not set(deployment_topics(cfg)) & left and set(deployment_topics(new_cfg)) <= left


async def test_a_run_killed_mid_way_is_completed_by_the_next(cfg: KafkaConfig, new_cfg: KafkaConfig) -> None:
    master, _ = kafka_master_key(os.environ)
    async with asyncio.timeout(300):
        await plaintext_topics(cfg, per_agent=1500)
        total = sum((await raw_records_count(cfg)).values())
        args = [sys.executable, "-m", "memstream.api.cli", "--log-level", "WARNING", "seal", "--kafka", cfg.bootstrap]
        args += ["--prefix", cfg.prefix, "--partitions", str(PARTITIONS), "--new-prefix", new_cfg.prefix]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while True:  # until part of the copy landed, then SIGKILL
                written = sum((await raw_records_count(new_cfg)).values())
                if written > 0 or proc.poll() is not None:
                    break
                await asyncio.sleep(0.02)
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == -signal.SIGKILL
        assert 0 < written < total  # killed mid-way: a partial new prefix is left

        report = await seal_topics(cfg, new_cfg.prefix, master)
        assert report["sealed"] and report["digests_equal"]
        assert set(report["recreated_partial_topics"]) >= {new_cfg.events_topic, new_cfg.audit_topic}
        assert sum((await raw_records_count(new_cfg)).values()) == total


async def raw_records_count(cfg: KafkaConfig) -> dict[tuple[str, int], int]:
    """Records per partition of the events and audit topics (zeros for topics not made yet)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=cfg.bootstrap, group_id=None)
    await consumer.start()
    try:
        topics = await consumer.topics()
        out: dict[tuple[str, int], int] = {}
        for topic in (cfg.events_topic, cfg.audit_topic):
            if topic not in topics:
                continue
            ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(cfg.partitions)])
            out.update({(tp.topic, tp.partition): int(e) for tp, e in ends.items()})
        return out
    finally:
        await consumer.stop()


async def test_refused_while_a_worker_consumes_the_old_topics(cfg: KafkaConfig, new_cfg: KafkaConfig) -> None:
    master, _ = kafka_master_key(os.environ)
    async with asyncio.timeout(120):
        await plaintext_topics(cfg, per_agent=2)
        # A member of the workers' group, as a running worker is (faust joins it on the commands topic).
        member = AIOKafkaConsumer(cfg.commands_topic, bootstrap_servers=cfg.bootstrap, group_id=deciders_group(cfg))
        await member.start()
        try:
            while not member.assignment():
                await member.getmany(timeout_ms=200)
            with pytest.raises(KafkaSealError, match="active members"):
                await seal_topics(cfg, new_cfg.prefix, master)
        finally:
            await member.stop()
        admin = AIOKafkaAdminClient(bootstrap_servers=cfg.bootstrap)
        await admin.start()
        try:
            assert not set(deployment_topics(new_cfg)) & set(await admin.list_topics())  # nothing was written
        finally:
            await admin.close()
        # A prefix that holds another deployment's records is never deleted to make room.
        other = dataclasses.replace(cfg, prefix=f"{cfg.prefix}-other-{uuid.uuid4().hex[:6]}")
        try:
            await plaintext_topics(other, per_agent=1)
            with pytest.raises(KafkaSealError, match="choose another"):
                await seal_topics(cfg, other.prefix, master)
            assert sum((await raw_records_count(other)).values()) > 0
        finally:
            await drop_topics(other.prefix)
