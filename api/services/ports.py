"""The engine's surface, declared once: what tools, dispatch and access control may ask of an engine.

Implemented by the embedded engine (api/services/engine.py), a Kafka worker's engine of one
partition (api/kafka/worker/), and, for reads only, a point-in-time view
(api/services/point_in_time.py), so a tool answers in every mode, "now" or "as of", with one code.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from memstream.api.query.recall.models import RecallModels
from memstream.api.services.acl import AclConfig
from memstream.api.services.embedders import Embedders
from memstream.api.services.embedding import Embedder
from memstream.api.services.jobs import ReembedJob
from memstream.api.services.metrics import Metrics
from memstream.api.services.settings import Settings
from memstream.projections.associations import AssociationsProjection
from memstream.projections.history import HistoryProjection
from memstream.projections.standings import StandingsProjection
from memstream.projections.versions import VersionsProjection
from memstream.streams.commands import Command, EraseAgentData, EraseMemory
from memstream.streams.decision.state import DecisionState
from memstream.streams.events import AuditRecord, Embedding
from memstream.streams.log.port import Committed, LogRecord

T = TypeVar("T")

# A provider of "these refs are superseded by those": (agent_id, refs) -> {ref: [newer refs]}.
SupersededProvider = Callable[[str, Sequence[str]], Mapping[str, Sequence[str]]]

# A log read's answer: at once from the embedded log, an awaitable from a Kafka worker's partition
# log (it reads the topics); ``streams.log.port.resolved`` turns either into the records.
Records = list[LogRecord] | Awaitable[list[LogRecord]]


class ReadModels(RecallModels, Protocol):
    """The read models, each under its name (projections/catalog.py): those a recall reads
    (api/query/recall/models.py) and the rest."""

    @property
    def history(self) -> HistoryProjection: ...

    @property
    def associations(self) -> AssociationsProjection: ...

    @property
    def standings(self) -> StandingsProjection: ...

    @property
    def versions(self) -> VersionsProjection: ...


class Reads(ReadModels, Protocol):
    """What a read needs: the read models, a consistent read of them, query embeddings and the
    settings. An engine answers it "now"; a point-in-time view "as of" a point."""

    @property
    def settings(self) -> Settings: ...

    async def read(self, query: Callable[[], T]) -> T:
        """``query()`` run against read models that include every write acknowledged before."""
        ...

    async def embed(
        self, texts: Sequence[str], *, agent_id: str | None = None, model: str | None = None
    ) -> list[Embedding | None]:
        """Query embeddings: with ``model``, else the model of the agent's vectors, else the
        configured one; None for each text when embedding is off."""
        ...


class LogReads(Protocol):
    """The reads of the log itself that ``history``, ``audit_log``, exports and owner lookups make.
    Offsets are the log's (in Kafka mode: the call's partition's)."""

    def end_offset(self) -> int:
        """The offset after the last event the answers may show."""
        ...

    def read(
        self,
        start: int = 0,
        stop: int | None = None,
        *,
        agent_id: str | None = None,
        limit: int = 10_000,
        vectors: bool = True,
        types: Sequence[str] | None = None,
    ) -> Records: ...

    def read_offsets(self, offsets: Sequence[int]) -> Records: ...

    def read_audit(
        self,
        start: int = 0,
        stop: int | None = None,
        *,
        agent_id: str | None = None,
        kind: str | None = None,
        limit: int = 10_000,
    ) -> Records:
        """Audit records (refused and skipped commands); raises ``InputError`` for a form of the
        call this log cannot answer (Kafka mode: without an agent)."""
        ...


class Audited(Protocol):
    """Where a refused call's audit record goes (the same record in every mode)."""

    async def refuse(self, record: AuditRecord) -> None: ...


