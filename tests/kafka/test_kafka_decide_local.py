"""The decider's in-process path (``KafkaDecider.submit_local``) on the real broker: the same
decisions, offsets and idempotence as the commands topic, interleaved safely with topic
batches, and refused for partitions the worker does not own."""

from __future__ import annotations

import asyncio

import pytest

from memstream.streams.deciders.codec import encode_command
from memstream.streams.deciders.kafka import Incoming, KafkaDecider, NotOwned, fold_partition
from memstream.streams.log.kafka import KafkaConfig, KafkaLog, ensure_topics
from memstream.streams.log.port import partition_for
from tests.support.kafka_commands import all_events, store

pytestmark = [pytest.mark.kafka]

PARTITIONS = 3


async def started_decider(cfg: KafkaConfig, owned: set[int]) -> KafkaDecider:
    await ensure_topics(cfg)
    decider = KafkaDecider(KafkaLog(cfg))
    decider.owned = set(owned)
    return decider


async def test_local_writes_decide_once_in_order_and_batch(cfg: KafkaConfig) -> None:
    agent = "ag-local"
    p = partition_for(agent, cfg.partitions)
    decider = await started_decider(cfg, {p})
    try:
        async with asyncio.timeout(60):
            outs = await asyncio.gather(*(decider.submit_local(p, store(agent, f"note {i}")) for i in range(40)))
            assert [o.outcome.result for o in outs] == ["applied"] * 40
            assert sorted(o.offset for o in outs) == list(range(40))  # one writer: consecutive offsets
            assert decider.batches < 40  # concurrent submitters shared rounds of acks

            again = store(agent, "note 0 again", command_id="cid-fixed")
            first = await decider.submit_local(p, again)
            second = await decider.submit_local(p, again)  # a retry with the same command id
            assert second.outcome == first.outcome and second.offset is None  # appends nothing

            named = await decider.submit_local(p, store(agent, "named", msg_id="m1"))
            dup = await decider.submit_local(p, store(agent, "other", msg_id="m1"))  # W1, as on the topic
            assert (dup.outcome.result, dup.outcome.id) == ("skipped", named.outcome.id)
        events = [e for e in await all_events(cfg) if e["type"] == "memory.stored"]
        assert len(events) == 42
        # A new owner folds exactly what the local path appended and answers the retry from it.
        kafka = KafkaLog(cfg)
        await kafka.start()
        try:
            state = await fold_partition(kafka, p)
        finally:
            await kafka.close()
        assert state.event_offset == named.offset  # the last event any of these writes appended
        assert state.agent(agent).commands.get("cid-fixed") is not None
    finally:
        await decider.kafka.close()


async def test_local_and_topic_batches_interleave_without_clashing(cfg: KafkaConfig) -> None:
    agent = "ag-mixed"
    p = partition_for(agent, cfg.partitions)
    decider = await started_decider(cfg, {p})
    try:
        async with asyncio.timeout(60):
            topic_batches = [
                [
                    Incoming(p, n * 10 + i, *encode_command(store(agent, f"topic {n} {i}"), reply_to=0))
                    for i in range(10)
                ]
                for n in range(5)
            ]
            local = [decider.submit_local(p, store(agent, f"local {i}")) for i in range(50)]
            results = await asyncio.gather(*local, *(decider.handle(b) for b in topic_batches))
            if decider._completing is not None:
                await decider._completing
            assert decider.failure is None  # no append landed where the state did not expect it
            assert all(r.outcome.result == "applied" for r in results[:50])
        events = [e for e in await all_events(cfg) if e["type"] == "memory.stored"]
        assert len(events) == 100
        assert sorted(e["payload"]["content"] for e in events) == sorted(
            [f"local {i}" for i in range(50)] + [f"topic {n} {i}" for n in range(5) for i in range(10)]
        )
    finally:
        await decider.kafka.close()


async def test_local_path_refuses_partitions_it_does_not_own(cfg: KafkaConfig) -> None:
    agent = "ag-elsewhere"
    p = partition_for(agent, cfg.partitions)
    decider = await started_decider(cfg, set(range(cfg.partitions)) - {p})
    try:
        assert not decider.owns(p)
        with pytest.raises(NotOwned):
            await decider.submit_local(p, store(agent, "not mine"))
        # Owned when submitted, moved before its turn: the submitter is told, nothing is appended.
        decider.owned.add(p)
        pending = asyncio.ensure_future(decider.submit_local(p, store(agent, "moved away")))
        await asyncio.sleep(0)  # queued for the next local batch (which waits LOCAL_BATCH_WAIT_S)
        assert decider._local and not pending.done()
        decider.owned.discard(p)
        with pytest.raises(NotOwned):
            await asyncio.wait_for(pending, 30)
        contents = [e["payload"].get("content") for e in await all_events(cfg)]
        assert "not mine" not in contents and "moved away" not in contents
    finally:
        await decider.kafka.close()
