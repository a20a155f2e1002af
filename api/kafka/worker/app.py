"""A Kafka worker (``memstream worker``): the decider (a faust agent: streams/deciders/faust_app.py)
and the read side of the partitions it owns, whose read models the agent folds as it appends,
answering every tool call for their agents with the embedded server's tool code
(``PartitionEngine``, worker/engine.py). How it folds, recovers, checkpoints and reads the topics:
docs/kafka-operations.md."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections import Counter
from collections.abc import Generator, Sequence
from typing import Any, TypeVar

import orjson
import uvicorn
from aiokafka import AIOKafkaConsumer, TopicPartition
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from memstream.api import tools as _tools  # noqa: F401  (registers every tool)
from memstream.api.faces.http import caller_of, json_response, tool_response
from memstream.api.kafka.wire import PARTITION_HEADER, TRANSFER_TOOLS, route_partition
from memstream.api.kafka.worker import checkpoint_sweep, checkpoints, erasure
from memstream.api.kafka.worker.append_fold import plan_feed
from memstream.api.kafka.worker.checkpoints import checkpoint_dir
from memstream.api.kafka.worker.engine import PartitionEngine
from memstream.api.kafka.worker.guard import guard_worker, owner_route
from memstream.api.kafka.worker.models import CATCH_UP_DEADLINE_S, PartitionModels
from memstream.api.kafka.worker.partition_log import KafkaPartitionLog
from memstream.api.kafka.worker.point_in_time import KafkaPointInTime
from memstream.api.kafka.worker.tail import fold_fetched
from memstream.api.kafka.worker.transfer_parts import transfer_routes
from memstream.api.services.embedders import Embedders
from memstream.api.services.embedding import Embedder
from memstream.api.services.owners import owner_or_history
from memstream.api.services.settings import Settings
from memstream.api.tools.dispatch import failure, parse_arguments, run_tool
from memstream.api.tools.registry import REGISTRY, Caller
from memstream.projections.runner import digest_of
from memstream.streams.buses.kafka import KafkaCommandBus
from memstream.streams.commands import Command
from memstream.streams.deciders.kafka import KafkaDecider, NotOwned
from memstream.streams.deciders.sealing import KafkaSealing
from memstream.streams.deciders.step import NewEvent
from memstream.streams.decision.limits import Limits
from memstream.streams.events import AuditRecord, decode
from memstream.streams.folding import collector_paused, freeze_long_lived
from memstream.streams.keys.kafka import kafka_master_key
from memstream.streams.log.kafka import KafkaConfig, KafkaLog, OutRecord, ensure_topics
from memstream.streams.log.port import Committed, partition_for
from memstream.streams.log.sealed_keys import Named
from memstream.streams.log.sealing import ERASURE_TYPES
from memstream.streams.release import short_switches
from memstream.streams.snapshots import SnapshotStore

log = logging.getLogger(__name__)

T = TypeVar("T")

# Tools a worker does not answer, because the router answers them itself and never forwards
# them: the deployment's health, and the file transfers (export, import and merge use the
# router's files and span partitions; the router asks the workers for their parts over the
# routes of api/kafka/worker/transfer_parts.py). Asked directly, a worker says so rather than
# answer for its own partitions only.
ROUTER_TOOLS = frozenset({"check_health"}) | TRANSFER_TOOLS
PENDING_DEADLINE_S = 3600.0  # how long completing a previous owner's erasures waits for the fold


def fold_new(models: PartitionModels, events: Sequence[NewEvent]) -> None:
    """Fold events the decider just appended into the partition's read models, in order."""
    for e in events:
        models.apply(e.offset, e.value, e.vector)


