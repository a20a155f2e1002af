"""The key map of a Kafka decider (docs/erasure.md, "Kafka mode"): an erasure names its keys
without reading its partition, the next owner of the partition (a restart, a rebalance) folds
the same map from the topics and completes an erasure whose key destruction stopped part-way,
and keys are destroyed in batches between which other keys are made."""

from __future__ import annotations

import asyncio
import base64
import secrets
import threading

import pytest

from memstream.api.kafka.worker.erasure import sealed_before
from memstream.streams import commands as c
from memstream.streams.deciders.kafka import KafkaDecider
from memstream.streams.deciders.sealing import KafkaSealing
from memstream.streams.keys.kafka import TOMBSTONE_BATCH, KafkaKeyStore
from memstream.streams.log.kafka import KafkaConfig, KafkaLog, ensure_topics
from memstream.streams.log.port import partition_for
from memstream.streams.log.sealed_keys import keys_named
from tests.support.kafka_commands import env, store
from tests.support.master_key import TEST_MASTER_KEY

pytestmark = [pytest.mark.kafka]

PARTITIONS = 2


def owner(cfg: KafkaConfig, sealing: KafkaSealing, partition: int) -> KafkaDecider:
    """A decider owning ``partition`` with nothing in memory, as a worker just assigned it."""
    decider = KafkaDecider(KafkaLog(cfg, sealing), sealing=sealing)
    decider.owned = {partition}
    return decider


async def test_the_next_owner_folds_the_key_map_and_completes_a_destruction_stopped_part_way(
    cfg: KafkaConfig,
) -> None:
    await ensure_topics(cfg)
    sealing = await asyncio.to_thread(KafkaSealing.from_env, cfg)
    p = partition_for("ann", PARTITIONS)
    other = next(a for a in (f"other-{i}" for i in range(100)) if partition_for(a, PARTITIONS) == p)
    deciders = [owner(cfg, sealing, p)]
    try:
        async with asyncio.timeout(120):
            first = deciders[0]
            ids = []
            for i in range(6):
                ids.append((await first.submit_local(p, store("ann", f"ann's note {i}"))).outcome.id)
                await first.submit_local(p, store(other, f"{other}'s note {i}"))
            assert ids[0] is not None
            erase_one = await first.submit_local(p, c.EraseMemory(**env("ann"), kind="mem", record_id=ids[0],
                                                                   reason="one"))  # fmt: skip
            await first.submit_local(p, store("ann", "ann's note after the first erasure"))
            erased = await first.submit_local(p, c.EraseAgentData(**env("ann"), reason="all"))
            assert erase_one.offset is not None and erased.offset is not None
            one = await first.named_by(p, erase_one.offset)
            live = await first.named_by(p, erased.offset)
            assert one is not None and live is not None
            assert len(one.keys) == 1 and len(live.keys) == 6  # 5 notes left + the one written after
            assert not set(one.keys) & set(live.keys)
            # The same keys a read of the partition finds (less those the first erasure named).
            records = await sealed_before(first.kafka, cfg, p, "ann", erased.offset)
            read = keys_named(((o, v) for _, o, v in records), "ann", None, erased.offset)
            assert set(live.keys) == set(read) - set(one.keys)
            # The first erasure completes; the second stops part-way (its worker dies).
            keys = sealing.store.for_partition(p)
            await asyncio.to_thread(keys.destroy_ids, one.keys)
            await asyncio.to_thread(keys.mark_erased, erase_one.offset)
            await asyncio.to_thread(keys.destroy_ids, live.keys[:2])
            # The next owner, with nothing in memory, folds the map from the topics.
            second = owner(cfg, sealing, p)
            deciders.append(second)
            assert await second.named_by(p, erase_one.offset) is None  # completed: not kept
            again = await second.named_by(p, erased.offset)
            assert again is not None and set(again.keys) == set(live.keys)
            assert await asyncio.to_thread(keys.destroy_ids, again.keys) == 4  # the rest
            assert all(sealing.store.get(k) is None for k in live.keys)
            await asyncio.to_thread(keys.mark_erased, erased.offset)
            second.erasure_completed(p, erased.offset)
            assert await second.named_by(p, erased.offset) is None
            # The other agent's keys are named by neither and still open its records.
            mine = keys_named(((o, v) for _, o, v in await sealed_before(second.kafka, cfg, p, other, 10**9)),
                              other, None, 10**9)  # fmt: skip
            assert len(mine) == 6 and all(sealing.store.get(k) is not None for k in mine)
            third = owner(cfg, sealing, p)
            deciders.append(third)
            assert await third.named_by(p, erased.offset) is None
            assert third.key_scopes[p].named(erased.offset) is None
    finally:
        for d in deciders:
            await d.kafka.close()
        await asyncio.to_thread(sealing.close)


def test_keys_are_destroyed_in_batches_while_others_are_made(shared_cfg: KafkaConfig) -> None:
    """More than one batch of tombstones, while another thread takes new keys (pool refills go
    out between the batches): every destroyed key is gone for a store started afterwards, and
    every key taken meanwhile is kept."""
    master = base64.b64decode(TEST_MASTER_KEY)
    store_ = KafkaKeyStore(shared_cfg, master)
    taken: list[bytes] = []
    try:
        doomed = [store_.take()[0] for _ in range(3 * TOMBSTONE_BATCH + 17)]  # several pool refills

        def take_meanwhile() -> None:
            for _ in range(600):
                taken.append(store_.take()[0])

        thread = threading.Thread(target=take_meanwhile)
        thread.start()
        assert store_.destroy_ids([*doomed, secrets.token_bytes(16)]) == len(doomed)
        thread.join(60)
        assert not thread.is_alive()
    finally:
        store_.close()
    later = KafkaKeyStore(shared_cfg, master)
    try:
        assert all(later.get(k) is None for k in doomed)
        assert len(taken) == 600 and all(later.get(k) is not None for k in taken)
    finally:
        later.close()


async def test_a_key_the_deciders_sealer_still_caches_opens_nothing_once_destroyed(cfg: KafkaConfig) -> None:
    """The decider's sealers drop an erasure's keys from their opening cache on the release
    thread (``drop_later``), not at the decision: a read in between, once the keys are
    destroyed, must not open the record with a key still cached."""
    await ensure_topics(cfg)
    sealing = await asyncio.to_thread(KafkaSealing.from_env, cfg)
    p = partition_for("ann", PARTITIONS)
    decider = owner(cfg, sealing, p)
    try:
        async with asyncio.timeout(120):
            stored = await decider.submit_local(p, store("ann", "ann's note the erasure takes"))
            assert stored.offset is not None
            [raw] = await decider.kafka.read_records(cfg.events_topic, p, stored.offset, stored.offset + 1, raw=True)
            sealer = sealing.sealer(p)
            assert sealer.drop_later
            assert b"erasure takes" in sealing.open(p, raw.value or b"", None)[0]  # its key cached now
            erased = await decider.submit_local(p, c.EraseAgentData(**env("ann"), reason="all"))
            assert erased.offset is not None
            named = await decider.named_by(p, erased.offset)
            assert named is not None and len(named.keys) == 1
            await asyncio.to_thread(sealing.store.for_partition(p).destroy_ids, named.keys)
            value, _ = sealing.open(p, raw.value or b"", None)
            assert b"erasure takes" not in value and b'"redacted":true' in value
    finally:
        await decider.kafka.close()
        await asyncio.to_thread(sealing.close)
