"""``recall`` and ``recall_with_context``: CPersona 2.6's arguments and response shapes.

Rows come back in ascending order, the best LAST (R1). ``match_reason`` is present on scored
rows and absent on unscored ones (cascade fill, the profile row) (R3).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import Field, StrictInt, StrictStr

from memstream.api.query.recall.fusion import Candidate
from memstream.api.query.recall.gate import GateConfig, keyed_signal
from memstream.api.query.recall.pipeline import RecallRequest, RecallResult, recent_rows, run_recall
from memstream.api.services.failures import mark_failure
from memstream.api.services.ports import Engine, Reads
from memstream.api.services.settings import Settings
from memstream.api.tools.common import Flag, SessionKey
from memstream.api.tools.points import AS_OF_HELP, AsOf, state_at, time_bounds
from memstream.api.tools.registry import Caller, Tool, ToolArgs, register
from memstream.api.tools.sanitize import InputError
from memstream.projections.records import EpisodeRow, MemoryRow
from memstream.projections.scope import ScopeFilter

Limit = Annotated[StrictInt, Field(ge=0, le=100)]


class RecallArgs(ToolArgs):
    agent_id: StrictStr = Field(description="The agent whose memories are searched (exact).")
    query: StrictStr = Field(max_length=100_000, description="What to recall; '' lists recent rows.")
    limit: Limit = Field(default=10, description="Most rows to return (0–100).")
    deep: Flag = Field(default=False, description="Search deeper candidate lists.")
    channel: Annotated[StrictStr, Field(max_length=256)] | None = Field(
        default=None, description="'C' reads C plus the unscoped channel; omitted or '' reads all."
    )
    exclude_contents: list[StrictStr] | None = Field(
        default=None, description="Rows whose content equals (or, from 32 chars, starts with) one of these."
    )
    session_key: SessionKey = ""
    project_id: Annotated[StrictStr, Field(max_length=256)] | None = Field(
        default=None, description="'X' reads X plus the global pool; '' the global pool; omitted: all."
    )
    source_id: StrictStr = Field(default="", description="Only memories whose source id is this.")
    full_content: Flag = Field(default=False, description="Whole contents instead of previews.")
    trace: Flag = Field(default=False, description="Include what each retriever returned.")
    time_cue: dict[str, Any] | None = Field(default=None, description="{after?, before?}: ISO-8601 bounds.")
    as_of: AsOf | None = Field(default=None, description=AS_OF_HELP)


def _preview(text: str, query: str, preview: int, excerpt_chars: int) -> dict[str, Any]:
    """A long row's preview: its head, plus an excerpt around the first query term it holds."""
    out: dict[str, Any] = {"content": text[:preview], "content_truncated": True, "content_len": len(text)}
    low = text.lower()
    at = -1
    for term in sorted({t for t in query.lower().split() if len(t) > 2}, key=len, reverse=True):
        at = low.find(term)
        if at >= 0:
            break
    if at >= 0:
        start = max(0, at - excerpt_chars // 4)
        out["excerpt"] = text[start : start + excerpt_chars]
        out["excerpt_basis"] = "query_terms"
    else:
        out["excerpt"] = text[:excerpt_chars]
        out["excerpt_basis"] = "head"
    return out


def _message(engine: Reads, ref: str, args: RecallArgs) -> dict[str, Any] | None:
    kind, _, ident = ref.partition(":")
    settings = engine.settings
    if kind == "mem":
        m: MemoryRow | None = engine.memories.rows.get(int(ident))
        if m is None:
            return None
        msg: dict[str, Any] = {
            "content": m.content,
            "ref": ref,
            "source": m.source,
            "timestamp": m.timestamp or m.created_at,
        }
        if m.msg_id:
            msg["id"] = m.msg_id
        text = m.content
    else:
        e: EpisodeRow | None = engine.episodes.rows.get(int(ident))
        if e is None:
            return None
        text = f"[Episode] {e.summary}"
        msg = {"content": text, "ref": ref, "source": {"System": "episode"}, "timestamp": e.start_time or e.created_at}
    if not args.full_content and settings.recall_preview_chars and len(text) > settings.recall_preview_chars:
        msg.update(_preview(text, args.query, settings.recall_preview_chars, settings.recall_excerpt_chars))
    # S3: the current standing, only when one was declared (undeclared rows are unchanged).
    standing = engine.standings.standing_of(ref)
    if standing is not None:
        msg["standing"] = standing
    return msg


def _match_reason(c: Candidate, cfg: GateConfig) -> dict[str, Any] | None:
    score, signal = keyed_signal(c, cfg)
    if signal is None:
        return None
    reason: dict[str, Any] = {"signal": signal, "score": score}
    if c.cosine is not None:
        reason["cosine"] = c.cosine
    if c.rrf is not None:
        reason["rrf"] = c.rrf
    if c.rsf is not None:
        reason["rsf"] = c.rsf
    if c.prior is not None:
        reason["prior"] = c.prior
    return reason


def _scope(args: RecallArgs) -> ScopeFilter:
    return ScopeFilter(args.agent_id, args.project_id, args.channel or None)


async def answer_recall(engine: Engine, args: RecallArgs) -> tuple[dict[str, Any], RecallResult | None]:
    if not args.agent_id:
        mark_failure("invalid")
        return {"ok": False, "error": "agent_id is required", "messages": []}, None
    try:
        after, before = time_bounds(args.time_cue)
    except InputError as exc:
        mark_failure("invalid")
        return {"ok": False, "error": str(exc), "messages": []}, None
    req = RecallRequest(
        scope=_scope(args),
        query=args.query.strip(),
        limit=args.limit,
        deep=args.deep,
        source_id=args.source_id,
        exclude=tuple(e.lower() for e in (args.exclude_contents or [])),
        after=after,
        before=before,
    )
    settings = engine.settings
    if args.limit == 0:
        return {"messages": []}, None
    state = await state_at(engine, args.as_of)
    if isinstance(state, dict):
        return {**state, "messages": []}, None
    return await _recall_from(state, settings, req, args)


async def _recall_from(
    state: Reads, settings: Settings, req: RecallRequest, args: RecallArgs
) -> tuple[dict[str, Any], RecallResult | None]:
    """Every read answered from ``state``: the state at ``as_of``, or now."""
    if not req.query:
        refs = await state.read(lambda: recent_rows(state, req))
        rows = await state.read(lambda: [_message(state, r, args) for r in reversed(refs)])
        return {"messages": [r for r in rows if r is not None]}, None

    vec = None
    model = None
    if settings.recall_retrievers != "lexical":
        [emb] = await state.embed([req.query], agent_id=req.scope.agent_id)
        if emb is not None:
            vec, model = emb.vector(), emb.model

    def query() -> tuple[dict[str, Any], RecallResult]:
        result = run_recall(state, settings, req, vec, model)
        cfg = GateConfig(
            settings.rrf_k,
            state.precision.gate_of(req.scope.agent_id),
            settings.confidence_enabled,
            settings.confidence_ordering,
        )
        best_first: list[dict[str, Any]] = []
        for c in result.candidates:
            msg = _message(state, c.ref, args)
            if msg is None:
                continue
            reason = _match_reason(c, cfg)
            if reason is not None:
                msg["match_reason"] = reason
            if c.confidence is not None:
                msg["confidence"] = c.confidence
            best_first.append(msg)
        if result.profile is not None:
            best_first.append({"content": f"[Profile] {result.profile}", "source": {"System": "profile"}})
        body: dict[str, Any] = {"messages": list(reversed(best_first[: args.limit]))}
        if result.gate_fallback:
            body["gate_fallback"] = True
        if args.trace:
            body["trace"] = {"lists": result.lists, "mode": settings.recall_mode}
        return body, result

    return await state.read(query)


async def recall(engine: Engine, caller: Caller, args: RecallArgs) -> dict[str, Any]:
    body, _ = await answer_recall(engine, args)
    return body


# -- recall_with_context ----------------------------------------------------------------------


class ContextMessage(ToolArgs):
    role: StrictStr
    content: StrictStr
    name: StrictStr | None = None
    user_id: StrictStr | None = None
    timestamp: StrictStr | None = None


class RecallWithContextArgs(ToolArgs):
    agent_id: StrictStr = Field(description="The agent whose memories are searched.")
    query: StrictStr = Field(max_length=100_000, description="What to recall.")
    external_context: list[ContextMessage] | None = Field(
        default=None, description="The caller's messages, merged chronologically with recalled rows."
    )
    limit: Limit = 10
    channel: Annotated[StrictStr, Field(max_length=256)] | None = None
    deep: Flag = False
    project_id: Annotated[StrictStr, Field(max_length=256)] | None = None
    source_id: StrictStr = ""
    full_content: Flag = False
    session_key: SessionKey = ""


def instant(raw: Any) -> datetime | None:
    """The instant a stamp names: any UTC offset compares correctly; naive means UTC;
    missing or unparseable names none."""
    if not isinstance(raw, str) or not raw.strip():
        return None
    try:
        t = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def chronological(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """R11: undated messages first, in merge order; then dated ones by instant (stable)."""
    undated = [m for m in messages if instant(m.get("timestamp")) is None]
    dated = [m for m in messages if instant(m.get("timestamp")) is not None]
    dated.sort(key=lambda m: instant(m["timestamp"]))  # type: ignore[arg-type, return-value]
    return undated + dated


def recall_args_from(args: ToolArgs, **overrides: Any) -> RecallArgs:
    """The plain recall a composite recall tool runs: every argument the two share, as given."""
    shared = args.model_dump(include=set(RecallArgs.model_fields) - set(overrides))
    return RecallArgs(**shared, **overrides)


async def recall_with_context(engine: Engine, caller: Caller, args: RecallWithContextArgs) -> dict[str, Any]:
    inner = recall_args_from(args)
    body, _ = await answer_recall(engine, inner)
    if body.get("ok") is False:
        return body
    recalled = body["messages"]
    external = [m.model_dump(exclude_none=True) for m in (args.external_context or [])]
    merged = chronological(recalled + external)
    out: dict[str, Any] = {"messages": merged, "recalled": len(recalled), "external": len(external)}
    if body.get("gate_fallback"):
        out["gate_fallback"] = True
    return out


for _tool in (
    Tool("recall", RecallArgs, recall, "Recall memories relevant to a query. Rows ascend: the last is the best."),
    Tool(
        "recall_with_context",
        RecallWithContextArgs,
        recall_with_context,
        "Recall, merged chronologically with the caller's own messages.",
    ),
):
    register(_tool)
