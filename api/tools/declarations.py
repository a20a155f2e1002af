"""One association declaration submitted, and its report: what ``declare_associations`` runs, and
``store(associations=…)`` runs anchored on the stored record."""

from __future__ import annotations

from typing import Any, Final

from memstream.api.services.ports import Engine
from memstream.api.tools.common import WriteArgs, envelope
from memstream.api.tools.registry import Caller
from memstream.streams import commands as c
from memstream.streams.events import new_id

EMPTY_REPORT: Final[dict[str, Any]] = {"entities": [], "mentions": 0, "relations": [], "dropped": []}


async def run_declaration(
    engine: Engine,
    caller: Caller,
    args: WriteArgs,
    agent_id: str,
    project_id: str | None,
    channel: str | None,
    associations: dict[str, Any] | None,
    anchor_ref: str,
    retract: dict[str, Any] | None,
    command_id: str | None = None,
) -> dict[str, Any]:
    """Submit one declaration; the caller's report (CPersona's shape), or a refusal."""
    env = envelope(caller, args, agent_id, project_id, channel)
    if command_id is not None:
        env["command_id"] = command_id
    cmd = c.DeclareAssociations(
        **env, associations=associations or None, anchor_ref=anchor_ref, retract=retract or None
    )
    out = (await engine.submit(cmd)).outcome
    if out.result == "rejected":
        return {"ok": False, "error": out.reason or "rejected", "result": "rejected", **EMPTY_REPORT}
    report: dict[str, Any] = out.detail.get("report") or dict(EMPTY_REPORT)
    return {"ok": True, "result": "declared", **report}


async def store_rider(
    engine: Engine,
    caller: Caller,
    args: WriteArgs,
    agent_id: str,
    project_id: str | None,
    channel: str | None,
    memory_id: int,
    associations: dict[str, Any],
) -> dict[str, Any]:
    """``store(associations=…)``: the declaration anchored on the stored (or echoed) record. Its
    report rides on the store answer; a malformed item is dropped there, never the memory."""
    command_id = f"{args.command_id}:associations" if args.command_id else new_id()
    body = await run_declaration(
        engine, caller, args, agent_id, project_id, channel, associations, f"mem:{memory_id}", None, command_id
    )
    return {k: body[k] for k in ("entities", "mentions", "relations", "dropped")}
