"""The event model: one versioned envelope for every accepted write.

Events are the source of truth. They are validated once, when the decider creates them, and
encoded with orjson; folds read them back as plain dicts (``decode``) because replay speed is
a promise (DESIGN, "Replay") and re-validating every historical event would cost it.
Schema changes bump ``SCHEMA_VERSION``; a fold must keep reading every version it ever wrote.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, Final, Literal, get_args

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION: Final = 1

EventType = Literal[
    "memory.stored",
    "memory.updated",
    "memory.deleted",
    "memory.locked",
    "memory.unlocked",
    "memory.reembedded",
    "embedding.switched",
    "memory.verified",
    "episode.archived",
    "episode.deleted",
    "profile.updated",
    "associations.declared",
    "associations.retracted",
    "standing.declared",
    "recall_precision.set",
    "agent_data.deleted",
    "record.erased",
    "agent.erased",
]

EVENT_TYPES: Final[frozenset[str]] = frozenset(get_args(EventType))


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Scope(_Frozen):
    """Where a write lands. ``agent_id`` is the partition key; '' is the global pool."""

    agent_id: str = Field(min_length=1, max_length=256)
    project_id: str = Field(default="", max_length=256)
    channel: str = Field(default="", max_length=256)


class Actor(_Frozen):
    """Who asked: the authenticated client, the agent it spoke for, and its session."""

    client_id: str = Field(default="anonymous", max_length=256)
    agent_id: str = Field(default="", max_length=256)
    session_id: str = Field(default="", max_length=256)


class Embedding(_Frozen):
    """A vector that travels with its event, so replay never calls the model.

    In the event's JSON only the header appears (model, dim, dtype); the vector itself is the
    record's binary attachment (raw little-endian float32: a column beside the JSON in the
    embedded log, a record header on Kafka). Folds that do not need vectors then never parse
    them, which is most of what keeps replay fast.
    """

    model: str
    dim: int = Field(gt=0)
    dtype: Literal["f32"] = "f32"
    data: bytes = Field(exclude=True, repr=False)

    @classmethod
    def from_vector(cls, model: str, vector: np.ndarray) -> Embedding:
        v = np.ascontiguousarray(vector, dtype="<f4").reshape(-1)
        return cls(model=model, dim=int(v.shape[0]), data=v.tobytes())

    def header(self) -> dict[str, Any]:
        return {"model": self.model, "dim": self.dim, "dtype": self.dtype}

    def vector(self) -> np.ndarray:
        return vector_of(self.data, self.dim)


def vector_of(blob: bytes, dim: int) -> np.ndarray:
    """A record's attached vector, checked against the dimension its header declares."""
    v = np.frombuffer(blob, dtype="<f4")
    if v.shape[0] != dim:
        raise ValueError(f"embedding has {v.shape[0]} components, header says {dim}")
    return v


class Event(_Frozen):
    """The envelope. ``payload`` is a dict whose shape ``type`` names (see ``payloads``)."""

    id: str
    type: EventType
    v: int = SCHEMA_VERSION
    scope: Scope
    actor: Actor
    occurred_at: datetime
    command_id: str
    payload: dict[str, Any]
    # The attached vector (see ``Embedding``); not part of the JSON.
    vector: bytes | None = Field(default=None, exclude=True, repr=False)

    def encode(self) -> bytes:
        return orjson.dumps(self.model_dump())


class AuditRecord(_Frozen):
    """A command that appended no event: refused (with why) or skipped (with the existing id).

    Kept apart from the event log so a rejected input never moves the event log's end offset,
    yet every refusal is answerable later (H4), and a retried command id gets its first
    outcome back (W9) even when that outcome changed nothing.
    """

    id: str
    kind: Literal["refused", "skipped"]
    command: str
    command_id: str
    scope: Scope
    actor: Actor
    occurred_at: datetime
    outcome: dict[str, Any]
    request: dict[str, Any] = Field(default_factory=dict)

    def encode(self) -> bytes:
        return orjson.dumps(self.model_dump())


def new_id() -> str:
    """Event and record ids: random 128-bit, unique without coordination across processes."""
    return uuid.uuid4().hex


def utcnow() -> datetime:
    return datetime.now(UTC)


def decode(value: bytes) -> dict[str, Any]:
    """Read an encoded event or audit record back as a dict (the form folds consume)."""
    decoded: dict[str, Any] = orjson.loads(value)
    return decoded


def parse_time(raw: str) -> datetime:
    """Parse an encoded timestamp (orjson writes RFC 3339); naive stamps are UTC."""
    t = datetime.fromisoformat(raw)
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def mem_ref(memory_id: int) -> str:
    return f"mem:{memory_id}"


def ep_ref(episode_id: int) -> str:
    return f"ep:{episode_id}"


def parse_ref(ref: str | int) -> tuple[Literal["mem", "ep"], int]:
    """Refs are ``mem:<id>`` or ``ep:<id>``; a bare integer is a memory id."""
    if isinstance(ref, bool):
        raise ValueError(f"not a ref: {ref!r}")
    if isinstance(ref, int):
        return "mem", ref
    kind, sep, rest = str(ref).partition(":")
    if not sep:
        kind, rest = "mem", str(ref)
    if kind == "mem" and rest.isdigit():
        return "mem", int(rest)
    if kind == "ep" and rest.isdigit():
        return "ep", int(rest)
    raise ValueError(f"not a ref: {ref!r} (expected mem:<id> or ep:<id>)")
