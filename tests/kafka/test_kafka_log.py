"""The Kafka log adapter against a real broker: topics created explicitly with the durability
memstream needs, real decided events appended through the idempotent producer, and read back
from any offset of any partition exactly as the embedded log returns them."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime

import numpy as np
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from memstream.streams import commands as c
from memstream.streams.decision.dispatch import decide
from memstream.streams.decision.limits import Limits
from memstream.streams.decision.state import DecisionState
from memstream.streams.decision.verdict import DecideContext
from memstream.streams.events import Actor, Embedding, Scope, decode
from memstream.streams.log.kafka import KafkaConfig, KafkaLog, KafkaLogError, ensure_topics
from memstream.streams.log.port import partition_for
from tests.support.broker import (
    BOOTSTRAP,
    TEST_REPLICATION,
    TEST_TIMEOUT_S,
)

pytestmark = [pytest.mark.kafka]

PARTITIONS = 3
AGENTS = [f"agent-{i}" for i in range(7)]


def decided_events(n_per_agent: int) -> list[tuple[str, str, bytes, bytes | None]]:
    """Real events from the decider: stores with vectors, updates, deletes, for several agents."""
    state = DecisionState(PARTITIONS)
    ids = itertools.count()
    last: dict[str, int] = {}
    out = []
    for i in range(n_per_agent):
        for agent in AGENTS:
            env = {
                "command_id": f"{agent}-{i}",
                "scope": Scope(agent_id=agent),
                "actor": Actor(client_id="it"),
                "received_at": datetime(2026, 1, 1, tzinfo=UTC),
            }
            vec = Embedding.from_vector("m", np.arange(4, dtype=np.float32) + i)
            if i % 5 == 4:
                cmd: c.Command = c.DeleteMemory(memory_id=last[agent], **env)
            else:
                cmd = c.StoreMemory(content=f"{agent} note {i}", embedding=vec, **env)
            ctx = DecideContext(partition_for(agent, PARTITIONS), Limits(), lambda: f"e{next(ids)}")
            d = decide(state, cmd, ctx)
            assert d.outcome.result == "applied", d.outcome
            if d.outcome.id is not None:
                last[agent] = d.outcome.id
            for ev in d.events:
                state.apply_event(state.event_offset + 1, decode(ev.encode()))
                out.append((agent, ev.type, ev.encode(), ev.vector))
    return out


async def test_topics_are_created_durable_and_checked(cfg: KafkaConfig) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S):
        first = await ensure_topics(cfg)
        assert sorted(first.created) == sorted(cfg.topic_configs()) and not first.existing
        again = await ensure_topics(cfg)  # every process calls it at start: idempotent
        assert not again.created and sorted(again.existing) == sorted(cfg.topic_configs())
        # the same topics under a config with another partition count are refused, not used
        with pytest.raises(KafkaLogError, match="partitions"):
            await ensure_topics(KafkaConfig(bootstrap=BOOTSTRAP, prefix=cfg.prefix, partitions=PARTITIONS + 1))


async def test_an_expiring_events_topic_is_refused(cfg: KafkaConfig) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S):
        admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
        await admin.start()
        try:
            # someone created the events topic by hand, with the broker's default retention
            await admin.create_topics([NewTopic(cfg.events_topic, PARTITIONS, TEST_REPLICATION)])
        finally:
            await admin.close()
        with pytest.raises(KafkaLogError, match=r"retention\.ms"):
            await ensure_topics(cfg)


async def test_append_and_read_back_from_any_offset(cfg: KafkaConfig) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S):
        await ensure_topics(cfg)
        log = KafkaLog(cfg)
        await log.start()
        try:
            records = decided_events(10)
            landed = await log.append(records)
            assert [a.partition for a in landed] == [partition_for(r[0], PARTITIONS) for r in records]
            # per partition: offsets 0..n-1 in append order, no gaps, no duplicates
            by_part: dict[int, list[tuple[int, tuple[str, str, bytes, bytes | None]]]] = {}
            for a, r in zip(landed, records, strict=True):
                by_part.setdefault(a.partition, []).append((a.offset, r))
            ends = await log.end_offsets()
            for p, rows in by_part.items():
                assert [o for o, _ in rows] == list(range(len(rows)))
                assert ends[p] == len(rows)
                got = await log.read(p, 0)
                assert [(g.agent_id, g.type, g.value, g.vector) for g in got] == [r for _, r in rows]
                assert all(g.partition == p for g in got)
                # from the middle, bounded, without vectors, filtered
                mid = len(rows) // 2
                tail = await log.read(p, mid, mid + 3, vectors=False)
                assert [g.offset for g in tail] == [mid, mid + 1, mid + 2]
                assert all(g.vector is None for g in tail)
                deletes = await log.read(p, 0, types=["memory.deleted"])
                assert deletes and {g.type for g in deletes} == {"memory.deleted"}
                agent = rows[0][1][0]
                mine = await log.read(p, 0, agent_id=agent, limit=3)
                assert len(mine) == 3 and {g.agent_id for g in mine} == {agent}
                assert await log.read(p, ends[p]) == []
            # the vectors came back bit-exact, and the JSON decodes to the decider's events
            some = (await log.read(landed[0].partition, 0, limit=1))[0]
            assert decode(some.value)["type"] == "memory.stored"
            assert np.frombuffer(some.vector or b"", "<f4").tolist() == [0.0, 1.0, 2.0, 3.0]
        finally:
            await log.close()
