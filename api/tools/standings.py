"""memstream's standing tools (CONTRACTS S1–S2, seed 003): ``declare_standing`` and
``check_contingent``. Recall rows show the current standing (S3, in ``api/tools/recall.py``)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StrictStr

from memstream.api.query.contingent import Carriers, Value, contingent_rows, find_carriers
from memstream.api.services.failures import mark_failure
from memstream.api.services.ports import Engine
from memstream.api.tools.common import Name, WriteArgs, envelope
from memstream.api.tools.registry import Caller, Tool, ToolArgs, register
from memstream.projections.records import MemoryRow
from memstream.projections.scope import ScopeFilter
from memstream.streams import commands as c
from memstream.streams.events import parse_ref


class DeclareStandingArgs(WriteArgs):
    agent_id: Name | None = Field(default=None, description="Owner check: only this agent's memory is touched.")
    ref: Annotated[StrictStr, Field(max_length=64)] = Field(description="'mem:<id>' or 'ep:<id>'.")
    standing: c.Standing = Field(description="fact (stood on) / open / noise / ruled-out (set aside).")
    note: Annotated[StrictStr, Field(max_length=4000)] | None = Field(default=None, description="Why, in a line.")


async def declare_standing(engine: Engine, caller: Caller, args: DeclareStandingArgs) -> dict[str, Any]:
    """S1: the last declaration is current; earlier ones stay in ``history(ref)``."""
    try:
        kind, ident = parse_ref(args.ref)
    except ValueError as exc:
        mark_failure("invalid")
        return {"ok": False, "error": str(exc)}
    ref = f"{kind}:{ident}"
    owner = args.agent_id
    if not owner:
        table = engine.memories.rows if kind == "mem" else engine.episodes.rows
        row = await engine.read(lambda: table.get(ident))
        owner = row.agent_id if row is not None else None
    if owner is None:
        mark_failure("not_found")
        return {"ok": False, "error": f"{ref} not found"}
    cmd = c.DeclareStanding(**envelope(caller, args, owner), ref=ref, standing=args.standing, note=args.note)
    out = (await engine.submit(cmd)).outcome
    if out.result != "applied":
        return {"ok": False, "error": f"{ref} not found or not owned by agent" if args.agent_id else f"{ref} not found"}
    body: dict[str, Any] = {"ok": True, "ref": ref, "standing": args.standing}
    if args.note is not None:
        body["note"] = args.note
    return body


class ValueSpec(ToolArgs):
    value: Annotated[StrictStr, Field(min_length=1, max_length=1000)]
    forms: list[Annotated[StrictStr, Field(min_length=1, max_length=1000)]] | None = Field(
        default=None, max_length=20, description="The spellings to look the value up under (default: the value)."
    )


class CheckContingentArgs(ToolArgs):
    agent_id: Name = Field(description="The agent whose memories and standings are read.")
    values: list[Annotated[StrictStr, Field(min_length=1, max_length=1000)] | ValueSpec] = Field(
        min_length=1, max_length=100, description="Values the agent used: strings or {value, forms[]}."
    )
    refs: list[Annotated[StrictStr, Field(max_length=64)]] | None = Field(
        default=None,
        max_length=1000,
        description="The results the values came from (this turn's). Omitted: the agent's memories in scope.",
    )
    project_id: Name | None = Field(default=None, description="Without refs: 'X' reads X plus the global pool.")
    channel: Name | None = Field(default=None, description="Without refs: 'C' reads C plus the unscoped channel.")


def _values(args: CheckContingentArgs) -> list[Value]:
    out = []
    for v in args.values:
        if isinstance(v, str):
            out.append(Value(v, (v,)))
        else:
            out.append(Value(v.value, tuple(v.forms) if v.forms else (v.value,)))
    return out


async def check_contingent(engine: Engine, caller: Caller, args: CheckContingentArgs) -> dict[str, Any]:
    """S2: each value whose every carrier holds a set-aside standing; nothing when cut."""
    if not args.agent_id:
        mark_failure("invalid")
        return {"ok": False, "error": "agent_id is required"}
    values = _values(args)
    settings = engine.settings

    def query() -> dict[str, Any]:
        corpus: list[tuple[str, str]] = []
        missing: list[str] = []
        truncated = False
        if args.refs is not None:
            for raw in args.refs:
                try:
                    kind, ident = parse_ref(raw)
                except ValueError:
                    missing.append(raw)
                    continue
                ref = f"{kind}:{ident}"
                row = (engine.memories.rows if kind == "mem" else engine.episodes.rows).get(ident)
                if row is None or row.agent_id != args.agent_id:
                    missing.append(raw)
                elif all(ref != r for r, _ in corpus):
                    text = row.content if isinstance(row, MemoryRow) else row.summary
                    corpus.append((ref, text.casefold()))
        else:
            scope = ScopeFilter(args.agent_id, args.project_id, args.channel or None)
            mems = [m for m in engine.memories.of_agent(args.agent_id) if scope.admits(m.project_id, m.channel)]
            eps = [e for e in engine.episodes.of_agent(args.agent_id) if scope.admits(e.project_id, e.channel)]
            if len(mems) + len(eps) > settings.contingent_max_scan:
                truncated = True
            else:
                corpus = [(f"mem:{m.id}", m.content.casefold()) for m in mems]
                corpus += [(f"ep:{e.id}", e.summary.casefold()) for e in eps]

        def carriers_of(v: Value) -> Carriers:
            return find_carriers(v.forms, corpus, settings.contingent_max_carriers)

        rows, unjudged = contingent_rows(values, carriers_of, engine.standings.standing_of, corpus_truncated=truncated)
        body: dict[str, Any] = {
            "contingent": rows,
            "unjudged": unjudged,
            "corpus": {"size": len(corpus), "truncated": truncated},
        }
        if missing:
            body["missing"] = missing
        return body

    result: dict[str, Any] = await engine.read(query)
    return result


for _tool in (
    Tool(
        "declare_standing",
        DeclareStandingArgs,
        declare_standing,
        "memstream: declare a standing on a memory or episode (fact / open / noise / ruled-out); the last is current.",
        writes=True,
    ),
    Tool(
        "check_contingent",
        CheckContingentArgs,
        check_contingent,
        "memstream: which used values rest only on memories the agent set aside (open / noise / ruled-out).",
    ),
):
    register(_tool)
