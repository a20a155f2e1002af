"""Commands: what a caller asks for, before the decider has judged it.

A command is complete on arrival: the API has validated it, authorised it and computed its
embedding, and stamped ``received_at``. The decider is then a pure function of
(decision state, command), so the same log always yields the same decisions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from memstream.streams.events import Actor, Embedding, Scope

Standing = Literal["fact", "open", "noise", "ruled-out"]
Precision = Literal["strict", "balanced", "lenient"]


class Command(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: ClassVar[str]

    command_id: str = Field(min_length=1, max_length=200)
    scope: Scope
    actor: Actor
    received_at: datetime


class StoreMemory(Command):
    name: ClassVar[str] = "store"
    content: str
    msg_id: str | None = None
    # Who produced the content ({type, id, name}); content dedup is per source id.
    source: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    embedding: Embedding | None = None
    # The instant the memory describes, when the caller knows it (imports, transcripts).
    timestamp: datetime | None = None
    lock: bool = False


class UpdateMemory(Command):
    name: ClassVar[str] = "update_memory"
    memory_id: int
    content: str
    metadata: dict[str, Any] | None = None
    embedding: Embedding | None = None


class DeleteMemory(Command):
    name: ClassVar[str] = "delete_memory"
    memory_id: int


class LockMemory(Command):
    name: ClassVar[str] = "lock_memory"
    memory_id: int


class UnlockMemory(Command):
    name: ClassVar[str] = "unlock_memory"
    memory_id: int


class ArchiveEpisode(Command):
    name: ClassVar[str] = "archive_episode"
    summary: str
    keywords: str = ""
    resolved: bool | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    embedding: Embedding | None = None


class DeleteEpisode(Command):
    name: ClassVar[str] = "delete_episode"
    episode_id: int


class UpdateProfile(Command):
    name: ClassVar[str] = "update_profile"
    content: str
    embedding: Embedding | None = None


class DeleteAgentData(Command):
    name: ClassVar[str] = "delete_agent_data"


# An erasure's reason is kept in the clear in the log and the audit: bounded, and the docs ask
# that it name no one (docs/erasure.md).
MAX_ERASE_REASON = 500


class EraseMemory(Command):
    """Crypto-shred one memory or episode: its keys are destroyed, so its content and vector
    are gone from every copy memstream manages. A locked memory is erased too (docs/erasure.md)."""

    name: ClassVar[str] = "erase_memory"
    kind: Literal["mem", "ep"] = "mem"
    record_id: int
    reason: str = Field(min_length=1, max_length=MAX_ERASE_REASON)


class EraseAgentData(Command):
    """Crypto-shred everything of an agent, or only the memories of one source id."""

    name: ClassVar[str] = "erase_agent_data"
    reason: str = Field(min_length=1, max_length=MAX_ERASE_REASON)
    source: str | None = Field(default=None, min_length=1, max_length=256)


class SetRecallPrecision(Command):
    name: ClassVar[str] = "set_recall_precision"
    # A named level, "custom" (a raw beta), or None to clear the agent's override.
    level: Literal["strict", "balanced", "lenient", "custom"] | None
    beta: float = Field(gt=0)
    # The calibrated gate ({threshold, signal, seed, ...}) computed for this level, so replay
    # restores it without recalibrating.
    gate: dict[str, Any] | None = None


class DeclareStanding(Command):
    name: ClassVar[str] = "declare_standing"
    ref: str
    standing: Standing
    note: str | None = Field(default=None, max_length=4000)


class VerifyMemory(Command):
    """The caller re-checked a memory against its source and it still holds (seed 002's
    ``last_verified_at``): freshness counts from here. Changes no content."""

    name: ClassVar[str] = "verify_memory"
    memory_id: int
    note: str | None = Field(default=None, max_length=4000)


class ReembedMemory(Command):
    """A vector of another model for a live record, added beside its current one: recall keeps
    using the current model until ``SwitchEmbedding`` moves the agent over."""

    name: ClassVar[str] = "reembed_memory"
    memory_id: int
    kind: Literal["mem", "ep"] = "mem"
    embedding: Embedding
    # Hex digest (``decision.keys.content_key``) of the text that was embedded, for memories: the
    # decider refuses the vector if the memory's text changed since.
    content_key: str | None = None


class SwitchEmbedding(Command):
    """Move an agent's recall to ``model``; refused unless every live record has its vector."""

    name: ClassVar[str] = "switch_embedding"
    model: str = Field(min_length=1, max_length=200)


class DeclareAssociations(Command):
    """Declare and/or retract associations (A1). The items are judged by the decider, item by
    item (a malformed one is dropped, never a reason to refuse the rest), so they arrive raw."""

    name: ClassVar[str] = "declare_associations"
    associations: dict[str, Any] | None = None
    anchor_ref: str = ""
    retract: dict[str, Any] | None = None


AnyCommand = (
    StoreMemory
    | UpdateMemory
    | DeleteMemory
    | LockMemory
    | UnlockMemory
    | ArchiveEpisode
    | DeleteEpisode
    | UpdateProfile
    | DeleteAgentData
    | SetRecallPrecision
    | DeclareStanding
    | ReembedMemory
    | SwitchEmbedding
    | DeclareAssociations
    | VerifyMemory
    | EraseMemory
    | EraseAgentData
)