class Worker:
    def __init__(
        self,
        cfg: KafkaConfig,
        settings: Settings,
        *,
        url: str,
        embedder: Embedder | None = None,
        embedders: dict[str, Embedder] | None = None,
        sealing: KafkaSealing | None = None,
    ) -> None:
        self.cfg = cfg
        self.settings = settings
        self.url = url
        self.worker_id = uuid.uuid4().hex[:12]
        self.embedders = Embedders(settings, embedder, embedders)
        # The process's key store (docs/erasure.md, "Kafka mode"): every read of the topics opens
        # through it, the decider seals with it. None only in component tests on clear topics.
        self.sealing = sealing
        self.bus = KafkaCommandBus(cfg, instance_id=f"worker-{self.worker_id}")
        self.announcer = KafkaLog(cfg, sealing)
        self.partition_log = KafkaPartitionLog(cfg, opener=sealing)  # history and audit reads, as_of replays
        self.point_in_time = KafkaPointInTime(self.partition_log, settings, self.embedders)
        self.models: dict[int, PartitionModels] = {}
        # Revoked partitions' models until the rebalance's assignment: taken back (and kept at
        # their offset) when they stay here, dropped otherwise. Never served meanwhile.
        self.parked: dict[int, PartitionModels] = {}
        self.checkpoint_every = settings.kafka_checkpoint_every  # events; 0: no checkpoints
        self.acked: dict[int, int] = {}  # partition -> highest event offset this worker had acknowledged
        self.generation = 0
        self.decider: KafkaDecider | None = None  # the worker's, set by run_worker
        self._consumer: AIOKafkaConsumer | None = None
        self._tail: asyncio.Task[None] | None = None
        self._started = False
        self._wake = asyncio.Event()
        self._checkpoints: set[asyncio.Task[None]] = set()
        # partition -> the models whose previous owner's pending erasures are being completed, and the task
        self._pending: dict[int, tuple[PartitionModels, asyncio.Task[None]]] = {}
        self.fed: set[int] = set()  # partitions the decider's agent feeds; paused in the tail
        # Checkpoints of partitions not held here, deleted after an erasure (worker/checkpoint_sweep.py):
        # the partitions whose checkpoint is being restored, captured or written (never deleted meanwhile),
        # and those being deleted (a checkpoint or a restore of one waits for ``_sweep_lock``).
        self._in_use: Counter[int] = Counter()
        self._deleting: set[int] = set()
        self._sweep_lock = asyncio.Lock()
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        await self.bus.start()
        await self.announcer.start()
        await self.partition_log.start()
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.cfg.bootstrap,
            client_id=f"memstream-worker-{self.worker_id}",
            group_id=None,
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
            # As a replay's reader (``fold_consumer``): a partition gained catches up in fetches
            # of thousands of events, not of the default 1 MiB.
            max_partition_fetch_bytes=8 * 1024 * 1024,
        )
        await self._consumer.start()
        self._tail = asyncio.create_task(self._run_tail(), name="memstream-worker-tail")
        if self.sealing is not None:
            self._sweeper = asyncio.create_task(self._run_sweeps(), name="memstream-checkpoint-sweep")

    async def close(self) -> None:
        for task in (self._tail, self._sweeper):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await self._consumer.stop()
        await self.bus.close()
        await self.announcer.close()
        await self.partition_log.close()
        self.embedders.close()

    async def submit(self, item: Command | AuditRecord) -> Committed:
        """Decide a write (or record a refusal): in-process when this worker owns the agent's
        partition (``KafkaDecider.submit_local``), else through the commands topic."""
        partition = partition_for(item.scope.agent_id, self.cfg.partitions)
        if self.decider is not None and self.decider.owns(partition):
            try:
                committed: Committed = await self.decider.submit_local(partition, item)
                return committed
            except NotOwned:
                pass  # the partition moved while the write waited: its new owner decides it
        if isinstance(item, AuditRecord):
            return await self.bus.record_refusal(item)
        return await self.bus.submit(item)

    # -- following the group's assignment ---------------------------------------------------

    async def assigned(self, partitions: set[int]) -> None:
        """The worker's full assignment after a rebalance: keep what stays (the models of a
        revoked partition assigned again, at their offset: the topic is append-only, so they
        are a prefix of it and the tail folds the rest), fold what is new."""
        await self.start()
        assert self._consumer is not None
        self.generation += 1
        for p in set(self.models) - partitions:
            del self.models[p]
        kept = sorted(set(self.parked) & partitions - set(self.models))
        for p in kept:
            self.models[p] = self.parked[p]
        self.parked.clear()
        new = sorted(partitions - set(self.models))
        taken = sorted({*kept, *new})
        if taken:
            tps = [TopicPartition(self.cfg.events_topic, p) for p in taken]
            ends = await self._consumer.end_offsets(tps)
            for tp in tps:
                end = int(ends[tp])
                if tp.partition in kept:  # another owner may have appended in between: reads wait for it
                    self.models[tp.partition].target = max(self.models[tp.partition].target, end - 1)
                else:
                    self._in_use[tp.partition] += 1  # a sweep deciding meanwhile leaves its checkpoint
                    try:
                        await self._not_deleting(tp.partition)
                        self.models[tp.partition] = await self._open_models(tp.partition, end)
                    finally:
                        self._in_use -= Counter({tp.partition: 1})
                store = self.models[tp.partition].store
                if store is not None:  # this worker is the directory's holder of it now
                    await asyncio.to_thread(checkpoint_sweep.hold, store, self.worker_id)
                # Also for a partition kept: another owner may have left erasures pending in between.
                self._start_pending(self.models[tp.partition])
        if kept:
            log.info("partitions %s: read models kept across the rebalance", kept)
        owned = [TopicPartition(self.cfg.events_topic, p) for p in sorted(self.models)]
        self._consumer.assign(owned)  # resumes every partition: the agent pauses them again
        self.fed.clear()
        for tp in owned:
            self._consumer.seek(tp, self.models[tp.partition].offset + 1)
        self._wake.set()
        await self._announce(sorted(partitions))

    async def _open_models(self, partition: int, end: int) -> PartitionModels:
        """Fresh read models for a partition just gained, loaded from its checkpoint when one
        provably belongs to this topic (see api/kafka/worker/checkpoints.py); the tail folds the rest."""
        if self.checkpoint_every <= 0:
            return PartitionModels(partition, end, None, self.settings.read_model_options)
        store = SnapshotStore(checkpoint_dir(self.settings.data_dir, self.cfg, partition))
        models = PartitionModels(partition, end, store, self.settings.read_model_options)
        meta = await asyncio.to_thread(checkpoints.marker, store)
        if meta is None:
            return models
        offset = int(meta["offset"])
        if offset >= end or await self._anchor(partition, offset) != meta.get("anchor"):
            log.warning("partition %d: the checkpoint at offset %d is not of this topic; folding from 0", partition,
                        offset)  # fmt: skip
            return models
        if not await asyncio.to_thread(checkpoints.restore, store, models.projections, offset):
            return PartitionModels(partition, end, store, self.settings.read_model_options)
        models.offset = models.restored_from = models.checkpoint_offset = offset
        # The restored snapshots name the sidecars to keep: a worker stopped between a
        # checkpoint's write and its cleanup left older ones, which only the next checkpoint drops.
        await asyncio.to_thread(checkpoints.drop_stale, models.projections)
        log.info("partition %d: read models restored at offset %d (end %d)", partition, offset, end)
        freeze_long_lived()  # as the embedded engine after its start-up (projections/runner.py)
        return models

    async def _anchor(self, partition: int, offset: int) -> str | None:
        # As stored: an erasure later redacts what the event opens to, not its sealed bytes.
        records = await self.announcer.read_records(
            self.cfg.events_topic, partition, offset, offset + 1, limit=1, raw=True
        )
        if not records or records[0].offset != offset:
            return None
        return checkpoints.anchor_of(records[0].value or b"")

    async def checkpoint(self, models: PartitionModels) -> None:
        """Write a checkpoint of one partition's read models. Their state is captured under the
        partition's lock (on a thread, so other partitions keep folding and answering); the
        files are written after it is released."""
        if models.store is None or models.checkpointing:
            return
        models.checkpointing = True
        models.checkpoint_done.clear()
        written = False
        self._in_use[models.partition] += 1  # before any await: a sweep deciding now skips it
        try:
            await self._not_deleting(models.partition)
            async with models.lock:
                offset = models.offset
                if offset < 0 or offset == models.checkpoint_offset:
                    return
                bodies = await asyncio.to_thread(checkpoints.capture, models.projections)
                models.since_checkpoint = 0
            anchor = await self._anchor(models.partition, offset)
            if anchor is None:
                raise LookupError(f"event {offset} is not in the topic")
            if self.models.get(models.partition) is not models:
                # Revoked meanwhile: its next owner may be restoring from, or writing, the same
                # directory (a shared data directory), and a checkpoint here could delete its sidecars.
                log.info("partition %d: checkpoint at %d not written (the partition moved)", models.partition, offset)
                return
            await asyncio.to_thread(checkpoints.write, models.store, bodies, offset, anchor)
            models.checkpoint_offset = offset
            await asyncio.to_thread(checkpoints.drop_stale, models.projections)
            written = True
        except Exception as exc:  # a checkpoint is a shortcut: without one a restart folds more
            log.warning("partition %d: checkpoint failed (%s); will retry later", models.partition, exc)
        finally:
            self._in_use -= Counter({models.partition: 1})
            models.checkpointing = False
            models.checkpoint_done.set()
            models.checkpoint_done.clear()
        if written and self.models.get(models.partition) is models:
            # Events folded while this one was written trigger none (one at a time): after a
            # catch-up, the checkpoint would stay far behind until the partition's next write.
            self._checkpoint_if_due(models)

    async def rewrite_checkpoint(self, models: PartitionModels) -> None:
        """Write the partition's checkpoint now from its read models (after an erasure folded:
        the new one replaces every snapshot that held the erased record), once a checkpoint
        being written meanwhile (captured before the erasure, maybe) is done."""
        if models.store is None:
            return
        while models.checkpointing:
            await models.checkpoint_done.wait()
        models.checkpoint_offset = None  # due, even at the offset of the last one
        await self.checkpoint(models)
        if models.checkpoint_offset is None:  # not written: no older one may keep the record
            await asyncio.to_thread(checkpoints.remove, models.store)
            if self.models.get(models.partition) is models:  # still the directory's holder
                await asyncio.to_thread(checkpoint_sweep.hold, models.store, self.worker_id)
            log.warning("partition %d: checkpoint removed after an erasure (rewriting it failed)", models.partition)

    async def settle(self, models: PartitionModels, offset: int, deadline_s: float = CATCH_UP_DEADLINE_S) -> None:
        """Wait until the partition's read models include ``offset``."""
        p = models.partition
        self.acked[p] = max(self.acked.get(p, -1), offset)
        await models.caught_up(offset, deadline_s)

    async def erase(self, models: PartitionModels, committed: Committed, command: Command) -> dict[str, Any]:
        """Complete an erasure the decider appended (api/kafka/worker/erasure.py)."""
        offset = committed.offset
        if offset is None:  # a retried command id: completed again
            offset = await erasure.erasure_offset(
                self.announcer, models.partition, command.scope.agent_id, command.command_id
            )
        if offset is None:
            raise LookupError(f"the erasure of command {command.command_id} is not in the events topic")
        return await erasure.complete(self, models, offset, lambda o: self.settle(models, o))

    async def named_by(self, partition: int, offset: int) -> Named | None:
        """What the erasure at ``offset`` names, from the decider's key map of the partition
        (None without a decider, or when the partition moved: the erasure then reads the records)."""
        return None if self.decider is None else await self.decider.named_by(partition, offset)

    def erasure_completed(self, partition: int, offset: int) -> None:
        if self.decider is not None:
            self.decider.erasure_completed(partition, offset)

    def _start_pending(self, models: PartitionModels) -> None:
        """Complete a previous owner's pending erasures in the background, unless this worker is
        still doing so for the same models (taken back in a rebalance before it finished)."""
        running = self._pending.get(models.partition)
        if running is not None and running[0] is models and not running[1].done():
            return
        # Noted from here (no await in between): the erasures folded past ``held`` are met by
        # the fold, not read again (``erasure.complete_pending``).
        models.erasures_folded = []
        task = asyncio.create_task(self._complete_pending(models, models.offset))
        self._pending[models.partition] = (models, task)
        self._checkpoints.add(task)  # held until done, like a checkpoint's task
        task.add_done_callback(self._checkpoints.discard)

    async def _complete_pending(self, models: PartitionModels, held: int) -> None:
        try:
            # In the background: the models of a partition just taken may need long to fold from 0.
            settle = lambda o: self.settle(models, o, PENDING_DEADLINE_S)  # noqa: E731
            done = await erasure.complete_pending(self, models, settle, held)
            if done:
                log.warning("partition %d: completed %d erasure(s) a previous owner left pending", models.partition,
                            done)  # fmt: skip
        except Exception:  # retried at the partition's next assignment
            log.exception("partition %d: completing pending erasures failed", models.partition)
        finally:
            models.erasures_folded = None

    async def revoked(self, partitions: set[int]) -> None:
        """Park the revoked partitions' models: not served, until the assignment that follows
        says which stay here (faust rebalances eagerly: every partition is revoked each time)."""
        for p in partitions:
            models = self.models.pop(p, None)
            if models is not None:
                self.parked[p] = models
            self.fed.discard(p)

    # -- checkpoints of partitions not held (api/kafka/worker/checkpoint_sweep.py) -----------------

    async def _not_deleting(self, partition: int) -> None:
        """Wait while a sweep deletes the partition's checkpoint files."""
        if partition in self._deleting:
            async with self._sweep_lock:
                pass

    async def _run_sweeps(self) -> None:
        """Every ``SWEEP_EVERY_S``: when the key store saw a destruction or a partition's
        erasure completed since the last sweep (and at start), delete the checkpoints of
        partitions not held here that ``checkpoint_sweep.to_delete`` names."""
        assert self.sealing is not None
        keys = self.sealing.store
        seen: tuple[int, list[int]] | None = None
        destroyed = False
        while True:
            now = (keys.generation(), [keys.erased_through_of(p)[1] for p in range(self.cfg.partitions)])
            if seen is not None and now[0] != seen[0]:
                destroyed = True
            if now != seen or destroyed:
                try:
                    destroyed = await self.sweep(destroyed, dict(enumerate(now[1])))
                    seen = now
                except Exception:  # retried at the next tick
                    log.exception("deleting checkpoints of partitions not held here failed")
            await asyncio.sleep(checkpoint_sweep.SWEEP_EVERY_S)

    async def sweep(self, destroyed: bool, erased_last: dict[int, int]) -> bool:
        """One sweep; True when a destruction is still to be applied (a checkpoint this worker
        no longer holds was being written: deleted at the next sweep, after the write)."""
        root = checkpoint_sweep.topic_root(self.settings.data_dir, self.cfg.events_topic)
        on_disk = await asyncio.to_thread(checkpoint_sweep.scan, root)
        held = set(self.models) if self.checkpoint_every > 0 else set()
        # Parked (revoked, the rebalance's assignment not here yet): models kept across the
        # rebalance go on naming their sidecars, so their files are decided after it.
        busy = {p for p, n in self._in_use.items() if n > 0} | set(self.parked)
        doomed = checkpoint_sweep.to_delete(on_disk.values(), held, busy, self.worker_id, erased_last, destroyed)
        if doomed:
            self._deleting = set(doomed)  # decided and marked with no await between
            try:
                async with self._sweep_lock:
                    await asyncio.to_thread(checkpoint_sweep.delete, root, doomed)
            finally:
                self._deleting = set()
        return destroyed and bool(set(on_disk) & busy - held)

    # -- fold-on-append (api/kafka/worker/append_fold.py) -------------------------------------------

    async def appended(self, partition: int, events: Sequence[NewEvent]) -> None:
        """The decider's agent appended ``events`` to ``partition`` (acknowledged, landed where
        it expected): fold them into the partition's read models now, before it replies, when
        they continue the models; otherwise leave them to the tail, which reads the topic."""
        models = self.models.get(partition)
        if models is None or self._consumer is None:
            return  # not (yet) this worker's: the tail folds it once the assignment reaches here
        if models.lock.locked():
            self._tail_takes(models)  # a checkpoint is capturing the models: do not hold the agent
            return
        plan = plan_feed(models.offset, [e.offset for e in events])
        if plan.count:
            todo = events[plan.start : plan.stop]
            if any(e.type in ERASURE_TYPES for e in todo):
                # An erasure drops every row it names (seconds for a large agent): folded on a
                # thread, in a task holding the partition's lock from now (this partition's reads
                # wait for it, as for any fold; its next appends go to the tail, behind the lock),
                # so the decider's replies to every other write go out meanwhile. The erase's own
                # caller waits for the models to include it (``settle``).
                await models.lock.acquire()
                task = asyncio.create_task(self._fold_erasure(models, todo, plan.count))
                self._checkpoints.add(task)  # held until done, like a checkpoint's task
                task.add_done_callback(self._checkpoints.discard)
            else:
                async with models.lock:
                    try:
                        fold_new(models, todo)
                    except Exception:
                        self._tail_takes(models)  # the topic holds these events: retry them from there
                        raise
                models.folded_by_agent += plan.count
                self._folded(models, plan.count)
        if plan.gap:
            self._tail_takes(models)
        elif partition not in self.fed:
            # The models hold everything up to the agent's last append, and the agent is the
            # partition's only writer: the tail has nothing left to read there.
            self._consumer.pause(TopicPartition(self.cfg.events_topic, partition))
            self.fed.add(partition)

    async def _fold_erasure(self, models: PartitionModels, todo: Sequence[NewEvent], count: int) -> None:
        """Fold a batch holding an erasure on a thread; ``models.lock`` is held by the caller
        and released here. As the embedded erasure's steps (api/services/erasure.py): the
        cyclic collector paused (its passes over every object a worker folded since start-up
        hold the interpreter lock) and the lock handed over every millisecond."""
        try:
            with collector_paused(), short_switches():
                await asyncio.to_thread(fold_new, models, todo)
        except Exception:
            log.exception("partition %d: folding an erasure failed; the tail folds it again", models.partition)
            self._tail_takes(models)  # the topic holds these events: retry them from there
            return
        finally:
            models.lock.release()
        models.folded_by_agent += count
        self._folded(models, count)

    def _tail_takes(self, models: PartitionModels) -> None:
        """Hand a partition back to the tail, from the models' next offset."""
        if models.partition in self.fed and self._consumer is not None:
            tp = TopicPartition(self.cfg.events_topic, models.partition)
            self._consumer.resume(tp)
            self._consumer.seek(tp, models.offset + 1)
            self.fed.discard(models.partition)

    def _folded(self, models: PartitionModels, count: int) -> None:
        """After ``count`` events were folded: wake waiting reads, checkpoint when due."""
        models.since_checkpoint += count
        models.advanced.set()
        self._checkpoint_if_due(models)

    def _checkpoint_if_due(self, models: PartitionModels) -> None:
        due = models.store is not None and models.since_checkpoint >= self.checkpoint_every
        if due and not models.checkpointing:
            task = asyncio.create_task(self.checkpoint(models), name=f"memstream-checkpoint-{models.partition}")
            self._checkpoints.add(task)
            task.add_done_callback(self._checkpoints.discard)

    async def _announce(self, partitions: list[int]) -> None:
        value = {"node": self.worker_id, "url": self.url, "generation": self.generation, "at": time.time()}
        records = [OutRecord(p, str(p).encode(), orjson.dumps({**value, "partition": p}), []) for p in partitions]
        if records:
            await self.announcer.send(self.cfg.owners_topic, records)

    async def _run_tail(self) -> None:
        assert self._consumer is not None
        while True:
            if not self.models:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                batch = await self._consumer.getmany(timeout_ms=200, max_records=5000)
            except Exception as exc:  # an assignment changing under the fetch: try again
                log.debug("events tail: %s", exc)
                await asyncio.sleep(0.05)
                continue
            generation = self.generation
            for tp, records in batch.items():
                models = self.models.get(tp.partition)
                if models is None:
                    continue
                async with models.lock:
                    if self.generation != generation:
                        # An assignment came while an earlier partition of this fetch folded: it
                        # seeked every partition afresh, and the rest of the fetch may not
                        # continue the models it opened (a checkpoint restored further back).
                        break
                    catching_up = models.offset < models.target  # to the end at the assignment
                    count = await fold_fetched(
                        models, records, self.sealing, models.tail_sliced, collect=not catching_up
                    )  # worker/tail.py
                models.folded_by_tail += count
                self._folded(models, count)

    # -- answering calls --------------------------------------------------------------------

    def engine_for_call(self, args: Any, partition: int | None = None) -> PartitionEngine | None:
        """The engine of the partition a call belongs to (see ``route_partition``; a call that
        names no agent may name its partition instead: ``PARTITION_HEADER``), if owned."""
        named_agent = isinstance(args, dict) and bool(args.get("agent_id"))
        p = partition if partition is not None and not named_agent else route_partition(args, self.cfg.partitions)
        models = self.models.get(p)
        return PartitionEngine(self, models) if models is not None else None

    async def owner_in_partition(self, kind: str, ident: int) -> tuple[bool, str | None]:
        """(whether this worker holds the record's partition, the agent owning the record or None).
        Read from the partition's read models once they include every write acknowledged, as any
        read; a deleted record's owner is named by the first event of its history."""
        engine = self.engine_for_call({"ref": f"{kind}:{ident}"})
        if engine is None:
            return False, None
        found = await engine.read(lambda: owner_or_history(engine, kind, ident))
        if isinstance(found, str):
            return True, found
        if not found:
            return True, None
        records = await self.announcer.read(engine.models.partition, found[0], found[0] + 1, vectors=False)
        return True, (str(decode(records[0].value)["scope"]["agent_id"]) if records else None)


