"""A worker's own reads of the log (a worker has no file, so ``history`` and ``audit_log`` read its
partitions of the topics): one group-less consumer, one read at a time, each within a deadline;
``PartitionLogView`` shapes one partition as the engine's log, so the tools serve both modes with
one code. Offsets are the partition's: docs/kafka-operations.md, "History, audit and
point-in-time reads"."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import datetime

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError

from memstream.api.services.inputs import InputError
from memstream.projections.runner import FoldedModels
from memstream.streams.events import decode, parse_time
from memstream.streams.folding import bulk_fold
from memstream.streams.log.kafka import (
    DecodingOpener,
    KafkaConfig,
    Opener,
    fold_consumer,
    log_record,
    matching,
    opened,
    read_range,
)
from memstream.streams.log.port import LogRecord, LogUnavailable

READ_DEADLINE_S = 30.0  # one read (history, audit, an instant's offset), waiting for its turn included
FOLD_CHUNK = 5_000
SPARSE_BATCH = 500  # records fetched per seek when reading scattered offsets
PROBE_BATCH = 200  # records looked at per step of the search for an instant

Progress = Callable[[int, int], None]


def fold_records(
    models: FoldedModels,
    records: Sequence[ConsumerRecord[bytes, bytes]],
    opener: Opener | None,
    bound: int | None = None,
) -> int:
    """Fold fetched records of one partition into its models, in offset order, opening each
    sealed value; those the models hold already are skipped (a fetch that raced a fold of the
    same events by another path), and folding stops at ``bound`` (exclusive). How many applied."""
    # In offset order: the records past what the models hold, up to the bound.
    todo = [r for r in records if r.offset > models.offset and (bound is None or r.offset < bound)]
    if isinstance(opener, DecodingOpener):
        _fold_decoded(models, todo, opener)
        return len(todo)
    for rec in todo:
        rec = opened(rec, opener)
        models.apply(rec.offset, rec.value or b"", dict(rec.headers).get("vector"))
    return len(todo)


def _fold_decoded(
    models: FoldedModels, records: Sequence[ConsumerRecord[bytes, bytes]], opener: DecodingOpener
) -> None:
    """``fold_records`` of ``records`` (all to fold) with a ``DecodingOpener``."""
    if records:
        opener.fetch(records[0].partition, (r.value for r in records if r.value))
    for rec in records:
        if not rec.value:  # no event: fails in the fold as it always did
            models.apply(rec.offset, b"", None)
            continue
        vector = None
        for name, data in rec.headers:
            if name == "vector":
                vector = data
        models.apply_event(rec.offset, *opener.open_decoded(rec.partition, rec.value, vector))


async def fold_partitions(
    consumer: AIOKafkaConsumer,
    topic: str,
    models: Mapping[int, FoldedModels],
    bounds: Mapping[int, int],
    progress: Progress | None = None,
    *,
    offload: bool = False,
    opener: Opener | None = None,
) -> int:
    """Fold each partition of ``models`` (fresh read models) from offset 0 up to its bound
    (exclusive) with ``consumer``; returns how many events were applied. One consumer over
    every partition: the broker streams them all at once, and the fold (not the round trips)
    sets the pace. ``offload``: apply each fetched chunk on a worker thread, so a process that
    also serves calls (a worker answering ``as_of``) stays responsive during a long fold; the
    models are the fold's own, so nothing else touches them meanwhile. ``opener`` opens sealed
    events (streams/deciders/sealing.py)."""
    pending = {TopicPartition(topic, p) for p in models if bounds[p] > 0}
    total = sum(bounds[p] for p in models)
    done = 0
    loop = asyncio.get_running_loop()
    if pending:
        consumer.assign(sorted(pending, key=lambda tp: tp.partition))
        await consumer.seek_to_beginning(*pending)

    with bulk_fold(total):
        while pending:
            batch = await consumer.getmany(*pending, timeout_ms=1000, max_records=FOLD_CHUNK)
            for tp, records in batch.items():
                m, bound = models[tp.partition], bounds[tp.partition]
                if offload:
                    done += await loop.run_in_executor(None, fold_records, m, records, opener, bound)
                else:
                    done += fold_records(m, records, opener, bound)
                if m.offset >= bound - 1:
                    pending.discard(tp)
                    consumer.pause(tp)
            if progress is not None:
                progress(done, total)
    return done


class KafkaPartitionLog:
    """A worker's reader of its partitions of the events and audit topics (see module doc)."""

    def __init__(self, cfg: KafkaConfig, *, deadline_s: float = READ_DEADLINE_S, opener: Opener | None = None) -> None:
        self.cfg = cfg
        self.opener = opener
        self.deadline_s = deadline_s
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        if self._consumer is not None:
            return
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.cfg.bootstrap,
            client_id=f"{self.cfg.client_id}-reads",
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            request_timeout_ms=self.cfg.request_timeout_ms,
            fetch_max_wait_ms=10,  # reads re-assign and seek: never wait long on a stale fetch
        )
        await consumer.start()
        self._consumer = consumer

    async def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await consumer.stop()

    @contextlib.asynccontextmanager
    async def _turn(self, what: str) -> AsyncIterator[AIOKafkaConsumer]:
        """The consumer, for one read at a time, within the deadline (the wait included)."""
        try:
            async with asyncio.timeout(self.deadline_s), self._lock:
                if self._consumer is None:
                    raise LogUnavailable("the worker's log reader is not started")
                yield self._consumer
        except TimeoutError:
            raise LogUnavailable(f"{what}: no answer from Kafka within {self.deadline_s:.0f} s") from None
        except KafkaError as exc:
            raise LogUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc

    def _tp(self, partition: int, topic: str | None) -> TopicPartition:
        if not 0 <= partition < self.cfg.partitions:
            raise ValueError(f"partition {partition} is outside 0..{self.cfg.partitions - 1}")
        return TopicPartition(topic or self.cfg.events_topic, partition)

    async def end_offset(self, partition: int, *, topic: str | None = None) -> int:
        """The offset the partition's next record will get (its end now)."""
        tp = self._tp(partition, topic)
        async with self._turn(f"end of {tp.topic}[{partition}]") as consumer:
            return int((await consumer.end_offsets([tp]))[tp])

    async def read(
        self,
        partition: int,
        start: int = 0,
        stop: int | None = None,
        *,
        topic: str | None = None,
        agent_id: str | None = None,
        types: Sequence[str] | None = None,
        limit: int = 10_000,
        vectors: bool = True,
    ) -> list[LogRecord]:
        """Records of one partition, ``start <= offset < stop`` (stop: the end now), in offset
        order, at most ``limit`` of those matching the agent and types."""
        tp = self._tp(partition, topic)
        async with self._turn(f"reading {tp.topic}[{partition}] from {start}") as consumer:
            keep = matching(agent_id, types)
            records = await read_range(consumer, tp, start, stop, keep, limit, self.opener, vectors=vectors)
        return [log_record(rec, vectors=vectors) for rec in records]

    async def read_offsets(
        self, partition: int, offsets: Sequence[int], *, topic: str | None = None
    ) -> list[LogRecord]:
        """The records at ``offsets`` of one partition, in offset order (offsets past the end
        are left out). Scattered offsets cost a seek each; neighbours come in one fetch."""
        tp = self._tp(partition, topic)
        wanted = sorted(set(offsets))
        out: list[LogRecord] = []
        if not wanted:
            return out
        async with self._turn(f"reading {len(wanted)} offsets of {tp.topic}[{partition}]") as consumer:
            end = int((await consumer.end_offsets([tp]))[tp])
            wanted = [o for o in wanted if 0 <= o < end]
            consumer.assign([tp])
            i = 0
            while i < len(wanted):
                consumer.seek(tp, wanted[i])
                batch = await consumer.getmany(tp, timeout_ms=1000, max_records=SPARSE_BATCH)
                for rec in batch.get(tp, []):
                    while i < len(wanted) and wanted[i] < rec.offset:
                        i += 1  # not in the topic (a gap): nothing to show for it
                    if i == len(wanted):
                        break
                    if rec.offset == wanted[i]:
                        out.append(log_record(opened(rec, self.opener)))
                        i += 1
            consumer.pause(tp)
        return out

    async def first_after(self, partition: int, when: datetime, end: int) -> int:
        """The first offset below ``end`` whose event occurred after ``when`` (``end`` if none).

        Instants map to offsets by the events' own ``occurred_at`` (when the worker took the
        call that made the command; the ``at`` of ``history``), as in embedded mode, not by
        Kafka's record timestamps (set a little later, when the decider appends). A binary
        search: a partition is in time order, up to clock differences between the workers that
        took its calls. Each step fetches a few records and narrows by all of them."""
        tp = self._tp(partition, None)
        lo, hi = 0, end
        async with self._turn(f"finding {when.isoformat()} in {tp.topic}[{partition}]") as consumer:
            consumer.assign([tp])
            while lo < hi:
                consumer.seek(tp, (lo + hi) // 2)
                batch = await consumer.getmany(tp, timeout_ms=1000, max_records=PROBE_BATCH)
                for rec in batch.get(tp, []):
                    if rec.offset >= hi:
                        break
                    if parse_time(decode(opened(rec, self.opener, vectors=False).value or b"{}")["occurred_at"]) > when:
                        hi = rec.offset
                        break
                    lo = rec.offset + 1
            consumer.pause(tp)
        return lo

    async def fold(self, models: Mapping[int, FoldedModels], bounds: Mapping[int, int], *, deadline_s: float) -> int:
        """Fold fresh read models up to ``bounds`` with a consumer of the fold's own (a long
        fold does not hold up the worker's history and audit reads), within ``deadline_s``."""
        if not any(bounds[p] > 0 for p in models):
            return 0  # the state before the first event: nothing to read
        consumer = fold_consumer(self.cfg)
        try:
            async with asyncio.timeout(deadline_s):
                await consumer.start()
                topic = self.cfg.events_topic
                return await fold_partitions(consumer, topic, models, bounds, offload=True, opener=self.opener)
        except TimeoutError:
            raise LogUnavailable(f"replaying to the point asked for took longer than {deadline_s:.0f} s") from None
        except KafkaError as exc:
            raise LogUnavailable(f"replaying to the point asked for: {type(exc).__name__}: {exc}") from exc
        finally:
            with contextlib.suppress(Exception):
                await consumer.stop()

    def view(self, partition: int, models: FoldedModels) -> PartitionLogView:
        return PartitionLogView(self, partition, models)


class PartitionLogView:
    """One partition of the worker's log, shaped as the engine's log for the tools (module doc)."""

    def __init__(self, log: KafkaPartitionLog, partition: int, models: FoldedModels) -> None:
        self.log = log
        self.models = models
        self.partition = partition
        self.num_partitions = log.cfg.partitions

    def end_offset(self) -> int:
        """How far this partition's read models reach (seeds derived from it stay per partition)."""
        return self.models.offset + 1

    async def read(
        self,
        start: int = 0,
        stop: int | None = None,
        *,
        agent_id: str | None = None,
        limit: int = 10_000,
        vectors: bool = True,
        types: Sequence[str] | None = None,
    ) -> list[LogRecord]:
        return await self.log.read(
            self.partition, start, stop, agent_id=agent_id, types=types, limit=limit, vectors=vectors
        )

    async def read_offsets(self, offsets: Sequence[int]) -> list[LogRecord]:
        return await self.log.read_offsets(self.partition, offsets)

    async def read_audit(
        self,
        start: int = 0,
        stop: int | None = None,
        *,
        agent_id: str | None = None,
        kind: str | None = None,
        limit: int = 10_000,
    ) -> list[LogRecord]:
        """The partition's audit records (refused and skipped commands) of one agent. Without an
        agent the call has no partition (the audit trail of a Kafka deployment is spread over
        all of them), so it is refused rather than answered from one partition only."""
        if agent_id is None:
            raise InputError("audit_log needs agent_id in Kafka mode: the audit trail is partitioned by agent")
        return await self.log.read(
            self.partition,
            start,
            stop,
            topic=self.log.cfg.audit_topic,
            agent_id=agent_id,
            types=None if kind is None else [kind],
            limit=limit,
            vectors=False,
        )
