"""A partition's engine: the ``Engine`` of api/services/ports.py over one partition of a worker."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from memstream.api.kafka.worker.models import PartitionModels
from memstream.api.kafka.worker.partition_log import KafkaPartitionLog
from memstream.api.kafka.worker.point_in_time import KafkaPointInTime
from memstream.api.services import owners
from memstream.api.services.acl import AclConfig
from memstream.api.services.embedders import Embedders
from memstream.api.services.embedding import Embedder
from memstream.api.services.failures import mark_rejected
from memstream.api.services.metrics import Metrics
from memstream.api.services.named_models import NamedModels
from memstream.api.services.ports import Engine, Erasing, Reads
from memstream.api.services.settings import Settings
from memstream.projections.runner import FoldedModels
from memstream.streams.commands import Command, EraseAgentData, EraseMemory
from memstream.streams.deciders.kafka import KafkaDecider
from memstream.streams.decision.state import DecisionState
from memstream.streams.events import AuditRecord, Embedding
from memstream.streams.log.kafka import KafkaConfig
from memstream.streams.log.port import Committed, partition_for

T = TypeVar("T")


class WorkerSide(Protocol):
    """What a partition's engine uses of its worker (api/kafka/worker/app.py ``Worker``)."""

    cfg: KafkaConfig
    settings: Settings
    embedders: Embedders
    partition_log: KafkaPartitionLog
    point_in_time: KafkaPointInTime
    acked: dict[int, int]
    decider: KafkaDecider | None

    async def submit(self, item: Command | AuditRecord) -> Committed: ...

    async def erase(self, models: PartitionModels, committed: Committed, command: Command) -> dict[str, Any]: ...


class PartitionEngine(NamedModels):
    """The engine of one partition of a worker: the ``Engine`` of api/services/ports.py over the
    partition's read models, its part of the topics and the worker's decider."""

    # Grants are checked by the router (api/kafka/router/gate.py) and calls are not measured here.
    acl: AclConfig | None = None
    metrics: Metrics | None = None

    def __init__(self, worker: WorkerSide, models: PartitionModels) -> None:
        super().__init__(models.projections)
        self.worker = worker
        self.models = models
        self.settings = worker.settings
        self.embedders = worker.embedders
        self.jobs = models.jobs  # the partition's (a re-embed), seen by the next call's engine
        self.log = worker.partition_log.view(models.partition, models)

    async def read(self, query: Callable[[], T]) -> T:
        await self.models.caught_up(max(self.models.target, self.worker.acked.get(self.models.partition, -1)))
        async with self.models.lock:
            return query()

    async def at(self, as_of: int | str | None) -> Reads:
        """This engine for a read "now", or a view of the partition's state at ``as_of`` (H3):
        an offset of this partition, or an instant (see ``api/kafka/worker/point_in_time.py``)."""
        if as_of is None:
            return self
        partition = self.models.partition
        options = self.settings.read_model_options

        def fresh() -> PartitionModels:
            return PartitionModels(partition, 0, None, options)

        return await self.worker.point_in_time.view(partition, as_of, fresh)

    async def submit(self, command: Command) -> Committed:
        committed = await self.worker.submit(command)
        if committed.offset is not None:
            p = partition_for(command.scope.agent_id, self.worker.cfg.partitions)
            self.worker.acked[p] = max(self.worker.acked.get(p, -1), committed.offset)
        if committed.outcome.result == "rejected":
            mark_rejected(committed.outcome.error)
        return committed

    async def erase(self, command: EraseMemory | EraseAgentData) -> dict[str, Any]:
        """Decide the erasure like any write, then complete it before answering (fold, destroy
        the keys, rewrite the partition's checkpoint: api/kafka/worker/erasure.py)."""
        committed = await self.submit(command)
        if committed.outcome.result != "applied":
            return {"outcome": committed.outcome}
        done = await self.worker.erase(self.models, committed, command)
        ev = done["event"]
        return {
            "outcome": committed.outcome,
            "offset": ev_offset(committed, done),
            "payload": ev["payload"],
            "keys_destroyed": done["keys_destroyed"],
            "unreachable": done["unreachable"],
            "dropped": done["dropped"],
        }

    async def refuse(self, record: AuditRecord) -> None:
        await self.worker.submit(record)

    async def record_owner(self, kind: str, ident: int) -> str | None:
        return await owners.record_owner(self, kind, ident)

    def health(self) -> None:
        """None: the router answers ``check_health`` for the deployment (``ROUTER_TOOLS``)."""
        return None

    @property
    def embedder(self) -> Embedder:
        return self.embedders.default

    @property
    def applied_offset(self) -> int:
        """The last event of the partition its read models include (read inside ``read``)."""
        return self.models.offset

    @property
    def decision_state(self) -> DecisionState | None:
        """The decider's state of this partition when this worker decides it and has folded
        it (else None): what an import asks to tell a command id decided already.
        ``decisions`` folds it first."""
        decider = self.worker.decider
        if decider is None or not decider.owns(self.models.partition):
            return None
        return decider.states.get(self.models.partition)

    async def decisions(self) -> DecisionState | None:
        """``decision_state``, folded from the topics now if the decider has not folded it yet."""
        decider = self.worker.decider
        return None if decider is None else await decider.state_of(self.models.partition)

    async def agent_model(self, agent_id: str) -> str | None:
        """The model of an agent's vectors: the decider's, when it holds the partition's state
        (a store must not wait for the read models, which an erasure's fold holds for seconds);
        else from the read models once they include every write this worker acknowledged."""
        decider = self.worker.decider
        if decider is not None:
            known, model = decider.decided_model(self.models.partition, agent_id)
            if known:
                return model
        return await self.read(lambda: self.vectors.model_of(agent_id))

    def embedder_for(self, model: str | None) -> Embedder:
        return self.embedders.embedder_for(model)

    async def embed(
        self, texts: Sequence[str], *, agent_id: str | None = None, model: str | None = None
    ) -> list[Embedding | None]:
        if agent_id is not None and model is None and self.embedders.enabled:
            model = await self.agent_model(agent_id)
        return await self.embedders.embed(texts, model)


def ev_offset(committed: Committed, done: dict[str, Any]) -> int:
    """The erasure's offset: the append's, or (a retried command id) the one found in the topic."""
    return committed.offset if committed.offset is not None else int(done["offset"])


def _offers_the_surface(
    engine: PartitionEngine, models: PartitionModels
) -> tuple[Engine, FoldedModels, Erasing]:
    """Never called: mypy checks here that a partition's engine offers everything a tool may ask
    (erasure included), and that its read models are folded models (as a runner's are)."""
    return engine, models, engine
