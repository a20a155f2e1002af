"""Erase tools (issue 16): crypto-shred a memory or episode, or an agent's data (all, or one
source's). Unlike delete, nothing of the content survives anywhere memstream manages; the
log and the audit keep that an erasure happened (who, when, why, what kind). docs/erasure.md.

ACL: ``erase_memory`` needs write access to the agent, the right delete needs too (the agent's
operator answers its data subjects' requests); ``erase_agent_data`` needs an admin grant, as
``delete_agent_data`` does, since it takes everything of an agent at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from pydantic import Field, StrictStr

from memstream.api.services.failures import mark_failure
from memstream.api.services.ports import Engine, Erasing
from memstream.api.tools.common import Id, Name, WriteArgs, envelope
from memstream.api.tools.registry import Caller, Tool, register
from memstream.streams import commands as c
from memstream.streams.commands import MAX_ERASE_REASON
from memstream.streams.decision.whole_agent import names_every_record
from memstream.streams.events import parse_ref

REFS_INLINE = 1_000  # more refs than this in an answer are made on a thread (``_report``)

Reason = StrictStr


class EraseMemoryArgs(WriteArgs):
    agent_id: Name = Field(min_length=1, description="The agent the record belongs to.")
    memory_id: Id | None = Field(default=None, description="The memory to erase (or give ref).")
    ref: Name | None = Field(default=None, description="mem:<id> or ep:<id>: the record to erase.")
    reason: Reason = Field(
        min_length=1,
        max_length=MAX_ERASE_REASON,
        description="Why (kept in the clear in the log and the audit: name no one).",
    )


class EraseAgentArgs(WriteArgs):
    agent_id: Name = Field(min_length=1, description="The agent whose data is erased.")
    reason: Reason = Field(
        min_length=1,
        max_length=MAX_ERASE_REASON,
        description="Why (kept in the clear in the log and the audit: name no one).",
    )
    source: Name | None = Field(
        default=None, min_length=1, description="Only the memories stored with this source id."
    )


def _unavailable() -> dict[str, Any]:
    mark_failure("unavailable")
    return {"ok": False, "error": "erasure is not available on this engine (it holds no key store)"}


async def _report(done: dict[str, Any], agent_id: str) -> dict[str, Any]:
    out = done["outcome"]
    if out.result != "applied":
        mark_failure(out.error or "rejected")
        return {"ok": False, "error": out.reason or "rejected"}
    p = done["payload"]
    # The ids: the event's lists, or, for an erasure of everything of an agent (whose event
    # names none), what the read models dropped (none known on a retry after a restart: the
    # counts still come from the event).
    memory_ids, episode_ids = done["dropped"] or ((), ())
    if names_every_record(p):
        memories, episodes = p["memories"], p["episodes"]
    else:
        memories, episodes = len(p["memory_ids"]), len(p["episode_ids"])
    # An agent's 100k refs are made on a thread: on the event loop they held every other
    # agent's call that the server was answering (a Kafka worker's loop also decides writes).
    many = memories + episodes > REFS_INLINE
    refs = await asyncio.to_thread(_refs, memory_ids, episode_ids) if many else _refs(memory_ids, episode_ids)
    return {
        "ok": True,
        "agent_id": agent_id,
        "kind": p["kind"],
        "erased": refs,
        "erased_memories": memories,
        "erased_episodes": episodes,
        "erased_profile": p["profile"],
        "locked_overridden": [f"mem:{i}" for i in p["locked_overridden"]],
        "keys_destroyed": done["keys_destroyed"],
        "offset": done["offset"],
        "unreachable": done["unreachable"],
    }


def _refs(memory_ids: Iterable[int], episode_ids: Iterable[int]) -> list[str]:
    return [f"mem:{i}" for i in sorted(memory_ids)] + [f"ep:{i}" for i in sorted(episode_ids)]


async def erase_memory(engine: Engine, caller: Caller, args: EraseMemoryArgs) -> dict[str, Any]:
    if not isinstance(engine, Erasing):
        return _unavailable()
    if (args.memory_id is None) == (args.ref is None):
        return {"ok": False, "error": "give exactly one of memory_id and ref"}
    if not args.reason.strip():
        return {"ok": False, "error": "reason is required"}
    if args.ref is not None:
        try:
            kind, ident = parse_ref(args.ref)
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}
    else:
        kind, ident = "mem", int(args.memory_id or 0)
    cmd = c.EraseMemory(**envelope(caller, args, args.agent_id), kind=kind, record_id=ident, reason=args.reason)
    return await _report(await engine.erase(cmd), args.agent_id)


async def erase_agent_data(engine: Engine, caller: Caller, args: EraseAgentArgs) -> dict[str, Any]:
    if not isinstance(engine, Erasing):
        return _unavailable()
    if not args.reason.strip():
        return {"ok": False, "error": "reason is required"}
    cmd = c.EraseAgentData(**envelope(caller, args, args.agent_id), reason=args.reason, source=args.source)
    return await _report(await engine.erase(cmd), args.agent_id)


for _tool in (
    Tool(
        "erase_memory",
        EraseMemoryArgs,
        erase_memory,
        "Erase a memory or episode for good (its keys are destroyed; a lock does not stop it). "
        "History keeps that it was erased, not what.",
        writes=True,
    ),
    Tool(
        "erase_agent_data",
        EraseAgentArgs,
        erase_agent_data,
        "Erase everything of an agent (or only one source's memories) for good, locked memories included.",
        writes=True,
        admin=True,
    ),
):
    register(_tool)
