"""Context tools built on recall: ``context_package`` (A6, seed 001), ``context_packet``
(A7, seed 002) and ``verify_memory`` (the freshness packets read). Also served as
``POST /context/package`` and ``POST /context/packet`` (api/faces/http.py).

The handlers are I/O edges: they embed the query, run recall under the engine's read lock,
gather the facts a decision needs, and hand them to the pure functions in ``api/query/context/``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

from pydantic import Field, StrictInt, StrictStr

from memstream.api.query.context.package import Source, build_package, expand, source_of
from memstream.api.query.context.packet import Hit, Recalled, judge, superseded_refs
from memstream.api.query.recall.gate import GateConfig, keyed_signal
from memstream.api.query.recall.pipeline import RecallRequest, RecallResult, row_of, run_recall
from memstream.api.services.failures import mark_failure
from memstream.api.services.ports import Engine, ReadModels
from memstream.api.services.tokens import TOKENIZER, WORDPIECE
from memstream.api.tools.common import MAX_INT, Flag, Id, Name, envelope
from memstream.api.tools.registry import Caller, Tool, ToolArgs, register
from memstream.api.tools.writes import MemoryIdArgs, memory_owner
from memstream.projections.records import EpisodeRow, MemoryRow
from memstream.projections.scope import ScopeFilter
from memstream.streams import commands as c
from memstream.streams.events import parse_ref, parse_time

Query = Annotated[StrictStr, Field(max_length=100_000)]
F = TypeVar("F")


def _text_of(ref: str, row: MemoryRow | EpisodeRow) -> str:
    return row.content if isinstance(row, MemoryRow) else row.summary


async def _recall(
    engine: Engine,
    scope: ScopeFilter,
    query: str,
    limit: int,
    deep: bool,
    facts: Callable[[RecallResult, GateConfig], F],
) -> F:
    """Recall ``query`` in ``scope`` and, under the same read lock, turn the result into what
    the caller needs (``facts(result, cfg)``): one consistent state for both."""
    vec = model = None
    if engine.settings.recall_retrievers != "lexical":
        [emb] = await engine.embed([query])
        if emb is not None:
            vec, model = emb.vector(), emb.model
    req = RecallRequest(scope=scope, query=query, limit=limit, deep=deep)

    def run() -> F:
        s = engine.settings
        result = run_recall(engine, s, req, vec, model)
        cfg = GateConfig(s.rrf_k, engine.precision.gate_of(scope.agent_id), s.confidence_enabled, s.confidence_ordering)
        return facts(result, cfg)

    return await engine.read(run)


def _empty_query(what: str) -> dict[str, Any]:
    mark_failure("invalid")
    return {"ok": False, "error": f"query is empty: {what} needs a non-whitespace query"}


# -- context_package (A6) ---------------------------------------------------------------------


class ContextPackageArgs(ToolArgs):
    agent_id: Name = Field(description="The agent whose memories are packaged.")
    query: Query | None = Field(default=None, description="Preview: what the package should answer.")
    anchorId: Annotated[StrictStr, Field(max_length=64)] | None = Field(  # seed 001 spells it so
        default=None, description="Refill: expand exactly this anchor ('mem:<id>' / 'ep:<id>') instead."
    )
    maxContextTokens: Annotated[StrictInt, Field(ge=16, le=200_000)] | None = Field(
        default=None, description="Token budget (default MEMSTREAM_CONTEXT_MAX_TOKENS)."
    )
    limit: Annotated[StrictInt, Field(ge=1, le=50)] = Field(default=10, description="Recalled candidates considered.")
    project_id: Name | None = Field(default=None, description="'X' reads X plus the global pool; omitted: all.")
    channel: Name | None = Field(default=None, description="'C' reads C plus the unscoped channel.")
    deep: Flag = Field(default=False, description="Search deeper candidate lists.")


async def context_package(engine: Engine, caller: Caller, args: ContextPackageArgs) -> dict[str, Any]:
    """A6: ``summary[]`` + ``anchors[]`` under ``maxContextTokens`` with ``tokenBudget``; with
    ``anchorId``, exactly that anchor expanded (refill)."""
    budget = args.maxContextTokens or engine.settings.context_max_tokens
    if args.anchorId is not None:
        if args.query is not None:
            mark_failure("invalid")
            return {"ok": False, "error": "give query (preview) or anchorId (refill), not both"}
        return await _refill(engine, args, budget)
    if args.query is None or not args.query.strip():
        return _empty_query("context_package (or pass anchorId to refill)")
    scope = ScopeFilter(args.agent_id, args.project_id, args.channel or None)

    def facts(result: RecallResult, cfg: GateConfig) -> list[Source]:
        out = []
        for cand in result.candidates:
            row = row_of(engine, cand.ref)
            if row is not None:
                out.append(source_of(cand.ref, _text_of(cand.ref, row)))
        return out

    sources: list[Source] = await _recall(engine, scope, args.query.strip(), args.limit, args.deep, facts)
    body = build_package(sources, budget, engine.settings.context_line_tokens, WORDPIECE)
    return {"query": args.query, **body, "tokenizer": TOKENIZER}


async def _refill(engine: Engine, args: ContextPackageArgs, budget: int) -> dict[str, Any]:
    assert args.anchorId is not None
    try:
        kind, ident = parse_ref(args.anchorId)
    except ValueError as exc:
        mark_failure("invalid")
        return {"ok": False, "error": str(exc)}
    ref = f"{kind}:{ident}"
    row = await engine.read(lambda: row_of(engine, ref))
    if row is None or row.agent_id != args.agent_id:
        mark_failure("not_found")
        return {"ok": False, "error": f"anchor {ref} not found for agent {args.agent_id}"}
    return {**expand(source_of(ref, _text_of(ref, row)), budget, WORDPIECE), "tokenizer": TOKENIZER}


# -- context_packet (A7) ----------------------------------------------------------------------


class ContextPacketArgs(ToolArgs):
    agent_id: Name = Field(description="The agent whose memories are asked.")
    query: Query = Field(description="The question; empty or whitespace is refused (HTTP 400).")
    max_items: StrictInt = Field(
        default=8, ge=-MAX_INT - 1, le=MAX_INT, description="Items delivered; clamped to [1, 32] (seed 002)."
    )
    project_id: Name | None = Field(default=None, description="'X' reads X plus the global pool; omitted: all.")
    channel: Name | None = Field(default=None, description="'C' reads C plus the unscoped channel.")
    include_raw: Flag = Field(default=False, description="Whole contents instead of previews.")
    max_item_chars: Annotated[StrictInt, Field(ge=1, le=100_000)] = Field(
        default=800, description="Preview length per item (ignored with include_raw)."
    )


async def context_packet(engine: Engine, caller: Caller, args: ContextPacketArgs) -> dict[str, Any]:
    """A7: exactly one of know / miss, with the delivered items split verified / stale_risk."""
    if not args.query.strip():
        return _empty_query("context_packet")
    scope = ScopeFilter(args.agent_id, args.project_id, args.channel or None)
    limit = min(32, max(1, args.max_items))

    def facts(result: RecallResult, cfg: GateConfig) -> Recalled:
        refs = [cand.ref for cand in result.candidates if row_of(engine, cand.ref) is not None]
        newer = superseded_refs(engine.superseded_providers(), args.agent_id, refs)
        hits = []
        for cand in result.candidates:
            row = row_of(engine, cand.ref)
            if row is None:
                continue
            score, signal = keyed_signal(cand, cfg)
            text = _text_of(cand.ref, row)
            cut = not args.include_raw and len(text) > args.max_item_chars
            version = engine.versions.of(cand.ref)
            visible = [r for r in newer.get(cand.ref, []) if _visible(engine, scope, r)]
            hits.append(
                Hit(
                    ref=cand.ref,
                    content=text[: args.max_item_chars] if cut else text,
                    content_truncated=cut,
                    score=score,
                    signal=signal,
                    version=version.version if version is not None else 1,
                    last_verified_at=parse_time(version.last_verified_at if version is not None else row.created_at),
                    msg_id=row.msg_id if isinstance(row, MemoryRow) else None,
                    superseded_by=tuple(visible),
                    standing=engine.standings.standing_of(cand.ref),
                )
            )
        return Recalled(hits, engine.lexical.count(scope), bool(result.lists.get("lexical")))

    found: Recalled = await _recall(engine, scope, args.query.strip(), limit, False, facts)
    s = engine.settings
    packet = judge(args.query, found, now=datetime.now(UTC), stale_after_s=s.stale_after_s, min_pool=s.packet_min_pool)
    return packet.wire()


def _visible(engine: ReadModels, scope: ScopeFilter, ref: str) -> bool:
    """A superseding record counts only if the asker's scope can read it (R10)."""
    row = row_of(engine, ref)
    return row is not None and row.agent_id == scope.agent_id and scope.admits(row.project_id, row.channel)


