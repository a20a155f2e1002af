"""The Kafka broker memstream runs on does what memstream relies on.

Runs against ``MEMSTREAM_TEST_KAFKA_BOOTSTRAP`` (default ``127.0.0.1:9092``), e.g. the broker of
``infra/kafka-local.sh start``. When no broker answers, the tests are skipped, unless
``MEMSTREAM_REQUIRE_KAFKA=1`` (CI), where they fail with the reason.

What is checked is what a broker substitute (tansu) got wrong when measured here: explicit
topic creation, idempotent producers (InitProducerId), per-partition order, exact end offsets
when batches hold several records, consumer groups and committed offsets, topic deletion.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from tests.support.broker import BOOTSTRAP, STEP_TIMEOUT_S, TEST_REPLICATION, TEST_TIMEOUT_S, require_broker, wait_until

PARTITIONS = 3
AGENTS = [f"agent-{i:02d}" for i in range(12)]
EVENTS_PER_AGENT = 50

pytestmark = [pytest.mark.kafka]


class TopicFixture:
    """Creates one uniquely named topic explicitly, and deletes it (checking it is gone)."""

    def __init__(self, admin: AIOKafkaAdminClient, partitions: int = PARTITIONS) -> None:
        self.admin = admin
        self.partitions = partitions
        self.name = f"memstream-it-{uuid.uuid4().hex[:12]}"

    async def create(self) -> None:
        response = await self.admin.create_topics(
            [NewTopic(self.name, num_partitions=self.partitions, replication_factor=TEST_REPLICATION)],
            timeout_ms=int(STEP_TIMEOUT_S * 1000),
        )
        errors = [e for e in response.to_object()["topic_errors"] if e["error_code"] != 0]
        assert not errors, f"CreateTopics failed: {errors}"

        async def all_leaders() -> bool:
            (topic,) = await self.admin.describe_topics([self.name])
            parts = topic["partitions"] if topic["error_code"] == 0 else []
            return len(parts) == self.partitions and all(p["leader"] >= 0 for p in parts)

        await wait_until(f"{self.name} has a leader for all {self.partitions} partitions", all_leaders)

    async def delete(self) -> None:
        response = await self.admin.delete_topics([self.name], timeout_ms=int(STEP_TIMEOUT_S * 1000))
        errors = [e for e in response.to_object()["topic_error_codes"] if e["error_code"] != 0]
        assert not errors, f"DeleteTopics failed: {errors}"

        async def gone() -> bool:
            return self.name not in await self.admin.list_topics()

        await wait_until(f"{self.name} is no longer listed after deletion", gone)


async def produce_keyed_batch(topic: str) -> dict[TopicPartition, list[tuple[bytes, bytes]]]:
    """Produce EVENTS_PER_AGENT events for every agent, keyed by agent id, idempotently.

    Returns, per partition, the (key, value) pairs in the offset order the broker acknowledged.
    """
    producer = AIOKafkaProducer(
        bootstrap_servers=BOOTSTRAP,
        enable_idempotence=True,
        acks="all",
        linger_ms=5,  # several records per batch: end offsets must still be exact
        request_timeout_ms=int(STEP_TIMEOUT_S * 1000),
    )
    await producer.start()
    try:
        pending = []
        for seq in range(EVENTS_PER_AGENT):  # interleave agents, as a fleet would
            for agent in AGENTS:
                key, value = agent.encode(), f"{agent}:{seq}".encode()
                pending.append((key, value, await producer.send(topic, value=value, key=key)))
        by_offset: dict[TopicPartition, dict[int, tuple[bytes, bytes]]] = defaultdict(dict)
        for key, value, future in pending:
            meta = await future
            tp = TopicPartition(meta.topic, meta.partition)
            assert meta.offset not in by_offset[tp], f"two records acknowledged at {tp} offset {meta.offset}"
            by_offset[tp][meta.offset] = (key, value)
        # The broker granted a producer id (InitProducerId): idempotence is really on.
        txn_manager = getattr(producer, "_txn_manager", None)
        if txn_manager is not None:
            assert txn_manager.producer_id >= 0, "idempotent producer got no producer id"
    finally:
        await producer.stop()

    acknowledged = {}
    for tp, offsets in by_offset.items():
        assert sorted(offsets) == list(range(len(offsets))), (
            f"{tp}: acknowledged offsets are not 0..{len(offsets) - 1} (duplicates or gaps)"
        )
        acknowledged[tp] = [offsets[o] for o in range(len(offsets))]
    return acknowledged


def check_agent_order(records: list[tuple[bytes, bytes]], where: str) -> None:
    """Within one partition, each agent's events appear in the order they were produced."""
    next_seq: dict[bytes, int] = defaultdict(int)
    for key, value in records:
        agent, _, seq = value.decode().rpartition(":")
        assert agent.encode() == key, f"{where}: record key {key!r} does not match value {value!r}"
        assert int(seq) == next_seq[key], f"{where}: {agent} event {seq} where {next_seq[key]} was due"
        next_seq[key] += 1


