"""A decider's answer (events to append, or the audit record of a refusal or skip) and its builders."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memstream.streams import commands as c
from memstream.streams.decision.limits import Limits
from memstream.streams.decision.memo import memo_of_event, outcome_of_memo
from memstream.streams.decision.outcome import Outcome
from memstream.streams.events import AuditRecord, Embedding, Event, EventType


@dataclass(slots=True)
class Decision:
    outcome: Outcome
    events: list[Event] = field(default_factory=list)
    audit: AuditRecord | None = None


@dataclass(frozen=True, slots=True)
class DecideContext:
    partition: int
    limits: Limits
    new_id: Callable[[], str]  # event/record ids; injected so tests can make them deterministic


def _event(cmd: c.Command, ctx: DecideContext, type_: EventType, payload: dict[str, Any]) -> Event:
    emb: Embedding | None = getattr(cmd, "embedding", None)
    return Event(
        vector=emb.data if emb is not None and payload.get("embedding") is not None else None,
        id=ctx.new_id(),
        type=type_,
        scope=cmd.scope,
        actor=cmd.actor,
        occurred_at=cmd.received_at,
        command_id=cmd.command_id,
        payload=payload,
    )


def _audit(cmd: c.Command, ctx: DecideContext, outcome: Outcome) -> AuditRecord:
    request = cmd.model_dump(exclude={"command_id", "scope", "actor", "received_at", "embedding"}, mode="json")
    for key in ("content", "summary"):
        if isinstance(request.get(key), str) and len(request[key]) > 512:
            request[key] = request[key][:512] + f"…[{len(request[key]) - 512} more chars]"
    return AuditRecord(
        id=ctx.new_id(),
        kind="skipped" if outcome.result == "skipped" else "refused",
        command=cmd.name,
        command_id=cmd.command_id,
        scope=cmd.scope,
        actor=cmd.actor,
        occurred_at=cmd.received_at,
        outcome=outcome.to_dict(),
        request=request,
    )


def refuse(cmd: c.Command, ctx: DecideContext, error: str, reason: str) -> Decision:
    out = Outcome("rejected", reason=reason, error=error)
    return Decision(out, audit=_audit(cmd, ctx, out))


def skip(
    cmd: c.Command, ctx: DecideContext, existing: int, reason: str, detail: dict[str, Any] | None = None
) -> Decision:
    out = Outcome("skipped", id=existing, reason=reason, detail=detail or {})
    return Decision(out, audit=_audit(cmd, ctx, out))


def skip_quiet(cmd: c.Command, ctx: DecideContext, report: dict[str, Any]) -> Decision:
    """A skip that names no existing record, answered with ``report`` (a declaration that changed nothing)."""
    out = Outcome("skipped", detail={"report": report})
    return Decision(out, audit=_audit(cmd, ctx, out))


def accept(cmd: c.Command, ctx: DecideContext, *events: tuple[EventType, dict[str, Any]]) -> Decision:
    evs = [_event(cmd, ctx, t, p) for t, p in events]
    return Decision(outcome_of_memo(memo_of_event(evs[0].type, evs[0].payload)), events=evs)