# -- verify_memory ----------------------------------------------------------------------------


class VerifyArgs(MemoryIdArgs):
    memory_id: Id = Field(description="The memory re-checked against its source.")
    note: Annotated[StrictStr, Field(max_length=4000)] | None = Field(default=None, description="How it was checked.")


async def verify_memory(engine: Engine, caller: Caller, args: VerifyArgs) -> dict[str, Any]:
    """Mark a memory verified now: freshness (packets' ``stale``) counts from here."""
    owner = await memory_owner(engine, args)
    if owner is None:
        mark_failure("not_found")
        return {"ok": False, "error": f"Memory {args.memory_id} not found"}
    cmd = c.VerifyMemory(**envelope(caller, args, owner), memory_id=args.memory_id, note=args.note)
    out = (await engine.submit(cmd)).outcome
    if out.result != "applied":
        suffix = " or not owned by agent" if args.agent_id else ""
        return {"ok": False, "error": f"Memory {args.memory_id} not found{suffix}"}
    return {"ok": True, "verified_id": args.memory_id}


for _tool in (
    Tool(
        "context_package",
        ContextPackageArgs,
        context_package,
        "memstream: a token-budgeted context package (summary[] + anchors[] + tokenBudget); "
        "pass anchorId to expand one anchor.",
    ),
    Tool(
        "context_packet",
        ContextPacketArgs,
        context_packet,
        "memstream: a know/miss packet: exactly one of know / miss; on a miss, do not answer from memory.",
    ),
    Tool(
        "verify_memory",
        VerifyArgs,
        verify_memory,
        "memstream: mark a memory re-checked against its source (packets count freshness from here).",
        writes=True,
    ),
):
    register(_tool)
