"""A worker gaining a partition completes the erasures a previous owner left pending without
reading the partition a second time (api/kafka/worker/erasure.py ``complete_pending``): the
catch-up's own fold meets them (``PartitionModels.erasures_folded``), and only what the models
held before it (a checkpoint) is read for them. On the real broker, with sealed topics."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from memstream.api.kafka.worker.app import Worker
from memstream.api.services.settings import Settings
from memstream.streams import commands as c
from memstream.streams.deciders.sealing import KafkaSealing
from memstream.streams.deciders.step import NewAudit, NewEvent, decide_and_fold
from memstream.streams.decision.limits import Limits
from memstream.streams.decision.state import DecisionState
from memstream.streams.log.kafka import KafkaConfig, KafkaLog, ensure_topics
from memstream.streams.log.port import partition_for
from memstream.streams.log.sealing import ERASURE_TYPES
from tests.support.kafka_commands import env, store

pytestmark = [pytest.mark.kafka]

PARTITIONS = 2
STORES = 400


async def fill(cfg: KafkaConfig, sealing: KafkaSealing) -> tuple[int, int]:
    """Sealed stores of one agent, one of them erased halfway (decided, never completed), more
    stores after it; (the partition, the erasure's offset)."""
    agent = "ag-pending"
    state = DecisionState(cfg.partitions)
    events: list[NewEvent] = []
    audits: list[NewAudit] = []
    erased = None
    for i in range(STORES):
        committed = decide_and_fold(state, store(agent, f"note {i} on the quarterly plan"), Limits(), events, audits)
        assert committed.outcome.result == "applied" and committed.outcome.id is not None
        if i == 10:
            erased = committed.outcome.id
        if i == STORES // 2:
            assert erased is not None
            cmd = c.EraseMemory(**env(agent), kind="mem", record_id=erased, reason="left pending")
            assert decide_and_fold(state, cmd, Limits(), events, audits).outcome.result == "applied"
    sealed = sealing.seal_events(events)
    kafka = KafkaLog(cfg)
    await kafka.start()
    try:
        await kafka.append([(e.agent, e.type, v, vec) for e, (v, vec) in zip(events, sealed, strict=True)])
    finally:
        await kafka.close()
    [offset] = [e.offset for e in events if e.type in ERASURE_TYPES]
    return partition_for(agent, cfg.partitions), offset


async def test_a_pending_erasure_is_completed_from_the_catch_ups_fold_without_a_second_read(
    cfg: KafkaConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ensure_topics(cfg)
    sealing = await asyncio.to_thread(KafkaSealing.from_env, cfg)
    node = Worker(cfg, Settings(data_dir=tmp_path, kafka_checkpoint_every=0), url="http://127.0.0.1:9", sealing=sealing)
    reads: list[dict[str, Any]] = []
    try:
        p, offset = await fill(cfg, sealing)
        keys = sealing.store.for_partition(p)
        assert keys.erased_through() == (-1, -1)
        read = node.announcer.read

        async def counted(*args: Any, **kwargs: Any) -> Any:
            reads.append({"args": args, **kwargs})
            return await read(*args, **kwargs)

        monkeypatch.setattr(node.announcer, "read", counted)
        async with asyncio.timeout(120):
            await node.assigned({p})
            while keys.erased_through()[0] < offset:  # completed by the worker taking the partition
                await asyncio.sleep(0.05)
            models = node.models[p]
            assert models.offset == models.target  # caught up
        # The partition was read once, by the tail's fold: no read looked for erasures in it (the
        # old worker read it whole, every record past the last completed erasure).
        assert not [r for r in reads if r.get("types")], reads
        assert models.erasures_folded is None  # noted only while the pending ones were looked for
    finally:
        await node.close()
        await asyncio.to_thread(sealing.close)
