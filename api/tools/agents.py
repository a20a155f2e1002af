"""``list_agents`` (memstream's own): the agents of the store with their figures, for operators.

An operator of a fleet needs the list before anything else (the console's first view). The
answer is scoped to the caller: in ACL mode it names only the agents the caller's grants let it
read, so it needs no grant of its own and tells a client nothing about agents it may not read
(docs/security.md). Last activity is the newest event that touched one of the agent's live
records (its offset and time): deleted records and agent-wide events (profile, precision) do not
move it, since the read models keep offsets per record only.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StrictInt, StrictStr

from memstream.api.services.acl import READ, AclConfig, Demand
from memstream.api.services.ports import Engine, ReadModels
from memstream.api.tools.points import AS_OF_HELP, AsOf, state_at
from memstream.api.tools.registry import Caller, Tool, ToolArgs, register
from memstream.streams.events import decode
from memstream.streams.log.port import resolved

LIST_AGENTS_CAP = 10_000


class ListAgentsArgs(ToolArgs):
    prefix: Annotated[StrictStr, Field(max_length=256)] = Field(
        default="", description="Only agents whose id starts with this ('' : every agent)."
    )
    limit: StrictInt = Field(default=1000, ge=1, le=LIST_AGENTS_CAP, description="Most agents (by id).")
    as_of: AsOf | None = Field(default=None, description=AS_OF_HELP)


def may_read(acl: AclConfig | None, caller: Caller, agent_id: str) -> bool:
    """Whether ``caller`` may read ``agent_id`` (anyone may without an ACL)."""
    if acl is None:
        return True
    client = acl.client(caller.client_id) if caller.authenticated else None
    return client is not None and client.permits(Demand(agent_id, READ))


def _figures(models: ReadModels, agent_id: str) -> tuple[dict[str, Any], int | None]:
    """An agent's counts, and the offset of the newest event touching one of its live records."""
    mem = models.memories.by_agent.get(agent_id, {})
    eps = models.episodes.by_agent.get(agent_id, {})
    refs = [f"mem:{i}" for i in mem] + [f"ep:{i}" for i in eps]
    last = max((offs[-1] for ref in refs if (offs := models.history.of(ref))), default=None)
    row = {
        "agent_id": agent_id,
        "memories": len(mem),
        "episodes": len(eps),
        "profile": agent_id in models.profiles.rows,
    }
    return row, last


async def list_agents(engine: Engine, caller: Caller, args: ListAgentsArgs) -> dict[str, Any]:
    src = await state_at(engine, args.as_of)
    if isinstance(src, dict):
        return src

    def query() -> tuple[list[tuple[dict[str, Any], int | None]], bool]:
        names = set(src.memories.by_agent) | set(src.episodes.by_agent) | set(src.profiles.rows)
        picked = [a for a in sorted(names) if a.startswith(args.prefix) and may_read(engine.acl, caller, a)]
        return [_figures(src, a) for a in picked[: args.limit]], len(picked) > args.limit

    rows, more = await src.read(query)
    offsets = sorted({last for _, last in rows if last is not None})
    events = {r.offset: r for r in await resolved(engine.log.read_offsets(offsets))} if offsets else {}
    agents = []
    for row, last in rows:
        rec = events.get(last) if last is not None else None
        if rec is None:
            row["last_event"] = None
        else:
            ev = decode(rec.value)
            row["last_event"] = {
                "offset": rec.offset,
                "partition": rec.partition,
                "type": ev["type"],
                "at": ev["occurred_at"],
            }
        agents.append(row)
    body: dict[str, Any] = {"agents": agents, "count": len(agents)}
    if more:
        body["more"] = True
    return body


register(
    Tool(
        "list_agents",
        ListAgentsArgs,
        list_agents,
        "memstream: the agents the caller may read, by id, with counts (memories, episodes) and last activity.",
    )
)
