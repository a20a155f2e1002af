"""A worker's partition log (api/kafka/worker/partition_log.py) against the real broker: scattered
offsets read back exactly, instants mapped to offsets by the events' ``occurred_at`` as a
linear scan would, per-agent reads and the audit refusal without an agent, and a read that
cannot get its turn within the deadline failing as ``LogUnavailable``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pytest

from memstream.api.kafka.worker.partition_log import KafkaPartitionLog
from memstream.api.tools.sanitize import InputError
from memstream.streams.log.kafka import KafkaConfig, KafkaLog, ensure_topics
from memstream.streams.log.port import LogUnavailable, partition_for

pytestmark = [pytest.mark.kafka]

PARTITIONS = 3
AGENTS = [f"agent-{i}" for i in range(5)]
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Models:
    """The two figures a partition view needs of the read models."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.offset = -1


async def seeded(cfg: KafkaConfig) -> list[tuple[str, datetime]]:
    """40 events over the agents, a second apart (two of them in the same second)."""
    await ensure_topics(cfg)
    kafka = KafkaLog(cfg)
    await kafka.start()
    try:
        out, records = [], []
        for i in range(40):
            agent = AGENTS[i % len(AGENTS)]
            at = T0 + timedelta(seconds=i if i != 21 else 20)
            value = orjson.dumps({"occurred_at": at.isoformat(), "n": i})
            records.append((agent, "memory.stored" if i % 3 else "memory.updated", value, None))
            out.append((agent, at))
        await kafka.append(records)
        return out
    finally:
        await kafka.close()


async def test_scattered_offsets_and_instants(cfg: KafkaConfig) -> None:
    written = await seeded(cfg)
    plog = KafkaPartitionLog(cfg)
    await plog.start()
    try:
        for p in range(PARTITIONS):
            mine = [(a, t) for a, t in written if partition_for(a, PARTITIONS) == p]
            end = await plog.end_offset(p)
            assert end == len(mine)
            every = await plog.read(p)
            assert [r.offset for r in every] == list(range(end))
            wanted = [end + 5, *range(end - 1, -1, -3), 0]  # unordered, repeated, one past the end
            got = await plog.read_offsets(p, wanted)
            assert [r.offset for r in got] == sorted(set(range(end - 1, -1, -3)) | {0})
            assert [r.value for r in got] == [every[r.offset].value for r in got]
            # an instant maps to the first event that occurred after it, as a linear scan says
            for when in [T0 - timedelta(days=1), *(t for _, t in mine), T0 + timedelta(seconds=20.5), T0.max]:
                when = when if when.tzinfo else when.replace(tzinfo=UTC)
                linear = next((i for i, (_, t) in enumerate(mine) if t > when), len(mine))
                assert await plog.first_after(p, when, end) == linear, (p, when)
            # one agent's events of the partition, by type
            agent = mine[0][0]
            view = plog.view(p, Models(p))
            stored = await view.read(agent_id=agent, types=["memory.stored"])
            assert stored and all(r.agent_id == agent and r.type == "memory.stored" for r in stored)
            assert len(stored) == sum(1 for r in every if r.agent_id == agent and r.type == "memory.stored")
            with pytest.raises(InputError, match="agent_id"):
                await view.read_audit()
            assert await view.read_audit(agent_id=agent) == []
    finally:
        await plog.close()


async def test_a_read_that_cannot_get_its_turn_is_log_unavailable(cfg: KafkaConfig) -> None:
    await ensure_topics(cfg)
    plog = KafkaPartitionLog(cfg, deadline_s=0.5)
    await plog.start()
    try:
        assert await plog.end_offset(0) == 0
        async with plog._lock:  # another read holding the node's reader (a stuck broker fetch)
            with pytest.raises(LogUnavailable, match="no answer from Kafka"):
                await plog.read_offsets(0, [0])
        assert await plog.read(0) == []  # and the reader serves the next read as before
    finally:
        await plog.close()
