"""Erasure on a Kafka worker (issue 16; docs/erasure.md, "Kafka mode"): the erasure is decided
like any write (its event durably in the partition's events topic), then completed in the
embedded order: the partition's read models fold it, the keys its records were sealed under are
destroyed (named by the decider's key map of the partition, or, without one, found by reading
the sealed records themselves: streams/log/sealed_keys.py), the partition's checkpoint is
rewritten, the partition's ``erased_through`` is marked in the keys topic and the erasure is
recorded in the ledger. A crash anywhere after the append is completed by the worker that takes
the partition next (``complete_pending``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from memstream.api.kafka.worker.models import PartitionModels
from memstream.api.services.erasure import append_ledger, dropped_by, ledger_entry
from memstream.api.services.settings import Settings
from memstream.streams.deciders.sealing import KafkaSealing
from memstream.streams.events import decode
from memstream.streams.folding import collector_paused
from memstream.streams.log.kafka import KafkaConfig, KafkaLog, matching
from memstream.streams.log.sealed_keys import Named, clear_content, keys_named
from memstream.streams.log.sealing import ERASURE_TYPES, is_sealed
from memstream.streams.release import short_switches

log = logging.getLogger(__name__)

SCAN_LIMIT = 100_000_000
PLAINTEXT = "partition {p} of {topic} holds {n} record(s) of this data written before sealing: migrate the topics"


class Steps:
    """Seconds each step of an erasure took, for its log line (bench/kafka_erasure.py reads it)."""

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def done(self, step: str) -> None:
        now = time.perf_counter()
        self.seconds[step], self.last = round(now - self.last, 3), now

    def __str__(self) -> str:
        return "steps " + " ".join(f"{k}={v}s" for k, v in self.seconds.items())


class ErasingWorker(Protocol):
    """What an erasure uses of its worker (api/kafka/worker/app.py ``Worker``)."""

    cfg: KafkaConfig
    settings: Settings
    sealing: KafkaSealing | None
    announcer: KafkaLog
    acked: dict[int, int]

    async def rewrite_checkpoint(self, models: PartitionModels) -> None: ...

    async def named_by(self, partition: int, offset: int) -> Named | None:
        """What the erasure at ``offset`` names, from the decider's key map (None: not known there)."""
        ...

    def erasure_completed(self, partition: int, offset: int) -> None: ...


async def erasure_offset(kafka: KafkaLog, partition: int, agent: str, command_id: str) -> int | None:
    """The offset of the erasure event a command appended (for a retried erase command)."""
    types = sorted(ERASURE_TYPES)
    for rec in await kafka.read(partition, 0, agent_id=agent, types=types, limit=SCAN_LIMIT, vectors=False):
        if decode(rec.value)["command_id"] == command_id:
            return rec.offset
    return None


async def sealed_before(kafka: KafkaLog, cfg: KafkaConfig, partition: int, agent: str, offset: int) -> list[
    tuple[str, int, bytes]
]:  # fmt: skip
    """(topic, offset, stored value) of ``agent``'s events before ``offset`` and of its audit
    records decided before it, as stored (sealed values unopened): what names their keys."""
    keep = matching(agent)
    out: list[tuple[str, int, bytes]] = []
    for rec in await kafka.read_records(cfg.events_topic, partition, 0, offset, keep, SCAN_LIMIT, raw=True):
        out.append((cfg.events_topic, rec.offset, rec.value or b""))
    for rec in await kafka.read_records(cfg.audit_topic, partition, 0, None, keep, SCAN_LIMIT, raw=True):
        if int(dict(rec.headers).get("after_event", b"-1")) < offset:
            # An audit record's own offset is of the audit topic: what orders it against the
            # erasure is the event it was decided after.
            out.append((cfg.audit_topic, -1, rec.value or b""))
    return out


def plaintext_left(records: list[tuple[str, int, bytes]], ev: dict[str, Any], partition: int) -> list[str]:
    """What sealing cannot reach: records of the erased data written before the topics were
    sealed (clear, with content)."""
    scopes = ev["payload"].get("scopes")
    wanted = None if scopes is None else set(scopes)
    counts: dict[str, int] = {}
    for topic, _, value in records:
        if is_sealed(value) or not value:
            continue
        found = clear_content(decode(value))
        if found is None or (wanted is not None and found[1] is not None and found[1] not in wanted):
            continue
        counts[topic] = counts.get(topic, 0) + 1
    return unreachable(counts, partition)


def unreachable(counts: dict[str, int], partition: int) -> list[str]:
    return [PLAINTEXT.format(p=partition, topic=t, n=n) for t, n in sorted(counts.items()) if n]


