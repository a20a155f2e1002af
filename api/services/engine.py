"""The engine every face shares: log, command bus, projections and embedder, opened once.

Faces (MCP, HTTP, CLI) translate their wire formats into engine calls and back; they hold no
state of their own. Reads first fold whatever the log gained since the last read (from this
process or any other sharing the data directory), so a read issued after a write returned sees
that write (R12) without any coordination between processes beyond the log itself.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from memstream.api.services import erasure, owners, ports
from memstream.api.services.acl import AclConfig
from memstream.api.services.embedders import Embedders
from memstream.api.services.embedding import Embedder
from memstream.api.services.failures import mark_rejected
from memstream.api.services.feed import Feed
from memstream.api.services.health import EmbeddedHealth
from memstream.api.services.jobs import ReembedJob
from memstream.api.services.metrics import Metrics
from memstream.api.services.named_models import NamedModels
from memstream.api.services.point_in_time import PointInTime
from memstream.api.services.ports import Reads
from memstream.api.services.settings import Settings
from memstream.projections.catalog import (
    factories,
    read_models,
)
from memstream.projections.runner import ProjectionRunner
from memstream.streams.buses.embedded import DECISION_SNAPSHOT, EmbeddedCommandBus
from memstream.streams.commands import Command, EraseAgentData, EraseMemory
from memstream.streams.decision.limits import Limits
from memstream.streams.decision.state import DecisionState
from memstream.streams.events import AuditRecord, Embedding, decode
from memstream.streams.folding import freeze_long_lived
from memstream.streams.log.port import Committed
from memstream.streams.log.sqlite import SqliteLog
from memstream.streams.snapshots import SnapshotStore

log = logging.getLogger(__name__)

T = TypeVar("T")


class EmbeddedEngine(NamedModels):
    def __init__(
        self,
        settings: Settings,
        embedder: Embedder | None = None,
        embedders: Mapping[str, Embedder] | None = None,
    ) -> None:
        """``embedder`` is the configured model (new agents get it); ``embedders`` are other
        models by id, for agents whose vectors a re-embed moved elsewhere (else loaded by name)."""
        self.settings = settings
        self.log = SqliteLog(settings.log_path, num_partitions=settings.partitions, synchronous=settings.sync)
        self.snapshots = SnapshotStore(settings.snapshot_dir)
        self.bus = EmbeddedCommandBus(
            self.log,
            # The decider's limits are a backstop behind the tools' own checks (which cut content
            # at max_content_chars and refuse metadata past max_metadata_chars characters): they
            # must never refuse what a tool accepted, so they allow the larger text cap and the
            # metadata cap counted in bytes (up to 4 per character), with some slack.
            limits=Limits(
                max(settings.max_content_chars, settings.max_profile_chars), settings.max_metadata_chars * 4 + 1024
            ),
            snapshots=self.snapshots,
            snapshot_every=settings.snapshot_every,
        )
        self.runner = ProjectionRunner(
            self.log,
            factories(self.snapshots, settings.read_model_options),
            self.snapshots,
            checkpoint_every=settings.snapshot_every,
        )
        super().__init__(self.runner.projections)  # the read models by name (rebound after restore)
        self.embedders = Embedders(settings, embedder, embedders)
        self.point_in_time = PointInTime(self, lambda: read_models(None, settings.read_model_options))
        self._read_lock = asyncio.Lock()
        self._checkpointing: asyncio.Task[None] | None = None  # a due checkpoint after a read
        self.jobs: dict[str, ReembedJob] = {}  # background admin jobs by kind (see api/tools/admin.py)
        self.metrics = Metrics()  # served at GET /metrics (api/services/metrics.py)
        self.metrics.bind(self)
        self._health = EmbeddedHealth(self.log, self.bus, self.runner, self.snapshots)
        # The access policy dispatch enforces; None: anonymous full access. Set by the faces
        # from MEMSTREAM_ACL_FILE (api/services/acl.py), before they serve anything.
        self.acl: AclConfig | None = None
        self.feed = Feed(self.log, min_read_interval_s=settings.feed_interval_s)  # the change feed (feed.py)
        self._started = False

    @property
    def embedder(self) -> Embedder:
        return self.embedders.default

    @property
    def applied_offset(self) -> int:
        """The last event the read models include (read it inside ``read``: the state the
        rows show). A Kafka worker's engine says the same of its partition."""
        return self.runner.offset

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        # The configured model loads on a thread while the checkpoints load (its import and
        # session creation were ~0.75 CPU s of the first store or recall: docs/benchmarks.md,
        # "Restart"); /health answers only once it is loaded.
        model = loop.run_in_executor(None, self.embedders.preload)
        # Their checksums, and the log's scan for erasures to complete, on another core while
        # the loads parse (streams/snapshots.py, erasure.read_pending).
        self.snapshots.verify_ahead([DECISION_SNAPSHOT, *(p.name for p in self.runner.projections)])
        pending = loop.run_in_executor(None, erasure.read_pending, self.log)
        try:
            await self.bus.start()
            restored = await loop.run_in_executor(None, self._restore_projections)
        finally:
            await asyncio.gather(model, pending, return_exceptions=True)
        await model  # its error, if any
        self._started = True
        # A crash after an erasure's event was appended (keys not yet destroyed, checkpoints
        # not yet rewritten) is completed here, before anything is served.
        await erasure.complete_pending(self, self.settings.data_dir, restored, await pending)

    def _restore_projections(self) -> int:
        self.runner.restore()
        restored = self.runner.offset
        self.bind(self.runner.projections)  # a read model whose checkpoint was unusable was replaced
        self.fold("start-up", self.runner)
        freeze_long_lived()
        return restored

    def fold(self, kind: str, runner: ProjectionRunner, stop: int | None = None, *, checkpoint: bool = True) -> int:
        """``runner.catch_up(stop)`` (possibly long: start-up, a big tail, a point-in-time
        replay) with its progress in the metrics (``memstream_fold_events_*``)."""
        end = self.log.end_offset() if stop is None else stop
        progress = self.metrics.fold
        progress.start(kind, runner.offset + 1, end)
        try:
            return runner.catch_up(end, progress=progress.update, checkpoint=checkpoint)
        finally:
            progress.finish()

    async def close(self) -> None:
        if not self._started:
            return
        self._started = False
        await self.feed.close()
        for job in self.jobs.values():
            task = job.task
            if task is not None and not task.done():
                task.cancel()  # resumable by design: what it appended stays, the rest is redone
                await asyncio.gather(task, return_exceptions=True)
        if self._checkpointing is not None:  # before the bus closes the thread it runs on
            await asyncio.gather(self._checkpointing, return_exceptions=True)
        await self.bus.close()
        try:
            self.runner.catch_up()
            self.runner.checkpoint()
        except OSError as exc:
            log.warning("could not checkpoint projections on close: %s", exc)
        self.embedders.close()
        self.log.close()

    # -- writes -----------------------------------------------------------------------------

    async def submit(self, command: Command) -> Committed:
        committed = await self.bus.submit(command)
        if committed.offset is not None:
            self.feed.notify()  # all a write does for the change feed
        if committed.outcome.result == "rejected":
            mark_rejected(committed.outcome.error)  # the bus wrote its audit record
        return committed

    async def erase(self, command: EraseMemory | EraseAgentData) -> dict[str, Any]:
        """Append the erasure, then complete it before answering (api/services/erasure.py)."""
        committed = await self.submit(command)
        offset = committed.offset
        if committed.outcome.result == "applied" and offset is None:  # a retry: completed again
            offset = erasure.offset_of_command(self.log, command.scope.agent_id, command.command_id)
        if committed.outcome.result != "applied" or offset is None:
            return {"outcome": committed.outcome}
        done = await erasure.complete(self, offset, self.settings.data_dir)
        p = done["event"]["payload"]
        offsets: list[int] = []
        # Only a log sealed part way has offsets an erasure cannot reach; elsewhere the answer does
        # not depend on them, and looking up 100k refs' history here holds the event loop.
        if self.log.sealed_from > 0:
            listed = done["dropped"] or ((), ())
            refs = [f"mem:{i}" for i in listed[0]] + [f"ep:{i}" for i in listed[1]]
            await self.read(lambda: offsets.extend(o for r in refs for o in self.history.of(r)))
            if p["agent_scope"]:
                offsets.append(0)  # agent-wide data may be anywhere in the log
        return {
            "outcome": committed.outcome,
            "offset": offset,
            "payload": p,
            "keys_destroyed": done["keys_destroyed"],
            "unreachable": erasure.unreachable(self.log, offsets),
            "dropped": done["dropped"],
        }

    async def settle(self, *, checkpoint: bool = False) -> None:
        """Fold the log's tail, and checkpoint if asked, on a worker thread while reads wait:
        an erasure's long steps must not stall the event loop (other agents' writes)."""
        loop = asyncio.get_running_loop()

        def work() -> None:
            self.runner.catch_up(self.log.end_offset())
            if checkpoint:
                self.runner.checkpoint()

        async with self._read_lock:
            await loop.run_in_executor(None, work)

    async def refuse(self, record: AuditRecord) -> None:
        await self.bus.record_refusal(record)

    @property
    def decision_state(self) -> DecisionState | None:
        """The decider's state (set once the bus has started): which command ids were decided."""
        return self.bus.state

    async def record_owner(self, kind: str, ident: int) -> str | None:
        return await owners.record_owner(self, kind, ident)

    def health(self) -> EmbeddedHealth:
        return self._health

    def embedder_for(self, model: str | None) -> Embedder:
        return self.embedders.embedder_for(model)

    def agent_model(self, agent_id: str) -> str | None:
        """The model of an agent's vectors, as of the log's end.

        The read models say it as of their offset; a switch another process appended since
        is looked up in the agent's part of the log's tail (an indexed read of one event type)
        instead of folding the whole tail here, so a store does not pay a read's fold."""
        since = self.runner.offset + 1  # first: a fold running meanwhile only makes ``model`` newer
        model = self.vectors.model_of(agent_id)
        if self.log.end_offset() > since:
            switched = self.log.read(since, agent_id=agent_id, types=("embedding.switched",), vectors=False)
            if switched:
                model = decode(switched[-1].value)["payload"]["model"]
        return model

    async def embed(
        self, texts: Sequence[str], *, agent_id: str | None = None, model: str | None = None
    ) -> list[Embedding | None]:
        """Embeddings for texts, tagged with the model: the agent's model when ``agent_id`` is
        given (see ``Embedders.embedder_for``), else ``model``, else the configured one. With
        ``MEMSTREAM_EMBEDDER=none`` nothing is embedded (as CPersona's embedding mode ``none``):
        memories are stored without vectors and found lexically only."""
        if agent_id is not None and model is None and self.embedders.enabled:
            model = self.agent_model(agent_id)
        started = time.perf_counter()
        out = await self.embedders.embed(texts, model)
        if self.embedders.enabled:
            self.metrics.observe_embed(time.perf_counter() - started, len(texts))
        return out

    # -- reads ------------------------------------------------------------------------------

    async def at(self, as_of: int | str | None) -> Reads:
        """This engine for a read "now", or a view of the state at ``as_of`` (H3)."""
        if as_of is None:
            return self
        return await self.point_in_time.view(as_of)

    async def read(self, query: Callable[[], T]) -> T:
        """Run a read against projections that include every write already acknowledged.

        The tail the log gained since the last read (from this process or another sharing the
        data directory) is folded first; a long one on a worker thread. The lock is held for
        the query too, so no read ever sees a projection halfway through a fold.
        """
        async with self._read_lock:
            end = self.log.end_offset()
            lag = end - 1 - self.runner.offset
            if 0 < lag < 2_000:
                self.runner.catch_up(end, checkpoint=False)
            elif lag > 0:
                fold = functools.partial(self.fold, "catch-up", self.runner, end, checkpoint=False)
                await asyncio.get_running_loop().run_in_executor(None, fold)
            answer = query()
        if self.runner.checkpoint_due and self._checkpointing is None:
            self._checkpointing = asyncio.create_task(self._checkpoint(), name="memstream-checkpoint")
        return answer

    async def checkpoints_written(self) -> None:
        """Wait until the checkpoints under way (the read models' after a read, the decision
        state's beside the writer) are written or have failed."""
        if self._checkpointing is not None:
            await asyncio.gather(self._checkpointing, return_exceptions=True)
        await self.bus.on_snapshot_thread(lambda: None)  # one thread, in order: all before it are done

    async def _checkpoint(self) -> None:
        """A due checkpoint, after the read whose fold made it due has answered: on the snapshot
        thread, so the event loop (writes, /health) goes on, while reads wait for the lock. At 1M
        memories one takes 10-20 s, which the read used to wait for with the loop blocked
        (docs/benchmarks.md, "A running server's checkpoint (wave 11)")."""
        try:
            # A decision snapshot being written on that thread is waited for outside the lock:
            # reads go on meanwhile (the two are often due together, every snapshot_every events).
            await self.bus.on_snapshot_thread(lambda: None)
            async with self._read_lock:
                await self.bus.on_snapshot_thread(self.runner.checkpoint_if_due)
        except Exception:  # a checkpoint is a shortcut: the next one is tried after more events
            log.exception("the read models' checkpoint failed")
        finally:
            self._checkpointing = None


def _offers_the_surface(engine: EmbeddedEngine) -> ports.Engine:
    """Never called: mypy checks here that the embedded engine offers everything a tool may ask."""
    return engine


def _erases(engine: EmbeddedEngine) -> ports.Erasing:
    """Never called: mypy checks here that the embedded engine can erase."""
    return engine