@pytest.mark.asyncio
async def test_broker_answers_metadata() -> None:
    await require_broker()
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP, request_timeout_ms=int(STEP_TIMEOUT_S * 1000))
    try:
        async with asyncio.timeout(TEST_TIMEOUT_S):
            await admin.start()
            cluster = await admin.describe_cluster()
            assert cluster["brokers"], "metadata lists no broker"
            assert cluster["cluster_id"], "metadata has no cluster id (not a KRaft/modern broker?)"
            assert cluster["controller_id"] >= 0, "metadata names no controller"
            # memstream creates every topic explicitly; the brokers must not invent topics.
            broker_id = str(cluster["brokers"][0]["node_id"])
            (described,) = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.BROKER, broker_id, {"auto.create.topics.enable": None})]
            )
            entries = {
                e["config_names"]: e["config_value"]
                for r in described.to_object()["resources"]
                for e in r["config_entries"]
            }
            assert entries.get("auto.create.topics.enable") == "false", (
                f"broker {broker_id} has auto.create.topics.enable={entries.get('auto.create.topics.enable')!r}; "
                "memstream expects topics to be created explicitly only"
            )
    finally:
        await admin.close()


@pytest.mark.asyncio
async def test_idempotent_produce_then_consume_in_order() -> None:
    await require_broker()
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP, request_timeout_ms=int(STEP_TIMEOUT_S * 1000))
    async with asyncio.timeout(TEST_TIMEOUT_S):
        await admin.start()
        topic = TopicFixture(admin)
        try:
            await topic.create()
            acknowledged = await produce_keyed_batch(topic.name)

            total = len(AGENTS) * EVENTS_PER_AGENT
            assert sum(len(v) for v in acknowledged.values()) == total
            # Keyed by agent: each agent's events all live in one partition.
            partitions_of: dict[bytes, set[int]] = defaultdict(set)
            for tp, records in acknowledged.items():
                for key, _ in records:
                    partitions_of[key].add(tp.partition)
            split = {k: v for k, v in partitions_of.items() if len(v) > 1}
            assert not split, f"agents spread over several partitions: {split}"
            assert len(acknowledged) > 1, "12 agents all hashed to one partition: keys are not used"

            consumer = AIOKafkaConsumer(
                bootstrap_servers=BOOTSTRAP,
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                isolation_level="read_committed",
                request_timeout_ms=int(STEP_TIMEOUT_S * 1000),
            )
            await consumer.start()
            try:
                tps = [TopicPartition(topic.name, p) for p in range(PARTITIONS)]
                consumer.assign(tps)
                await consumer.seek_to_beginning(*tps)
                consumed: dict[TopicPartition, list[tuple[int, bytes, bytes]]] = defaultdict(list)
                count = 0
                async with asyncio.timeout(STEP_TIMEOUT_S):
                    while count < total:
                        batches = await consumer.getmany(timeout_ms=500)
                        for tp, messages in batches.items():
                            consumed[tp].extend((m.offset, m.key, m.value) for m in messages)
                            count += len(messages)

                for tp in tps:
                    got = consumed.get(tp, [])
                    assert [o for o, _, _ in got] == list(range(len(got))), (
                        f"{tp}: consumed offsets are not contiguous from 0"
                    )
                    assert [(k, v) for _, k, v in got] == acknowledged.get(tp, []), (
                        f"{tp}: consumed records differ from what the broker acknowledged"
                    )
                    check_agent_order([(k, v) for _, k, v in got], str(tp))

                beginning = await consumer.beginning_offsets(tps)
                end = await consumer.end_offsets(tps)
                for tp in tps:
                    expected = len(acknowledged.get(tp, []))
                    assert beginning[tp] == 0, f"{tp}: beginning offset {beginning[tp]}, expected 0"
                    assert end[tp] == expected, f"{tp}: end offset {end[tp]}, expected {expected}"
            finally:
                await consumer.stop()
        finally:
            try:
                await topic.delete()
            finally:
                await admin.close()


@pytest.mark.asyncio
async def test_consumer_group_reads_all_and_commits() -> None:
    """A consumer group (as a faust worker uses) gets every partition and commits end offsets."""
    await require_broker()
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP, request_timeout_ms=int(STEP_TIMEOUT_S * 1000))
    async with asyncio.timeout(TEST_TIMEOUT_S):
        await admin.start()
        topic = TopicFixture(admin)
        try:
            await topic.create()
            acknowledged = await produce_keyed_batch(topic.name)
            total = sum(len(v) for v in acknowledged.values())

            group = f"memstream-it-group-{uuid.uuid4().hex[:8]}"
            consumer = AIOKafkaConsumer(
                topic.name,
                bootstrap_servers=BOOTSTRAP,
                group_id=group,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                request_timeout_ms=int(STEP_TIMEOUT_S * 1000),
            )
            await consumer.start()
            try:
                count = 0
                async with asyncio.timeout(STEP_TIMEOUT_S):
                    while count < total:
                        batches = await consumer.getmany(timeout_ms=500)
                        count += sum(len(m) for m in batches.values())
                assert count == total
                assigned = consumer.assignment()
                assert {tp.partition for tp in assigned} == set(range(PARTITIONS)), (
                    f"the only group member was assigned {sorted(tp.partition for tp in assigned)}"
                )
                await consumer.commit()
                for tp in assigned:
                    expected = len(acknowledged.get(tp, []))
                    committed = await consumer.committed(tp)
                    assert committed == expected, f"{tp}: committed {committed}, expected {expected}"
            finally:
                await consumer.stop()
        finally:
            try:
                await topic.delete()
            finally:
                await admin.close()
