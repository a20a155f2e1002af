"""The decider on Kafka: per partition, the same decide-and-fold step as the embedded bus, as the
only writer of its partition of the events and audit topics, replying only once its appends
landed where it expected (else the worker stops). How, batch by batch, and why it is
exactly-once in effect: docs/kafka-operations.md, "How a decider decides"."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Union

from memstream.streams.commands import Command
from memstream.streams.deciders.codec import CodecError, decode_item, encode_reply
from memstream.streams.deciders.sealing import KafkaSealing
from memstream.streams.deciders.step import NewAudit, NewEvent, decide_and_fold
from memstream.streams.decision.limits import Limits
from memstream.streams.decision.state import DecisionState
from memstream.streams.events import AuditRecord, decode
from memstream.streams.log.kafka import Appended, DecodingOpener, KafkaLog, KafkaLogError, OutRecord
from memstream.streams.log.port import Committed, LogUnavailable
from memstream.streams.log.sealed_keys import KeyScopes, Named

log = logging.getLogger(__name__)

RESTORE_CHUNK = 20_000
LOCAL_BATCH_WAIT_S = 0.001  # how long local submissions gather before one round of acks

# Where a decision's outcome goes: a partition of the replies topic (a submitter elsewhere), or
# the future a local submitter awaits.
ReplyTo = Union[int, "asyncio.Future[Committed]"]
Item = tuple[Command | AuditRecord, ReplyTo | None]
# Told of each batch of events once it landed where the decider expected, before any reply.
AppendedHook = Callable[[int, Sequence[NewEvent]], Awaitable[None]]


class NotOwned(LookupError):
    """A local submission for a partition this worker does not (or no longer) own."""

    def __init__(self, partition: int) -> None:
        super().__init__(f"partition {partition} is not owned by this worker")
        self.partition = partition


@dataclass(frozen=True, slots=True)
class Incoming:
    """One record of the commands topic, as the consumer delivered it."""

    partition: int
    offset: int
    value: bytes
    headers: Any


async def fold_partition(kafka: KafkaLog, partition: int, keys: KeyScopes | None = None) -> DecisionState:
    """The decision state of one partition, folded from its events and audit records; ``keys``
    folds which key seals what from the same records as stored (no second read)."""
    cfg = kafka.cfg
    state = DecisionState(cfg.partitions)
    audits = []
    start = 0
    while True:
        chunk = await kafka.read_records(cfg.audit_topic, partition, start, limit=RESTORE_CHUNK, raw=True)
        for rec in chunk:
            after = int(dict(rec.headers).get("after_event", b"-1"))
            audits.append((rec.offset, after, rec.value or b""))
        if len(chunk) < RESTORE_CHUNK:
            break
        start = chunk[-1].offset + 1
    opener = kafka.opener
    decoding = opener if isinstance(opener, DecodingOpener) else None

    def open_value(value: bytes) -> dict[str, Any]:
        """A stored value as the state folds it: opened straight into its dict where the opener can."""
        if decoding is not None and value:
            return decoding.open_decoded(partition, value, None)[0]
        return decode(value if opener is None or not value else opener.open(partition, value, None)[0])

    i = 0
    start = 0
    while True:
        events = await kafka.read_records(
            cfg.events_topic, partition, start, limit=RESTORE_CHUNK, raw=True, vectors=False
        )
        if decoding is not None:  # this chunk's keys (and its audit records') at once
            upto = events[-1].offset if len(events) == RESTORE_CHUNK else None
            due = [a[2] for a in audits[i:] if upto is None or a[1] < upto]
            decoding.fetch(partition, [ev.value for ev in events if ev.value] + [v for v in due if v])
        for ev in events:
            while i < len(audits) and audits[i][1] < ev.offset:
                _fold_stored_audit(state, keys, audits[i], open_value)
                i += 1
            value = ev.value or b""
            if keys is not None:
                keys.event(ev.offset, dict(ev.headers).get("type", b"").decode(), value)
            state.apply_event(ev.offset, open_value(value))
        if len(events) < RESTORE_CHUNK:
            break
        start = events[-1].offset + 1
    for audit in audits[i:]:
        _fold_stored_audit(state, keys, audit, open_value)
    return state


def _fold_stored_audit(
    state: DecisionState,
    keys: KeyScopes | None,
    audit: tuple[int, int, bytes],
    open_value: Callable[[bytes], dict[str, Any]],
) -> None:
    offset, _, value = audit
    if keys is not None:
        keys.audit(value)
    state.apply_audit(offset, open_value(value))


class KafkaDecider:
    """Decides the commands of the partitions its worker holds (see the module docstring)."""

    def __init__(self, kafka: KafkaLog, limits: Limits | None = None, sealing: KafkaSealing | None = None) -> None:
        self.kafka = kafka
        # Seals what it appends (docs/erasure.md, "Kafka mode"); None only for component tests.
        # Its reads open through ``kafka.opener`` (the same store, set by whoever built both).
        self.sealing = sealing
        self.limits = limits or Limits()
        self.states: dict[int, DecisionState] = {}
        # Per partition, folded with its state: which key seals what, so an erasure names its
        # keys without reading the partition (streams/log/sealed_keys.py ``KeyScopes``).
        self.key_scopes: dict[int, KeyScopes] = {}
        self.decided = 0
        self.batches = 0
        self.busy_s = 0.0  # time spent deciding and queueing appends
        self._completing: asyncio.Task[None] | None = None  # the last batch's acks and replies
        self.failure: BaseException | None = None
        # Called once when an append fails: the worker must stop (see kafka_worker.create_app).
        self.on_failure: Callable[[BaseException], None] | None = None
        # The worker's read side, folding what was appended (see the module docstring).
        self.on_appended: AppendedHook | None = None
        self.owned: set[int] = set()  # partitions the group gave this worker, for submit_local
        self._lock = asyncio.Lock()  # one partition batch at a time, whichever path it came by
        self._local: dict[int, list[Item]] = {}
        self._local_flush: asyncio.Task[None] | None = None

    def forget(self, partitions: Iterable[int]) -> None:
        """Partitions assigned or revoked: their state is folded afresh at their next command."""
        for p in partitions:
            self._drop(p)

    def _drop(self, partition: int) -> None:
        """Forget a partition's state (and its key map, folded with it): folded afresh next time."""
        self.states.pop(partition, None)
        self.key_scopes.pop(partition, None)

    async def _fold(self, partition: int) -> DecisionState:
        """Fold a partition's state and key map from the topics (under ``_lock``)."""
        keys = KeyScopes(self.kafka.cfg.events_topic, self.kafka.cfg.audit_topic)
        state = await fold_partition(self.kafka, partition, keys)
        if self.sealing is not None:
            through, _ = await asyncio.to_thread(self.sealing.store.for_partition(partition).erased_through)
            keys.completed(through)
        self.states[partition], self.key_scopes[partition] = state, keys
        return state

    async def named_by(self, partition: int, offset: int) -> Named | None:
        """What the erasure at ``offset`` of an owned partition names (its keys, its clear
        records), from the partition's key map, folded now if the decider has none yet; None
        when the partition is not owned or no such erasure is pending in the map."""
        keys = self.key_scopes.get(partition)
        if keys is None:
            if await self.state_of(partition) is None:
                return None
            keys = self.key_scopes.get(partition)
        return None if keys is None else keys.named(offset)

    def decided_model(self, partition: int, agent_id: str) -> tuple[bool, str | None]:
        """(known, model): the model of an agent's vectors as decided, from the partition's
        decision state when it is folded here (never waiting: not known otherwise). It is at
        least as new as any read model, and a write embedded with another model is refused."""
        state = self.states.get(partition) if self.owns(partition) else None
        if state is None:
            return False, None
        agent = state.agents.get(agent_id)
        return True, None if agent is None else agent.model

    def erasure_completed(self, partition: int, offset: int) -> None:
        """The erasure at ``offset`` was completed: its key ids are not kept any more."""
        keys = self.key_scopes.get(partition)
        if keys is not None:
            keys.completed_one(offset)

    def owns(self, partition: int) -> bool:
        return self.failure is None and partition in self.owned

    async def state_of(self, partition: int) -> DecisionState | None:
        """The decision state of an owned partition (None if not owned), folded now when the
        decider has none yet: after an assignment it folds a partition at its first command,
        and a reader that asks what was decided (an import's dry run: was this command id
        decided already?) must not be told "nothing" meanwhile."""
        async with self._lock:
            if not self.owns(partition):
                return None
            if not self.kafka.started:
                await self.kafka.start()
            state = self.states.get(partition)
            if state is None:
                state = await self._fold(partition)
            return state

    async def submit_local(self, partition: int, item: Command | AuditRecord) -> Committed:
        """Decide a command of an owned partition in-process (see the module docstring).

        Submissions arriving together are decided as one batch, so concurrent writers share one
        round of acknowledgements as they do on the topic path."""
        if self.failure is not None:
            raise LogUnavailable(f"this worker's decider stopped after a failed append: {self.failure}")
        if partition not in self.owned:
            raise NotOwned(partition)
        fut: asyncio.Future[Committed] = asyncio.get_running_loop().create_future()
        self._local.setdefault(partition, []).append((item, fut))
        if self._local_flush is None or self._local_flush.done():
            self._local_flush = asyncio.create_task(self._flush_local(), name="memstream-decide-local")
        return await fut

    async def _flush_local(self) -> None:
        await asyncio.sleep(LOCAL_BATCH_WAIT_S)
        while self._local:
            pending, self._local = self._local, {}
            started = time.perf_counter()
            for partition, items in sorted(pending.items()):
                try:
                    await self._decide_partition(partition, items)
                except BaseException as exc:
                    for _, fut in items:
                        if isinstance(fut, asyncio.Future) and not fut.done():
                            fut.set_exception(LogUnavailable(f"the decision failed: {type(exc).__name__}: {exc}"))
                    if not isinstance(exc, Exception):
                        raise
            self.batches += 1
            self.busy_s += time.perf_counter() - started

    async def handle(self, batch: Sequence[Incoming]) -> None:
        if self.failure is not None:
            raise self.failure  # stops the agent, and with it the worker (see _complete)
        started = time.perf_counter()
        by_partition: dict[int, list[Incoming]] = {}
        for msg in batch:
            by_partition.setdefault(msg.partition, []).append(msg)
        for partition, msgs in sorted(by_partition.items()):
            await self._handle_partition(partition, msgs)
        self.batches += 1
        self.busy_s += time.perf_counter() - started

    async def _handle_partition(self, partition: int, msgs: list[Incoming]) -> None:
        items: list[Item] = []
        for msg in msgs:
            try:
                items.append(decode_item(msg.value, msg.headers))
            except CodecError as exc:
                # Written by a newer or broken producer: skipping it is the only way forward,
                # and it never became an event; say so loudly.
                log.error("commands partition %d offset %d skipped: %s", partition, msg.offset, exc)
        await self._decide_partition(partition, items)

    async def _decide_partition(self, partition: int, items: list[Item]) -> None:
        async with self._lock:
            if partition not in self.owned:
                # Moved away while these waited: local submitters send them by the topic instead.
                local = [r for _, r in items if isinstance(r, asyncio.Future)]
                for fut in local:
                    if not fut.done():
                        fut.set_exception(NotOwned(partition))
                items = [(i, r) for i, r in items if not isinstance(r, asyncio.Future)]
                if not items:
                    return
            await self._decide_locked(partition, items)

    async def _decide_locked(self, partition: int, items: list[Item]) -> None:
        if self.failure is not None:
            raise self.failure
        if not self.kafka.started:
            await self.kafka.start()  # the worker's first decision: connect its producer and reader
        state = self.states.get(partition)
        if state is None:
            state = await self._fold(partition)
        events: list[NewEvent] = []
        audits: list[NewAudit] = []
        replies: list[tuple[ReplyTo, str, Committed]] = []
        try:
            for item, reply_to in items:
                try:
                    committed = decide_and_fold(state, item, self.limits, events, audits)
                except Exception as exc:  # a bug in one decider must not sink the batch
                    log.exception("decider failed on %s", type(item).__name__)
                    if isinstance(reply_to, asyncio.Future) and not reply_to.done():
                        reply_to.set_exception(LogUnavailable(f"the decider failed: {type(exc).__name__}"))
                    continue
                if reply_to is not None:
                    replies.append((reply_to, item.command_id, committed))
            pending = await self._enqueue(partition, events, audits)
        except BaseException as exc:
            self._drop(partition)  # folded ahead of the log
            if isinstance(exc, Exception):
                # Queueing failed part-way (the producer's buffer stayed full past its timeout
                # while the broker was away): what was queued may still land, so a state
                # folded again from the log now could decide at offsets those records take.
                self._fail(partition, exc)
            raise
        self.decided += len(items)
        # The next batch is decided while this one's acknowledgements are in flight; replies
        # go out only once they arrived, in batch order (each completion waits for the last).
        previous = self._completing
        self._completing = asyncio.create_task(self._complete(previous, partition, events, audits, pending, replies))

    async def _enqueue(
        self, partition: int, events: list[NewEvent], audits: list[NewAudit]
    ) -> list[asyncio.Future[Any]]:
        """Queue the events and audit records in the producer (order kept per partition),
        sealed when the decider seals, and fold them as stored into the partition's key map."""
        cfg = self.kafka.cfg
        stored = [(e.value, e.vector) for e in events] if self.sealing is None else self.sealing.seal_events(events)
        audit_values = [a.value for a in audits] if self.sealing is None else self.sealing.seal_audits(audits)
        keys = self.key_scopes.get(partition)
        if keys is not None:
            keys.fold(
                ((e.offset, e.type, value) for e, (value, _) in zip(events, stored, strict=True)),
                ((a.after_event, value) for a, value in zip(audits, audit_values, strict=True)),
            )
        event_records = [
            OutRecord(
                e.partition,
                e.agent.encode("utf-8", "surrogatepass"),
                value,
                [("type", e.type.encode())] + ([("vector", vector)] if vector is not None else []),
            )
            for e, (value, vector) in zip(events, stored, strict=True)
        ]
        audit_records = [
            OutRecord(
                a.partition,
                a.agent.encode("utf-8", "surrogatepass"),
                value,
                [("type", a.kind.encode()), ("after_event", str(a.after_event).encode())],
            )
            for a, value in zip(audits, audit_values, strict=True)
        ]
        futures = await self.kafka.enqueue(cfg.events_topic, event_records) if events else []
        futures += await self.kafka.enqueue(cfg.audit_topic, audit_records) if audits else []
        return futures

    def _fail(self, partition: int, exc: BaseException) -> None:
        """An append failed or may land where this decider no longer expects it: no decision
        may build on its states any more. The first failure stops the worker."""
        if self.failure is None:
            self.failure = exc
            log.critical("append failed on partition %d; the worker stops: %s", partition, exc)
            if self.on_failure is not None:
                self.on_failure(exc)

    async def _complete(
        self,
        previous: asyncio.Task[None] | None,
        partition: int,
        events: list[NewEvent],
        audits: list[NewAudit],
        pending: list[asyncio.Future[Any]],
        replies: list[tuple[ReplyTo, str, Committed]],
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
            self._drop(partition)
            for r, _, _ in replies:
                if isinstance(r, asyncio.Future) and not r.done():
                    r.set_exception(LogUnavailable(f"the append failed: {type(exc).__name__}: {exc}"))
            self._fail(partition, exc)
            raise
        if self.on_appended is not None and events:
            try:
                await self.on_appended(partition, events)
            except Exception:  # the events are in the log: the read side recovers them from there
                log.exception("partition %d: folding appended events failed", partition)
        remote = []
        for r, cid, out in replies:
            if isinstance(r, asyncio.Future):
                if not r.done():
                    r.set_result(out)
            else:
                remote.append(OutRecord(r, cid.encode(), encode_reply(cid, out), []))
        if remote:
            # Not waited for: a lost reply is a submitter's timeout, repaired by its retry with
            # the same command id (answered from the folded state), exactly as after a crash.
            await self.kafka.send(self.kafka.cfg.replies_topic, remote, wait=False)


def _check_landed(what: str, partition: int, expected: list[int], landed: Sequence[Any]) -> None:
    got = [(a.partition, a.offset) for a in landed]
    want = [(partition, o) for o in expected]
    if got != want:
        raise KafkaLogError(
            f"{what} records of partition {partition} landed at {got[:3]}… instead of {want[:3]}…: another writer "
            "appended to this partition (a previous owner still running?); the state is folded again"
        )