async def destroy_keys(
    worker: ErasingWorker, partition: int, offset: int, ev: dict[str, Any], steps: Steps | None = None
) -> tuple[int, list[str]]:
    """Destroy the keys of what the erasure at ``offset`` names (idempotent); (how many were
    there, what sealing could not reach)."""
    sealing = worker.sealing
    agent = str(ev["scope"]["agent_id"])
    scopes = ev["payload"].get("scopes")
    named = await worker.named_by(partition, offset)
    if named is not None:  # the decider's key map names them: nothing to read
        ids, left = await asyncio.to_thread(named.key_ids), unreachable(named.clear, partition)
        if steps is not None:
            steps.done("named")
    else:
        records = await sealed_before(worker.announcer, worker.cfg, partition, agent, offset)
        # Decoding every record of the agent (0.5 s at 100k) runs off the event loop, which
        # answers every other agent of this worker meanwhile.
        left = await asyncio.to_thread(plaintext_left, records, ev, partition)
        ids = await asyncio.to_thread(keys_named, ((o, value) for _, o, value in records), agent, scopes, offset)
        if steps is not None:
            steps.done("scan")
    if sealing is None:
        return 0, ["this worker has no key store: nothing was sealed", *left]
    keys = sealing.store.for_partition(partition)
    destroyed = await asyncio.to_thread(keys.destroy_ids, ids)
    sealing.forget(partition, agent, scopes)
    return destroyed, left


async def complete(
    worker: ErasingWorker,
    models: PartitionModels,
    offset: int,
    settle: Callable[[int], Awaitable[None]],
) -> dict[str, Any]:
    """Steps 2 to 5 of the erasure at ``offset`` of ``models``' partition: the read models fold
    it (``settle``), keys destroyed, checkpoint rewritten, progress marked, ledger."""
    partition = models.partition
    steps = Steps()
    [rec] = await worker.announcer.read(partition, offset, offset + 1, vectors=False)
    ev = decode(rec.value)
    await settle(offset)  # every read model of the partition drops the record
    async with models.lock:  # the tail may be folding later events, a slice at a time (worker/tail.py)
        dropped = dropped_by(models.projections, ev)
    steps.done("fold")
    # Paused collector, short switches: as for the fold (``Worker._fold_erasure``).
    with collector_paused(), short_switches():
        destroyed, left = await destroy_keys(worker, partition, offset, ev, steps)
        steps.done("keys")
        await worker.rewrite_checkpoint(models)
        steps.done("checkpoint")
    entry = {**ledger_entry(offset, ev), "partition": partition, "topic": worker.cfg.events_topic}
    await asyncio.to_thread(append_ledger, worker.settings.data_dir, entry)
    if worker.sealing is not None:
        await asyncio.to_thread(worker.sealing.store.for_partition(partition).mark_erased, offset)
    worker.erasure_completed(partition, offset)
    steps.done("ledger")
    log.info("erasure at offset %d of partition %d completed: %d key(s) destroyed; %s", offset, partition,
             destroyed, steps)  # fmt: skip
    return {"event": ev, "offset": offset, "keys_destroyed": destroyed, "unreachable": left, "dropped": dropped}


async def complete_pending(
    worker: ErasingWorker, models: PartitionModels, settle: Callable[[int], Awaitable[None]], held: int
) -> int:
    """When a worker takes a partition: finish every erasure of it past the last one completed
    (a crash between the append and the answer), and rewrite a checkpoint older than the last
    erasure. Returns how many were finished.

    ``held``: the last offset the models held when they started noting the erasures they fold
    (``PartitionModels.erasures_folded``, set by the caller). Only the erasures up to it are
    read from the topic; those after it, up to the end at the assignment (``models.target``),
    the catch-up's own fold meets. Reading the whole partition again for them was about 13% of
    a worker's catch-up from 0 in a profile (docs/benchmarks.md, "Catching up at replay's rate
    (wave 9)")."""
    if worker.sealing is None:
        return 0
    keys = worker.sealing.store.for_partition(models.partition)
    through, last = keys.erased_through()
    offsets: list[int] = []
    if through < held:
        types = sorted(ERASURE_TYPES)
        read = await worker.announcer.read(
            models.partition, through + 1, held + 1, types=types, limit=SCAN_LIMIT, vectors=False
        )
        offsets = [rec.offset for rec in read]
    # The end may move while this waits (a rebalance keeping the models raises their target).
    while True:
        until = models.target
        await settle(until)
        if models.target == until:
            break
    folded = models.erasures_folded or []
    offsets += [o for o in folded if max(through, held) < o <= until]
    for offset in offsets:
        await complete(worker, models, offset, settle)
        last = max(last, offset)
    if not offsets and models.checkpoint_offset is not None and models.checkpoint_offset < last:
        await settle(last)
        await worker.rewrite_checkpoint(models)  # restored from a checkpoint an erasure outdated
    return len(offsets)
