"""``association_graph`` (memstream's own): an agent's whole declared graph, for drawing.

``traverse`` answers the neighbourhood of one named entity; a person looking at an agent's
memory wants the whole picture first (the console draws it: docs/console.md). The answer
holds the entities (names, aliases, the live records that mention them), every relation
between entities and records, and a short preview of each record named, cut at ``limit``
entities (the oldest first) with what was left out counted. Only this agent's live records
are named, as ``traverse`` names them.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StrictInt

from memstream.api.query.recall.pipeline import row_of
from memstream.api.services.ports import Engine
from memstream.api.tools.common import Name
from memstream.api.tools.points import AS_OF_HELP, AsOf, state_at
from memstream.api.tools.registry import Caller, Tool, ToolArgs, register
from memstream.projections.associations import AgentGraph
from memstream.projections.records import MemoryRow
from memstream.projections.scope import ScopeFilter

PREVIEW_CHARS = 160


class GraphArgs(ToolArgs):
    agent_id: Name = Field(description="The agent whose graph is read.")
    limit: Annotated[StrictInt, Field(ge=1, le=2000)] = Field(default=300, description="Most entities (oldest first).")
    channel: Name | None = None
    project_id: Name | None = None
    as_of: AsOf | None = Field(default=None, description=AS_OF_HELP)


def _node(node: tuple[str, int]) -> dict[str, Any]:
    kind, ident = node
    return {"entity": ident} if kind == "entity" else {"ref": f"{kind}:{ident}"}


def _preview(row: Any) -> str:
    text = row.content if isinstance(row, MemoryRow) else f"[Episode] {row.summary}"
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "…"


def graph_of(models: Any, g: AgentGraph | None, agent_id: str, scope: ScopeFilter, limit: int) -> dict[str, Any]:
    """The drawable graph of one agent's declarations (``models``: the read models it is read from)."""
    records: dict[str, str] = {}

    def live(ref: str) -> bool:
        if ref in records:
            return True
        row = row_of(models, ref)
        if row is None or row.agent_id != agent_id or not scope.admits(row.project_id, row.channel):
            return False
        records[ref] = _preview(row)
        return True

    body: dict[str, Any] = {"agent_id": agent_id, "entities": [], "relations": [], "records": records}
    if g is None:
        return {**body, "count": 0}
    visible = [e for _, e in sorted(g.entities.items()) if scope.admits(e.project, e.channel)]
    kept = visible[:limit]
    kept_ids = {e.id for e in kept}
    for e in kept:
        entry: dict[str, Any] = {"id": e.id, "name": e.name, "created_at": e.created_at}
        if e.aliases:
            entry["aliases"] = g.aliases_of(e.id)
        entry["mentions"] = sorted(r for r in g.mentions.get(e.id, ()) if live(r))
        body["entities"].append(entry)
    for _, r in sorted(g.relations.items()):
        if not scope.admits(r.project, r.channel):
            continue
        ends = (r.subject, r.object)
        if any(kind == "entity" and ident not in kept_ids for kind, ident in ends):
            continue
        if any(kind != "entity" and not live(f"{kind}:{ident}") for kind, ident in ends):
            continue
        rel = {
            "id": r.id,
            "subject": _node(r.subject),
            "predicate": r.predicate,
            "object": _node(r.object),
            "declared_by": r.declared_by,
            "declared_at": r.declared_at,
        }
        if r.anchor_ref:
            rel["anchor_ref"] = r.anchor_ref
        body["relations"].append(rel)
    body["count"] = len(kept)
    if len(visible) > len(kept):
        body["entities_omitted"] = len(visible) - len(kept)
    return body


async def association_graph(engine: Engine, caller: Caller, args: GraphArgs) -> dict[str, Any]:
    if not args.agent_id:
        return {"ok": False, "error": "agent_id is required"}
    src = await state_at(engine, args.as_of)
    if isinstance(src, dict):
        return src
    scope = ScopeFilter(args.agent_id, args.project_id, args.channel or None)
    result: dict[str, Any] = await src.read(
        lambda: graph_of(src, src.associations.graph(args.agent_id), args.agent_id, scope, args.limit)
    )
    return result


register(
    Tool(
        "association_graph",
        GraphArgs,
        association_graph,
        "memstream: an agent's whole declared graph (entities, relations, mentions, record previews), to draw.",
    )
)
