"""The Kafka decider when an append fails (docs/reliability.md, "When an append fails"), on a
broker of the module's own that is frozen (SIGSTOP) under a burst of in-process writes: the
producer cannot queue the burst's records within its request timeout, so the append fails
part-way, with the first records queued and the rest not. The submitters get
``LogUnavailable`` (a 503 at the faces), the decider keeps no state for the partition and
stops deciding (its worker stops; the partition moves), and once the broker is back every
command, retried under its command id by the partition's next owner, is in the log once."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from memstream.streams.deciders.kafka import KafkaDecider, fold_partition
from memstream.streams.events import decode
from memstream.streams.log.kafka import KafkaConfig, KafkaLog, ensure_topics
from memstream.streams.log.port import LogUnavailable, partition_for
from tests.support.broker import require_broker
from tests.support.broker_faults import LocalBroker
from tests.support.kafka_commands import store

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 2
AGENT = "fa"
BURST = 40  # x ~3 KB: past the producer's 16 KB batch for one partition, so queueing must wait
TIMEOUT_MS = 3_000  # the producer's request timeout: how long queueing waits for the broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    asyncio.run(require_broker())
    b = LocalBroker(tmp_path_factory.mktemp("kafka-failed-append"))
    b.start()
    try:
        yield b
    finally:
        b.purge()


def decider_on(cfg: KafkaConfig, partition: int) -> tuple[KafkaDecider, list[BaseException]]:
    decider = KafkaDecider(KafkaLog(cfg))
    decider.owned = {partition}
    stopped: list[BaseException] = []
    decider.on_failure = stopped.append  # a worker exits here (faust_app.stop_worker)
    return decider, stopped


async def events_by_command(cfg: KafkaConfig, partition: int) -> tuple[list[int], Counter[str]]:
    kafka = KafkaLog(cfg)
    await kafka.start()
    try:
        events = await kafka.read(partition, 0, limit=100_000, vectors=False)
    finally:
        await kafka.close()
    return [e.offset for e in events], Counter(decode(e.value)["command_id"] for e in events)


async def test_a_failed_append_stops_the_decider_and_retries_land_once(broker: LocalBroker) -> None:
    cfg = KafkaConfig(
        bootstrap=broker.bootstrap,
        prefix=f"failed-append-{uuid.uuid4().hex[:8]}",
        partitions=PARTITIONS,
        replication=1,
        request_timeout_ms=TIMEOUT_MS,
    )
    p = partition_for(AGENT, PARTITIONS)
    await ensure_topics(cfg)
    decider, stopped = decider_on(cfg, p)
    burst = [store(AGENT, f"burst note {i} " + "pad " * 700, command_id=f"burst-{i}") for i in range(BURST)]
    try:
        async with asyncio.timeout(120):
            for i in range(3):  # the producer connected and the partition's leader known
                before = await decider.submit_local(p, store(AGENT, f"before {i}", command_id=f"before-{i}"))
                assert before.outcome.result == "applied"
            await asyncio.to_thread(broker.pause)
            try:
                answers = await asyncio.gather(
                    *(decider.submit_local(p, cmd) for cmd in burst), return_exceptions=True
                )
                failed = [a for a in answers if isinstance(a, LogUnavailable)]
                assert len(failed) == BURST, [a for a in answers if not isinstance(a, LogUnavailable)][:3]
                # The decider keeps nothing it folded for the burst, and decides nothing more.
                assert p not in decider.states
                assert decider.failure is not None and len(stopped) == 1, stopped
                assert not decider.owns(p)
                with pytest.raises(LogUnavailable, match="stopped after a failed append"):
                    await decider.submit_local(p, store(AGENT, "after the failure"))
            finally:
                await asyncio.to_thread(broker.resume)
            # The worker is gone (its producer delivers or drops what it had queued)...
            await decider.kafka.close()
            # ...and the partition's next owner folds it from the log and answers the retries.
            heir, heir_stopped = decider_on(cfg, p)
            try:
                retried = await asyncio.gather(*(heir.submit_local(p, cmd) for cmd in burst))
                assert all(r.outcome.result == "applied" for r in retried), retried[:3]
                ids = [r.outcome.id for r in retried]
                assert len(set(ids)) == BURST  # no id handed out twice
                again = await asyncio.gather(*(heir.submit_local(p, cmd) for cmd in burst))
                assert [a.outcome for a in again] == [r.outcome for r in retried]
                assert all(a.offset is None for a in again)  # answered from the memo: nothing appended
                assert heir.failure is None and not heir_stopped
            finally:
                await heir.kafka.close()
        offsets, counts = await events_by_command(cfg, p)
        assert offsets == list(range(len(offsets)))  # dense: nothing landed at an unexpected offset
        assert {f"burst-{i}" for i in range(BURST)} <= set(counts)
        assert max(counts.values()) == 1, [c for c, n in counts.items() if n > 1][:5]  # each once
        kafka = KafkaLog(cfg)
        await kafka.start()
        try:
            assert (await fold_partition(kafka, p)).event_offset == len(offsets) - 1
        finally:
            await kafka.close()
    finally:
        await decider.kafka.close()  # closing twice is harmless; the module's broker is purged
