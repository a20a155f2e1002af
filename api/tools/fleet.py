"""Fleet-wide reads (memstream's own): one recall across several agents.

``recall_fleet`` runs ``recall`` once per named agent and answers the agents' lists side by
side. It does not merge them into one ranking: each agent's scores are fused and gated within
that agent's own pool (and its own recall precision), so a score from one agent says nothing
about a score from another. In ACL mode the caller needs read on every agent it names; one
agent it may not read refuses the whole call (no silently partial answer; docs/security.md).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StrictStr

from memstream.api.services.ports import Engine
from memstream.api.tools.common import Flag, Name
from memstream.api.tools.points import AS_OF_HELP, AsOf
from memstream.api.tools.recall import Limit, answer_recall, recall_args_from
from memstream.api.tools.registry import Caller, Tool, ToolArgs, register


class RecallFleetArgs(ToolArgs):
    agent_ids: list[Name] = Field(min_length=1, max_length=32, description="The agents searched (1–32).")
    query: StrictStr = Field(max_length=100_000, description="What to recall; '' lists recent rows.")
    limit: Limit = Field(default=10, description="Most rows per agent (0–100).")
    deep: Flag = False
    channel: Annotated[StrictStr, Field(max_length=256)] | None = None
    project_id: Annotated[StrictStr, Field(max_length=256)] | None = None
    source_id: StrictStr = ""
    full_content: Flag = False
    time_cue: dict[str, Any] | None = None
    as_of: AsOf | None = Field(default=None, description=AS_OF_HELP)


async def recall_fleet(engine: Engine, caller: Caller, args: RecallFleetArgs) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    for agent in dict.fromkeys(args.agent_ids):  # each agent once, in the order named
        inner = recall_args_from(args, agent_id=agent)
        body, _ = await answer_recall(engine, inner)
        if body.get("ok") is False:
            return {**body, "agent_id": agent}
        results.append({"agent_id": agent, **body})
    return {"results": results, "count": sum(len(r["messages"]) for r in results)}


register(
    Tool(
        "recall_fleet",
        RecallFleetArgs,
        recall_fleet,
        "memstream: recall across several agents; each agent's rows ascend (last is best) in its own list.",
    )
)