class Guarded(Audited, Protocol):
    """What enforcing an access policy needs: the policy, and who owns a record named by id."""

    @property
    def acl(self) -> AclConfig | None:
        """The policy dispatch enforces; None: anonymous full access."""
        ...

    async def record_owner(self, kind: str, ident: int) -> str | None:
        """The agent a record (``kind`` "mem" or "ep") belongs to, deleted records included
        (through their history); None when no such record was ever written."""
        ...


class ToolHost(Guarded, Protocol):
    """What dispatch runs a tool over: an engine, or a Kafka router's stand-in for the tools it
    answers itself (the file transfers, api/kafka/router/transfers.py)."""

    @property
    def metrics(self) -> Metrics | None:
        """Where call latencies and failures are counted; None: not counted here."""
        ...


class HealthProbe(Protocol):
    """Facts ``check_health`` reports about a process's own log, writer and checkpoints."""

    def log_ends(self) -> tuple[int, int]:
        """(events end offset, audit end offset); raises when the log cannot be read."""
        ...

    def committer_running(self) -> bool:
        """Whether the task that commits writes to the log is alive."""
        ...

    def checkpoint_ages(self) -> dict[str, float | None]:
        """Seconds since each checkpoint (read models by name, and "decision") was written;
        None for a missing one."""
        ...

    def events_since_checkpoint(self) -> int: ...

    def checkpoint_pending(self) -> bool:
        """A checkpoint is due and about to be written (after the read that made it due)."""
        ...

    def integrity(self) -> str:
        """The log's integrity check verdict ("ok" when sound)."""
        ...


@runtime_checkable
class Erasing(Protocol):
    """An engine that can crypto-shred (docs/erasure.md): the embedded one, and a Kafka
    worker's partition engine (api/kafka/worker/erasure.py; docs/erasure.md, "Kafka mode")."""

    async def erase(self, command: EraseMemory | EraseAgentData) -> dict[str, Any]:
        """Submit the erasure and complete it (fold, destroy keys, rewrite checkpoints):
        ``{"outcome": Outcome, ...report}``."""
        ...


class Engine(Reads, ToolHost, Protocol):
    """Everything a tool may ask of an engine answering "now": reads (``Reads``), writes,
    ``as_of`` views, the log's own reads, admin jobs, metrics, access control and health."""

    @property
    def log(self) -> LogReads: ...

    @property
    def embedder(self) -> Embedder:
        """The configured model (new agents get it)."""
        ...

    @property
    def embedders(self) -> Embedders:
        """Every model this process embeds with, by id (the configured one, and those re-embeds moved agents to)."""
        ...

    def agent_model(self, agent_id: str) -> str | Awaitable[str | None] | None:
        """The model of an agent's vectors (None: it has none yet). The embedded engine answers at
        once, a Kafka worker's engine once its read models include its acknowledged writes (an
        awaitable); ``streams.log.port.resolved`` takes either."""
        ...

    @property
    def applied_offset(self) -> int:
        """The last event the read models include (read it inside ``read``)."""
        ...

    @property
    def jobs(self) -> dict[str, ReembedJob]:
        """Background admin jobs by kind ("reembed"), kept across calls."""
        ...

    @property
    def decision_state(self) -> DecisionState | None:
        """The decider's state, when this process decides the agents' commands and has it
        folded (else None): which command ids were decided already."""
        ...

    async def submit(self, command: Command) -> Committed:
        """Decide and append a command; a rejection is audited and marks the call's failure."""
        ...

    async def at(self, as_of: int | str | None) -> Reads:
        """This engine for ``None``, else the state at a log offset or an ISO-8601 instant;
        raises ``InputError`` for a point outside the log or a bad instant."""
        ...

    def embedder_for(self, model: str | None) -> Embedder: ...

    def superseded_providers(self) -> list[SupersededProvider]:
        """Every source of "this record is superseded by that one" a context packet consults."""
        ...

    def health(self) -> HealthProbe | None:
        """Facts about this process's log for ``check_health``; None where another process
        answers it (a Kafka worker: the router does)."""
        ...
