"""Typed answers of the tools. Each model types the fields callers use and keeps the rest
(``extra="allow"``), so a newer server's extra fields never break an older client; parts whose
shape the server keeps open (sources, metadata, health stats) stay dicts."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Result(BaseModel):
    """Base of every answer: unknown fields are kept (``model_extra``), never refused."""

    model_config = ConfigDict(extra="allow")


class WriteResult(Result):
    """A write's answer; ``ok`` is true (a refusal is raised as an exception instead)."""

    ok: bool = True


# -- parts several answers share ---------------------------------------------------------------


class Counted(Result):
    """A listing's answer: ``count`` of what it lists."""

    count: int = 0


class GraphParts(Result):
    """Declared entities and relations, as the association tools give them."""

    entities: list[dict[str, Any]] = []
    relations: list[dict[str, Any]] = []


class Source(Result):
    type: str | None = None
    id: str | None = None
    name: str | None = None


class SourcedText(Result):
    """A record's text by its ref (``mem:<id>``, ``ep:<id>``), with where and when it came from."""

    ref: str
    content: str
    source: Source | None = None
    timestamp: str | None = None


class Record(Result):
    """A memory or an episode: what both are stored with."""

    id: int
    agent_id: str
    project_id: str = ""
    created_at: str | None = None


class Logged(Result):
    """An entry of the log or of the audit trail: when, in what scope, under which command."""

    at: str | None = None
    scope: dict[str, Any] = {}
    command_id: str | None = None


# -- writes ------------------------------------------------------------------------------------


class StoreResult(WriteResult):
    result: str  # "stored", or "skipped" (a duplicate; ``reason`` says why, ``id`` is the kept one)
    id: int | None = None
    reason: str | None = None
    embedded: bool | None = None
    truncated: bool = False
    locked: bool | None = None
    associations: dict[str, Any] | None = None

    @property
    def stored(self) -> bool:
        return self.result == "stored"


class UpdateResult(WriteResult):
    updated_id: int
    truncated: bool = False


class DeleteResult(WriteResult):
    deleted_id: int


class LockResult(WriteResult):
    locked_id: int


class UnlockResult(WriteResult):
    unlocked_id: int


class VerifyResult(WriteResult):
    verified_id: int


class ArchiveEpisodeResult(WriteResult):
    episode_id: int | None = None


class UpdateProfileResult(WriteResult):
    profiles_updated: int = 0


class PrecisionResult(WriteResult):
    agent_id: str | None = None
    precision: str | None = None
    beta: float | None = None
    overridden: bool | None = None


class DeclareAssociationsResult(WriteResult, GraphParts):
    result: str | None = None
    mentions: int = 0
    dropped: list[dict[str, Any]] = []


class DeclareStandingResult(WriteResult):
    ref: str
    standing: str


class DeleteAgentDataResult(WriteResult):
    agent_id: str
    deleted_memories: int = 0
    deleted_profiles: int = 0
    deleted_episodes: int = 0
    kept_locked: int = 0


class EraseResult(WriteResult):
    """erase_memory and erase_agent_data (docs/erasure.md): what was erased, and what sealing
    could not reach (plaintext written before the log was sealed)."""

    agent_id: str | None = None
    kind: str | None = None
    erased: list[str] = []
    erased_memories: int = 0
    erased_episodes: int = 0
    erased_profile: bool = False
    locked_overridden: list[str] = []
    keys_destroyed: int = 0
    offset: int | None = None
    unreachable: list[str] = []


class TransferResult(WriteResult):
    """export_memories, import_memories and merge_memories: counts by kind, as the server reports."""


class ReembedJob(Result):
    state: str
    model: str | None = None
    done: int = 0
    total: int = 0
    elapsed_s: float | None = None


class ReembedResult(Result):
    ok: bool | None = None
    job: ReembedJob | None = None


# -- reads -------------------------------------------------------------------------------------


class RecallHit(SourcedText):
    match_reason: dict[str, Any] | None = None

    @property
    def memory_id(self) -> int | None:
        """The memory's id when ``ref`` is ``mem:<id>``."""
        kind, _, number = self.ref.partition(":")
        return int(number) if kind == "mem" and number.isdigit() else None


class RecallResult(Result):
    messages: list[RecallHit] = []
    trace: dict[str, Any] | None = None


class RecallWithContextResult(RecallResult):
    recalled: int = 0
    external: int = 0


class FleetAgentHits(Result):
    agent_id: str
    messages: list[RecallHit] = []


class RecallFleetResult(Counted):
    results: list[FleetAgentHits] = []