def worker_app(worker: Worker) -> Starlette:
    """The worker's HTTP face: ``POST /v1/tools/{name}`` for the agents of its partitions."""

    async def call(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            args = parse_arguments(await request.body())
        except ValueError as exc:
            return json_response(failure(f"invalid JSON body: {exc}"), 400)
        if name in ROUTER_TOOLS:
            return json_response(failure(f"{name} is the router's to answer (memstream serve --kafka)"), 501)
        key = request.headers.get("idempotency-key")
        tool = REGISTRY.get(name)
        if key and tool is not None and tool.writes and isinstance(args, dict) and "command_id" not in args:
            args["command_id"] = key  # the HTTP spelling of a command id (W9), as the embedded face reads it
        hint = request.headers.get(PARTITION_HEADER, "")
        engine = worker.engine_for_call(args, int(hint) if hint.isdigit() else None)
        if engine is None:
            return json_response(failure("not_owner", node=worker.worker_id), 421)
        caller: Caller = caller_of(request)
        try:
            body, code = await run_tool(engine, caller, name, args)
        except TimeoutError as exc:
            return json_response(failure(f"log_unavailable: {exc}"), 503, "log_unavailable")
        return tool_response(body, code)

    async def health(request: Request) -> Response:
        owned = {str(p): m.offset for p, m in sorted(worker.models.items())}
        body: dict[str, Any] = {"node": worker.worker_id, "url": worker.url, "partitions": owned}
        body["fold"] = {
            str(p): {
                "by_agent": m.folded_by_agent,
                "by_tail": m.folded_by_tail,
                "tail_slices": m.tail_slices,
                "fed_by_agent": p in worker.fed,
            }
            for p, m in sorted(worker.models.items())
        }
        body["checkpoints"] = {
            str(p): {"restored_from": m.restored_from, "last": m.checkpoint_offset}
            for p, m in sorted(worker.models.items())
            if m.store is not None
        }
        if worker.decider is not None:
            d = worker.decider
            body["decider"] = {"decided": d.decided, "batches": d.batches, "busy_s": round(d.busy_s, 3)}
        return json_response(body)

    async def digests(request: Request) -> Response:
        """Each owned partition's read-model digests and offset, for replay checks."""
        out = {}
        for p, models in sorted(worker.models.items()):
            async with models.lock:
                out[str(p)] = {"offset": models.offset, "digests": {m.name: digest_of(m) for m in models.projections}}
        return json_response(out)

    routes = [
        Route("/v1/tools/{name}", call, methods=["POST"]),
        Route("/health", health),
        Route("/digests", digests),
        owner_route(worker),  # record owners, for the routers' grant checks (api/kafka/router/gate.py)
        *transfer_routes(worker),  # the workers' parts of export / import / merge (worker/transfer_parts.py)
    ]
    app = Starlette(routes=routes)
    guard_worker(app, worker.settings)  # MEMSTREAM_WORKER_TOKEN: only routers get an answer
    return app


def run_worker(
    cfg: KafkaConfig,
    settings: Settings,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    limits: Limits | None = None,
    loglevel: str = "WARNING",
    session_timeout_s: float = 10.0,
) -> None:
    """Run a worker: decider + read side + HTTP face, until SIGTERM/SIGINT (blocks)."""
    # Here, not at the top: faust (and uvloop) load only in a worker process, not in every
    # process that imports this module (a router, a replay).
    import faust
    import uvloop

    from memstream.streams.deciders.faust_app import create_app

    kafka_master_key(os.environ)  # required (MasterKeyError says how to set it), before anything is created
    asyncio.run(ensure_topics(cfg))
    sock = socket.socket()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited by accepted connections
    sock.bind((host, port))
    sock.listen(128)
    bound = sock.getsockname()[1]
    sealing = KafkaSealing.from_env(cfg)
    worker = Worker(cfg, settings, url=f"http://{host}:{bound}", sealing=sealing)

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Generator[None, None, None]:  # faust owns the signals
            yield

    server = _Server(uvicorn.Config(worker_app(worker), log_level="warning", access_log=False, lifespan="off"))

    async def serve() -> None:
        await server.serve(sockets=[sock])

    app, worker.decider = create_app(
        cfg,
        limits=limits,
        session_timeout_s=session_timeout_s,
        heartbeat_s=session_timeout_s / 10,
        on_assigned=worker.assigned,
        on_revoked=worker.revoked,
        on_appended=worker.appended,
        tasks=[serve],
        sealing=sealing,
    )
    log.warning("memstream worker %s answering at %s", worker.worker_id, worker.url)
    # uvloop, as uvicorn uses for `memstream serve`: a worker's time is mostly event-loop and
    # socket work (HTTP calls in, Kafka fetches and produces out), which uvloop does in C.
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    faust_worker = faust.Worker(app, loglevel=loglevel, quiet=True)
    # faust's terminal spinner sets the root logger to DEBUG (to spin on every record), so every
    # debug line of aiokafka would be formatted: about a tenth of a busy worker's CPU.
    faust_worker.spinner = None
    try:
        faust_worker.execute_from_commandline()
    finally:  # faust stops the loop without the worker's close: log what the batching did
        worker.embedders.close()
