"""The decider on Kafka: per partition, the same decide-and-fold step as the embedded bus.

A worker holds the decision state of each partition of the commands topic it is assigned. The
state is folded from that partition's events and audit records (merged in decision order by
the ``after_event`` header) when the partition's first command arrives after an assignment, so
whatever a previous owner appended is seen before anything is decided. Then, per batch:

1. decide every command in arrival order, folding its events into the state at once (the next
   command of the batch sees them) with the offsets they will get: this decider is the only
   writer of its partition of the events and audit topics;
2. queue the events and audit records in the idempotent producer (``acks=all``, order kept),
   and go on to the next batch while their acknowledgements are in flight;
3. in a completion chained to the previous batch's, wait for the acknowledgements, check the
   records landed at exactly the expected offsets, and only then reply to each submitter.

A failed append, or records landing elsewhere than expected (another writer: a zombie owner
after a rebalance), means the state folded records the log does not hold: the decider refuses
every later batch and the worker stops, so its partitions move and are folded afresh from the
topics elsewhere. Nothing unacknowledged was replied to; its submitters time out and retry with
the same command id. Delivery is at least once: a command seen again (redelivered after a
crash, or retried by its submitter) is recognised by its command id in the folded state and
answered with its first outcome, appending nothing (W9). That is what makes a decision
exactly-once in effect without Kafka transactions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from memstream.streams.commands import Command
from memstream.streams.decide_step import NewAudit, NewEvent, decide_and_fold
from memstream.streams.decision import DecisionState, Limits
from memstream.streams.events import AuditRecord, decode
from memstream.streams.kafka_codec import CodecError, decode_item, encode_reply
from memstream.streams.kafka_log import Appended, KafkaLog, KafkaLogError, OutRecord
from memstream.streams.log import Committed

log = logging.getLogger(__name__)

RESTORE_CHUNK = 20_000


@dataclass(frozen=True, slots=True)
class Incoming:
    """One record of the commands topic, as the consumer delivered it."""

    partition: int
    offset: int
    value: bytes
    headers: Any


async def fold_partition(kafka: KafkaLog, partition: int) -> DecisionState:
    """The decision state of one partition, folded from its events and audit records."""
    cfg = kafka.cfg
    state = DecisionState(cfg.partitions)
    audits = []
    start = 0
    while True:
        chunk = await kafka.read_records(cfg.audit_topic, partition, start, limit=RESTORE_CHUNK)
        for rec in chunk:
            after = int(dict(rec.headers).get("after_event", b"-1"))
            audits.append((rec.offset, after, rec.value or b""))
        if len(chunk) < RESTORE_CHUNK:
            break
        start = chunk[-1].offset + 1
    i = 0
    start = 0
    while True:
        events = await kafka.read(partition, start, limit=RESTORE_CHUNK, vectors=False)
        for ev in events:
            while i < len(audits) and audits[i][1] < ev.offset:
                state.apply_audit(audits[i][0], decode(audits[i][2]))
                i += 1
            state.apply_event(ev.offset, decode(ev.value))
        if len(events) < RESTORE_CHUNK:
            break
        start = events[-1].offset + 1
    for offset, _, value in audits[i:]:
        state.apply_audit(offset, decode(value))
    return state


class KafkaDecider:
    """Decides the commands of the partitions its worker holds (see the module docstring)."""

    def __init__(self, kafka: KafkaLog, limits: Limits | None = None) -> None:
        self.kafka = kafka
        self.limits = limits or Limits()
        self.states: dict[int, DecisionState] = {}
        self.decided = 0
        self.batches = 0
        self.busy_s = 0.0  # time spent deciding and queueing appends
        self._completing: asyncio.Task[None] | None = None  # the last batch's acks and replies
        self.failure: BaseException | None = None

    def forget(self, partitions: Iterable[int]) -> None:
        """Partitions assigned or revoked: their state is folded afresh at their next command."""
        for p in partitions:
            self.states.pop(p, None)

    async def handle(self, batch: Sequence[Incoming]) -> None:
        if self.failure is not None:
            raise self.failure  # stops the agent, and with it the worker (see _complete)
        if not self.kafka.started:
            await self.kafka.start()  # the worker's first batch: connect its producer and reader
        started = time.perf_counter()
        by_partition: dict[int, list[Incoming]] = {}
        for msg in batch:
            by_partition.setdefault(msg.partition, []).append(msg)
        for partition, msgs in sorted(by_partition.items()):
            await self._handle_partition(partition, msgs)
        self.batches += 1
        self.busy_s += time.perf_counter() - started

    async def _handle_partition(self, partition: int, msgs: list[Incoming]) -> None:
        state = self.states.get(partition)
        if state is None:
            state = self.states[partition] = await fold_partition(self.kafka, partition)
        items: list[tuple[Command | AuditRecord, int | None]] = []
        for msg in msgs:
            try:
                items.append(decode_item(msg.value, msg.headers))
            except CodecError as exc:
                # Written by a newer or broken producer: skipping it is the only way forward,
                # and it never became an event; say so loudly.
                log.error("commands partition %d offset %d skipped: %s", partition, msg.offset, exc)
        events: list[NewEvent] = []
        audits: list[NewAudit] = []
        replies: list[tuple[int, str, Committed]] = []
        try:
            for item, reply_to in items:
                try:
                    committed = decide_and_fold(state, item, self.limits, events, audits)
                except Exception:  # a bug in one decider must not sink the batch
                    log.exception("decider failed on %s", type(item).__name__)
                    continue
                if reply_to is not None:
                    replies.append((reply_to, item.command_id, committed))
            pending = await self._enqueue(events, audits)
        except BaseException:
            self.states.pop(partition, None)  # folded ahead of the log: fold afresh next time
            raise
        self.decided += len(items)
        # The next batch is decided while this one's acknowledgements are in flight; replies
        # go out only once they arrived, in batch order (each completion waits for the last).
        previous = self._completing
        self._completing = asyncio.create_task(self._complete(previous, partition, events, audits, pending, replies))

    async def _enqueue(self, events: list[NewEvent], audits: list[NewAudit]) -> list[asyncio.Future[Any]]:
        """Queue the events and audit records in the producer (order kept per partition)."""
        cfg = self.kafka.cfg
        event_records = [
            OutRecord(
                e.partition,
                e.agent.encode("utf-8", "surrogatepass"),
                e.value,
                [("type", e.type.encode())] + ([("vector", e.vector)] if e.vector is not None else []),
            )
            for e in events
        ]
        audit_records = [
            OutRecord(
                a.partition,
                a.agent.encode("utf-8", "surrogatepass"),
                a.value,
                [("type", a.kind.encode()), ("after_event", str(a.after_event).encode())],
            )
            for a in audits
        ]
        futures = await self.kafka.enqueue(cfg.events_topic, event_records) if events else []
        futures += await self.kafka.enqueue(cfg.audit_topic, audit_records) if audits else []
        return futures

    async def _complete(
        self,
        previous: asyncio.Task[None] | None,
        partition: int,
        events: list[NewEvent],
        audits: list[NewAudit],
        pending: list[asyncio.Future[Any]],
        replies: list[tuple[int, str, Committed]],
    ) -> None:
        try:
            if previous is not None:
                await previous
            metas = await asyncio.gather(*pending)
            landed = [Appended(m.partition, m.offset) for m in metas]
            _check_landed("events", partition, [e.offset for e in events], landed[: len(events)])
            _check_landed("audit", partition, [a.offset for a in audits], landed[len(events) :])
        except BaseException as exc:
            # The state folded records that are not (all) in the log. Deciding on would build on
            # them: the worker stops (its partitions move; their states are folded afresh from the
            # topics there). Submitters of the unanswered commands time out and retry with the
            # same command id, answered from the log's state.
            self.states.pop(partition, None)
            if self.failure is None:
                self.failure = exc
                log.critical("append failed on partition %d; the worker stops: %s", partition, exc)
            raise
        if replies:
            # Not waited for: a lost reply is a submitter's timeout, repaired by its retry with
            # the same command id (answered from the folded state), exactly as after a crash.
            await self.kafka.send(
                self.kafka.cfg.replies_topic,
                [OutRecord(r, cid.encode(), encode_reply(cid, out), []) for r, cid, out in replies],
                wait=False,
            )


def _check_landed(what: str, partition: int, expected: list[int], landed: Sequence[Any]) -> None:
    got = [(a.partition, a.offset) for a in landed]
    want = [(partition, o) for o in expected]
    if got != want:
        raise KafkaLogError(
            f"{what} records of partition {partition} landed at {got[:3]}… instead of {want[:3]}…: another writer "
            "appended to this partition (a previous owner still running?); the state is folded again"
        )