class Content(SourcedText):
    """One of ``get_contents``' items."""


class GetContentsResult(Counted):
    items: list[Content] = []
    missing: list[Any] = []


class Memory(Record):
    content: str
    channel: str = ""
    source: Source | None = None
    timestamp: str | None = None
    locked: bool = False


class ListMemoriesResult(Counted):
    memories: list[Memory] = []


class Episode(Record):
    summary: str
    keywords: str = ""
    start_time: str | None = None
    end_time: str | None = None


class ListEpisodesResult(Counted):
    episodes: list[Episode] = []


class Event(Logged):
    """One event of the log, as ``history`` (and the change feed) gives it."""

    offset: int
    type: str
    partition: int | None = None
    event_id: str | None = None
    actor: dict[str, Any] = {}
    change: dict[str, Any] = {}

    @property
    def agent_id(self) -> str | None:
        agent = self.scope.get("agent_id")
        return agent if isinstance(agent, str) else None


class HistoryResult(Result):
    events: list[Event] = []
    agent_id: str | None = None
    ref: str | None = None


class AuditRecord(Logged):
    audit_offset: int
    kind: str
    tool: str | None = None
    who: dict[str, Any] = {}
    why: str | None = None
    outcome: dict[str, Any] = {}


class AuditLogResult(Result):
    records: list[AuditRecord] = []


class ProfileResult(Result):
    profile: str = ""


class HealthResult(Result):
    status: str
    checks_run: list[str] = []
    issues: list[dict[str, Any]] = []
    stats: dict[str, Any] = {}


class ReconstructItem(Result):
    content: str
    head_ref: str | None = None
    claims: list[dict[str, Any]] = []


class ReconstructResult(Result):
    items: list[ReconstructItem] = []
    effective_count: int | None = None
    returned_count: int = 0
    shortfall_reason: str | None = None


class TraverseResult(GraphParts):
    entity: str | None = None
    reason: str | None = None


class GraphResult(GraphParts, Counted):
    """An agent's declared graph: entities, relations, and a preview of each record named."""

    agent_id: str | None = None
    records: dict[str, str] = {}


class ContingentResult(Result):
    contingent: list[dict[str, Any]] = []
    unjudged: list[Any] = []


class ContextPacketResult(Result):
    query: str | None = None
    verified: list[dict[str, Any]] = []
    stale_risk: list[dict[str, Any]] = []
    miss: dict[str, Any] | None = None


class ContextPackageResult(Result):
    query: str | None = None
    summary: list[Any] = []
    anchors: list[Any] = []
    truncated: bool = False


class AgentSummary(Result):
    agent_id: str
    memories: int = 0
    episodes: int = 0
    profile: bool = False
    last_event: dict[str, Any] | None = None


class ListAgentsResult(Counted):
    agents: list[AgentSummary] = []


# The answer model of each tool; a tool missing here answers a plain ``Result``.
RESULTS: dict[str, type[Result]] = {
    "archive_episode": ArchiveEpisodeResult,
    "association_graph": GraphResult,
    "audit_log": AuditLogResult,
    "check_contingent": ContingentResult,
    "check_health": HealthResult,
    "context_package": ContextPackageResult,
    "context_packet": ContextPacketResult,
    "declare_associations": DeclareAssociationsResult,
    "declare_standing": DeclareStandingResult,
    "delete_agent_data": DeleteAgentDataResult,
    "delete_episode": DeleteResult,
    "delete_memory": DeleteResult,
    "erase_agent_data": EraseResult,
    "erase_memory": EraseResult,
    "export_memories": TransferResult,
    "get_contents": GetContentsResult,
    "get_profile": ProfileResult,
    "get_recall_precision": PrecisionResult,
    "history": HistoryResult,
    "import_memories": TransferResult,
    "list_agents": ListAgentsResult,
    "list_episodes": ListEpisodesResult,
    "list_memories": ListMemoriesResult,
    "lock_memory": LockResult,
    "merge_memories": TransferResult,
    "recall": RecallResult,
    "recall_fleet": RecallFleetResult,
    "recall_with_context": RecallWithContextResult,
    "reconstruct": ReconstructResult,
    "reembed": ReembedResult,
    "reembed_status": ReembedResult,
    "set_recall_precision": PrecisionResult,
    "store": StoreResult,
    "traverse": TraverseResult,
    "unlock_memory": UnlockResult,
    "update_memory": UpdateResult,
    "update_profile": UpdateProfileResult,
    "verify_memory": VerifyResult,
}
