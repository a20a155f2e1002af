"""Opening sealed records in Kafka mode once and cheaply (wave 8): a fetch's keys looked up at
once (``KafkaKeyStore.get_many``: one read to the keys topic's end for every id not known yet),
records opened straight into decoded events (``KafkaSealing.open_decoded``), and the erasure
contract kept: a key cached by a fetch and destroyed afterwards, by this process or another,
opens nothing."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Iterable

import orjson
import pytest

from memstream.streams.deciders.kafka import KafkaDecider, fold_partition
from memstream.streams.deciders.sealing import KafkaSealing
from memstream.streams.keys.kafka import KafkaKeyStore
from memstream.streams.log.kafka import KafkaConfig, KafkaLog, ensure_topics
from memstream.streams.log.port import partition_for
from memstream.streams.log.sealing import Sealer
from tests.support.kafka_commands import store
from tests.support.master_key import TEST_MASTER_KEY
from tests.system.test_sealed_reads import sealed_records
from tests.unit.test_sealing import VECTOR

pytestmark = [pytest.mark.kafka]
MASTER = base64.b64decode(TEST_MASTER_KEY)


def test_a_fetch_s_unknown_keys_come_with_one_read_of_the_topic(shared_cfg: KafkaConfig) -> None:
    """Keys made by another process: the reader knows none of them; one read to the topic's
    end brings them all, and opening then asks the store nothing."""
    writer_store = KafkaKeyStore(shared_cfg, MASTER)
    reader = KafkaSealing(KafkaKeyStore(shared_cfg, MASTER))
    try:
        records = sealed_records(Sealer(writer_store.for_partition(0)), 40)
        before = reader.store.catch_ups
        reader.fetch(0, (value for _, value, _ in records))
        assert reader.store.catch_ups - before <= 1
        gets = reader.store.catch_ups
        for ev, value, vector in records:
            assert reader.open_decoded(0, value, vector) == (ev, VECTOR)
            opened, opened_vector = reader.open(0, value, vector)
            assert (orjson.loads(opened), opened_vector) == (ev, VECTOR)
        assert reader.store.catch_ups == gets  # nothing left to ask for
    finally:
        reader.close()
        writer_store.close()


def test_a_fetched_key_destroyed_by_another_worker_opens_nothing(shared_cfg: KafkaConfig) -> None:
    """The cache a fetch fills is dropped when any process destroys a key: this reader sees the
    tombstone on its tail, its generation moves, and the record reads redacted."""
    eraser = KafkaKeyStore(shared_cfg, MASTER)
    reader = KafkaSealing(KafkaKeyStore(shared_cfg, MASTER))
    try:
        records = sealed_records(Sealer(eraser.for_partition(0)), 6)
        reader.fetch(0, (value for _, value, _ in records))
        assert reader.open_decoded(0, records[2][1], records[2][2]) == (records[2][0], VECTOR)
        generation = reader.store.generation()
        assert eraser.destroy_ids([records[2][1][4:20]]) == 1
        deadline = time.monotonic() + 20
        while reader.store.generation() == generation and time.monotonic() < deadline:
            time.sleep(0.05)  # the reader's tail reads the tombstone
        assert reader.store.generation() != generation
        reader.fetch(0, (value for _, value, _ in records))
        ev, vector = reader.open_decoded(0, records[2][1], records[2][2])
        assert ev["redacted"] is True and vector is None and "content" not in ev["payload"]
        assert reader.open_decoded(0, records[3][1], records[3][2]) == (records[3][0], VECTOR)
    finally:
        reader.close()
        eraser.close()


def test_a_fetched_key_destroyed_here_opens_nothing(shared_cfg: KafkaConfig) -> None:
    """The worker's own erasure (``destroy_ids`` through the partition's store): at once."""
    sealing = KafkaSealing(KafkaKeyStore(shared_cfg, MASTER))
    try:
        records = sealed_records(Sealer(sealing.store.for_partition(1)), 4)
        sealing.fetch(1, (value for _, value, _ in records))
        sealing.store.for_partition(1).destroy_ids([records[0][1][4:20]])
        ev, vector = sealing.open_decoded(1, records[0][1], records[0][2])
        assert ev["redacted"] is True and vector is None
        assert sealing.store.get_many([records[0][1][4:20]]) == {}
        assert sealing.open_decoded(1, records[1][1], records[1][2]) == (records[1][0], VECTOR)
    finally:
        sealing.close()


class OpenOnly:
    """The opener as a reader without the decoding path sees it (``Opener``: ``open`` only)."""

    def __init__(self, sealing: KafkaSealing) -> None:
        self.sealing = sealing

    def open(self, partition: int, value: bytes, vector: bytes | None) -> tuple[bytes, bytes | None]:
        return self.sealing.open(partition, value, vector)


async def test_the_decider_s_fold_opens_decoded_to_the_same_state(cfg: KafkaConfig) -> None:
    """A partition's decision state folded from sealed events and audit records (a retry's
    skip): through the decoding path, a chunk's keys fetched at once, it digests as through
    ``open`` of each record."""
    await ensure_topics(cfg)
    sealing = KafkaSealing(KafkaKeyStore(cfg, MASTER))
    agent = "ag-sealed-fold"
    p = partition_for(agent, cfg.partitions)
    decider = KafkaDecider(KafkaLog(cfg, sealing), sealing=sealing)
    decider.owned = {p}
    fetched: list[int] = []
    real_fetch = sealing.fetch

    def counting_fetch(partition: int, values: Iterable[bytes]) -> None:
        values = list(values)
        fetched.append(len(values))
        real_fetch(partition, values)

    try:
        async with asyncio.timeout(60):
            for i in range(30):
                assert (await decider.submit_local(p, store(agent, f"note {i}", msg_id=f"m{i}"))).offset is not None
            dup = await decider.submit_local(p, store(agent, "again", msg_id="m3"))  # skipped: an audit record
            assert dup.outcome.result == "skipped"
        folded = {}
        for name, opener in (("decoded", sealing), ("open", OpenOnly(sealing))):
            kafka = KafkaLog(cfg, opener)
            await kafka.start()
            try:
                sealing.fetch = counting_fetch  # type: ignore[method-assign]
                folded[name] = await fold_partition(kafka, p)
            finally:
                sealing.fetch = real_fetch  # type: ignore[method-assign]
                await kafka.close()
        assert folded["decoded"].digest() == folded["open"].digest()
        assert folded["decoded"].event_offset == 29
        assert fetched and sum(fetched) >= 30  # the decoding fold fetched its chunks' keys at once
    finally:
        await decider.kafka.close()
        sealing.close()
