"""The idempotency memo: what a retried command id gets back, in a snapshot layout that never changes."""

from __future__ import annotations

from typing import Any, Final, NamedTuple

from memstream.streams.decision.outcome import Outcome

# Retries are recognised within this many most recent commands per agent. A bound keeps the
# fold's memory flat on a log of millions of commands; it is counted in commands, not in
# wall-clock time, so the window is itself a deterministic function of the log.
COMMAND_MEMO_PER_AGENT: Final = 50_000

_STORED: Final = "memory.stored"
_LOCKED: Final = "memory.locked"
_AGENT_DELETED: Final = "agent_data.deleted"
_ASSOCIATIONS: Final = ("associations.declared", "associations.retracted")
_new: Final = tuple.__new__
# A declaration's report once the agent's key is destroyed (erase_agent_data).
REDACTED_REPORT: Final[dict[str, Any]] = {"redacted": True}


class AppliedMemo(NamedTuple):
    """An applied command answered with its event's record id (or none)."""

    event_type: str
    record_id: int | None

    def outcome(self) -> Outcome:
        return Outcome("applied", id=self.record_id)

    def to_json(self) -> list[Any]:
        return [self.event_type, self.record_id]


class StoredMemo(NamedTuple):
    """``memory.stored``: the new memory's id, whether it carried a vector, whether it was locked."""

    record_id: int
    embedded: bool
    locked: bool

    def outcome(self) -> Outcome:
        detail: dict[str, Any] = {"embedded": self.embedded}
        if self.locked:
            detail["locked"] = True
        return Outcome("applied", id=self.record_id, detail=detail)

    def to_json(self) -> list[Any]:
        return [_STORED, self.record_id, self.embedded, self.locked]


class LockSkipMemo(NamedTuple):
    """A duplicate store with ``lock: true``: the existing memory was locked, the store skipped."""

    record_id: int
    reason: str

    def outcome(self) -> Outcome:
        return Outcome("skipped", id=self.record_id, reason=self.reason, detail={"locked": True})

    def to_json(self) -> list[Any]:
        return [_LOCKED, self.record_id, self.reason]


class AgentDeletedMemo(NamedTuple):
    """``agent_data.deleted``: how much went (``profile`` is 1 or 0) and how many locked memories stayed."""

    memories: int
    episodes: int
    profile: int
    kept_locked: int

    def outcome(self) -> Outcome:
        detail = {
            "memories": self.memories,
            "episodes": self.episodes,
            "profile": self.profile,
            "kept_locked": self.kept_locked,
        }
        return Outcome("applied", detail=detail)

    def to_json(self) -> list[Any]:
        return [_AGENT_DELETED, None, list(self)]


class AssociationsMemo(NamedTuple):
    """A declaration or retraction that changed something: its report is the caller's answer."""

    event_type: str
    report: dict[str, Any]

    def outcome(self) -> Outcome:
        return Outcome("applied", detail={"report": self.report})

    def to_json(self) -> list[Any]:
        return [self.event_type, None, self.report]


EventMemo = AppliedMemo | StoredMemo | LockSkipMemo | AgentDeletedMemo | AssociationsMemo
# A refused or skipped command's outcome as its audit record holds it (``Outcome.to_dict``).
AuditedMemo = dict[str, Any]
Memo = EventMemo | AuditedMemo


def memo_of_event(t: str, p: dict[str, Any]) -> EventMemo:
    """What a retry needs of an applied command's first event, kept small: the fold stores one
    per recent command, and computing a full outcome for each would dominate replay time.

    The fold builds one memo per event, so memos are made with ``tuple.__new__`` directly, which
    skips the Python-level ``__new__`` a NamedTuple has (half of a memo's cost)."""
    if t == "memory.stored":
        return _new(StoredMemo, (p["id"], p.get("embedding") is not None, bool(p.get("locked"))))
    if t == "agent_data.deleted":
        counts = (len(p["memory_ids"]), len(p["episode_ids"]), 1 if p["profile"] else 0, len(p["kept_locked"]))
        return _new(AgentDeletedMemo, counts)
    if t == "memory.locked" and p.get("skipped"):
        return _new(LockSkipMemo, (p["id"], p["skipped"]))
    if t == "associations.declared" or t == "associations.retracted":
        return _new(AssociationsMemo, (t, p.get("report", REDACTED_REPORT)))
    return _new(AppliedMemo, (t, p.get("id")))


def outcome_of_memo(memo: Memo) -> Outcome:
    """The caller's outcome from a memo: audited outcomes are stored whole, applied ones are
    re-derived, so a replayed log answers a retry exactly as the live decision answered."""
    if isinstance(memo, dict):
        return Outcome.from_dict(memo)
    return memo.outcome()


def memo_to_json(memo: Memo) -> list[Any] | AuditedMemo:
    return memo if isinstance(memo, dict) else memo.to_json()


def memo_from_json(raw: list[Any] | AuditedMemo) -> Memo:
    """The inverse of ``memo_to_json``, for snapshots of any version that wrote this layout."""
    if isinstance(raw, dict):
        return raw
    t = raw[0]
    if t == _STORED:
        return StoredMemo(raw[1], raw[2], raw[3])
    if t == _AGENT_DELETED:
        memories, episodes, profile, kept_locked = raw[2]
        return AgentDeletedMemo(memories, episodes, profile, kept_locked)
    if t == _LOCKED and len(raw) == 3:
        return LockSkipMemo(raw[1], raw[2])
    if t in _ASSOCIATIONS:
        return AssociationsMemo(t, raw[2])
    return AppliedMemo(t, raw[1])
