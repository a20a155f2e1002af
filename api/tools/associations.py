"""``declare_associations``, ``traverse`` and ``reconstruct``: CPersona 2.6's arguments and
response shapes (A1–A5, A8).

Declarations are decided by the pure decider (``streams/decision/associations/``) and folded into the
association graph (``projections/associations.py``); ``store(associations=…)`` runs the same
declaration anchored on the stored record. Reads compose pure functions over the projections
under the engine's read lock; the decisions themselves live in ``api/query/reconstruct/core.py``.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Annotated, Any, Final, Literal

import numpy as np
import orjson
from pydantic import Field, StrictInt, StrictStr

from memstream.api.query.recall.pipeline import RecallRequest, row_of, run_recall
from memstream.api.query.reconstruct import core
from memstream.api.services.failures import mark_failure
from memstream.api.services.ports import Engine, ReadModels, Reads
from memstream.api.services.settings import Settings
from memstream.api.services.tokens import count_tokens
from memstream.api.tools.common import MAX_INT, Flag, Name, SessionKey, WriteArgs
from memstream.api.tools.declarations import EMPTY_REPORT, run_declaration
from memstream.api.tools.points import AS_OF_HELP, AsOf, state_at, time_bounds
from memstream.api.tools.registry import Caller, Tool, ToolArgs, register
from memstream.api.tools.sanitize import InputError
from memstream.projections.associations import Readable, query_terms, record_links, traverse
from memstream.projections.records import EpisodeRow, MemoryRow
from memstream.projections.scope import ScopeFilter
from memstream.streams.events import parse_time

# -- declare_associations -------------------------------------------------------------------------


class DeclareArgs(WriteArgs):
    agent_id: StrictStr = Field(description="The agent whose graph the declaration belongs to.")
    associations: dict[str, Any] | None = Field(
        default=None,
        description=(
            "{entities: [{name, aliases?}], relations: [{subject, predicate, object}]}. Endpoints are entity "
            "names or record refs (mem:<id> / ep:<id>). Nothing is extracted or inferred."
        ),
    )
    anchor_ref: StrictStr = Field(
        default="", description="The record the declaration rests on: every entity declared is mentioned by it."
    )
    retract: dict[str, Any] | None = Field(
        default=None,
        description=(
            "{relations: [ids], mentions: [{entity, ref}], entities: [ids]}: the only removal. "
            "memstream: retracting an entity takes its aliases, mentions and relations."
        ),
    )
    channel: Name | None = None
    project_id: Name | None = None


async def declare_associations(engine: Engine, caller: Caller, args: DeclareArgs) -> dict[str, Any]:
    if not args.agent_id:
        mark_failure("invalid")
        return {"ok": False, "error": "agent_id is required", "result": "rejected", **EMPTY_REPORT}
    return await run_declaration(
        engine,
        caller,
        args,
        args.agent_id,
        args.project_id,
        args.channel,
        args.associations,
        args.anchor_ref,
        args.retract,
    )


# -- shared read helpers --------------------------------------------------------------------------


def _readable(engine: ReadModels, agent_id: str, scope: ScopeFilter, source_id: str) -> Readable:
    """Whether the caller could read a record directly: this agent's, in scope, matching
    ``source_id`` (an episode only where recall would return one: no source_id, or a channel)."""

    def check(ref: str) -> bool:
        row = row_of(engine, ref)
        if row is None or row.agent_id != agent_id or not scope.admits(row.project_id, row.channel):
            return False
        if source_id:
            if isinstance(row, MemoryRow):
                return (row.source or {}).get("id") == source_id
            return bool(scope.channel)
        return True

    return check


# -- traverse -------------------------------------------------------------------------------------


class TraverseArgs(ToolArgs):
    agent_id: StrictStr = Field(description="The agent whose graph is read.")
    entity: StrictStr = Field(max_length=1000, description="A declared name or alias (normalised match).")
    max_hops: Annotated[StrictInt, Field(ge=0, le=5)] = Field(default=1, description="Relations to follow (0–5).")
    limit: Annotated[StrictInt, Field(ge=1, le=100)] = Field(
        default=20, description="Most entities returned, and most mentions listed per entity."
    )
    channel: Name | None = None
    project_id: Name | None = None
    source_id: StrictStr = ""
    as_of: AsOf | None = Field(default=None, description=AS_OF_HELP)


async def traverse_tool(engine: Engine, caller: Caller, args: TraverseArgs) -> dict[str, Any]:
    if not args.agent_id:
        mark_failure("invalid")
        return {"ok": False, "error": "agent_id is required", "entities": [], "relations": []}
    src = await state_at(engine, args.as_of)
    if isinstance(src, dict):
        return {**src, "entities": [], "relations": []}
    scope = ScopeFilter(args.agent_id, args.project_id, args.channel or None)

    def query() -> dict[str, Any]:
        graph = src.associations.graph(args.agent_id)
        readable = _readable(src, args.agent_id, scope, args.source_id)
        return traverse(graph, args.entity, args.max_hops, args.limit, scope, readable)

    result: dict[str, Any] = await src.read(query)
    return result


# -- reconstruct ----------------------------------------------------------------------------------

DEFAULT_COUNT: Final = 10
MAX_COUNT: Final = 10
DEFAULT_TOP_K: Final = 20
DEFAULT_MAX_HOPS: Final = 2
DEFAULT_MAX_EVIDENCE: Final = 40
QUOTE_CHARS: Final = 800  # one head quotation
EXCERPT_CHARS: Final = 500  # one excerpt of another claim
DEFAULT_BUDGET: Final = 4000  # characters of quoted text, widened to one head per item of the window
MAX_BUDGET: Final = 20000
LITE_BUDGET: Final = 2800
MODE_CAPS: Final = {"lite": 3000, "pro": 5000}  # tokens of the returned JSON (WordPiece)


class ReconstructArgs(ToolArgs):
    agent_id: StrictStr = Field(description="The agent whose memories are reconstructed.")
    query: StrictStr = Field(max_length=100_000, description="The question.")
    count: Annotated[StrictInt, Field(ge=0, le=MAX_INT)] | None = Field(
        default=None, description="Most items (default 10)."
    )
    top_k: Annotated[StrictInt, Field(ge=1, le=100)] | None = Field(
        default=None, description="Candidate depth handed to recall (default 20); never derived from count."
    )
    max_hops: Annotated[StrictInt, Field(ge=0, le=5)] | None = Field(
        default=None, description="Relation walk depth (default 2)."
    )
    max_evidence: Annotated[StrictInt, Field(ge=1, le=100)] | None = Field(
        default=None, description="Most claims per item, and most walked records per entity (default 40)."
    )
    deep: Flag = False
    channel: Name | None = None
    project_id: Name | None = None
    source_id: StrictStr = ""
    session_key: SessionKey = ""
    trace: Flag = Field(default=False, description="Add candidate refs, clusters and declared cues.")
    budget: Annotated[StrictInt, Field(ge=1, le=MAX_INT)] | None = Field(
        default=None, description="Characters of quoted text (heads, then excerpts)."
    )
    time_cue: dict[str, Any] | None = Field(default=None, description="{after?, before?}: ISO-8601 bounds.")
    lite: Flag = Field(default=False, description='Same as mode "lite".')
    mode: Literal["lite", "pro"] | None = Field(
        default=None, description="Caps the returned JSON in tokens: lite 3000, pro 5000 (WordPiece count)."
    )
    as_of: AsOf | None = Field(default=None, description=AS_OF_HELP)


def _fail(error: str) -> dict[str, Any]:
    mark_failure("invalid")
    return {"ok": False, "error": error, "items": [], "returned_count": 0}


def json_tokens(value: Any) -> int:
    """Tokens of a JSON value, counted as every budget is (``api/services/tokens.py``)."""
    return count_tokens(orjson.dumps(value).decode())


def _row(engine: ReadModels, ref: str, rank: int) -> core.Row | None:
    raw = row_of(engine, ref)
    if isinstance(raw, MemoryRow):
        as_of = raw.timestamp or raw.created_at
        return core.Row(
            ref,
            raw.content,
            as_of,
            _instant(as_of),
            raw.project_id,
            raw.channel,
            raw.msg_id or "",
            rank,
            terms=core.content_terms(raw.content),
        )
    if isinstance(raw, EpisodeRow):
        as_of = raw.start_time or raw.created_at
        start, end = _instant(raw.start_time), _instant(raw.end_time)
        return core.Row(
            ref,
            f"[Episode] {raw.summary}",
            as_of,
            _instant(as_of),
            raw.project_id,
            raw.channel,
            "",
            rank,
            span=(start, end) if start and end else None,
            terms=core.content_terms(f"{raw.summary} {raw.keywords}"),
        )
    return None


def _instant(raw: str | None) -> datetime | None:
    if not raw:
        return None
    try:
        return parse_time(raw.replace("Z", "+00:00"))
    except ValueError:
        return None


def _lite_item(item: dict[str, Any]) -> dict[str, Any]:
    """CPersona's lite item: no ranges; a lone claim that only repeats head_ref moves its as_of up."""
    out = {k: v for k, v in item.items() if k != "ranges"}
    claims = out.get("claims")
    if claims and len(claims) == 1 and claims[0]["ref"] == out["head_ref"] and set(claims[0]) <= {"ref", "as_of"}:
        del out["claims"]
        out["as_of"] = claims[0]["as_of"]
    return out


async def reconstruct(engine: Engine, caller: Caller, args: ReconstructArgs) -> dict[str, Any]:
    if args.mode is not None and args.lite:
        return _fail('pass mode or lite, not both: lite=true is mode "lite"')
    if not args.agent_id:
        return _fail("agent_id is required")
    query = args.query.strip()
    if not query:
        return _fail("query is required")
    try:
        after, before = time_bounds(args.time_cue)
    except InputError as exc:
        return _fail(str(exc))
    src = await state_at(engine, args.as_of)
    if isinstance(src, dict):
        return {**src, "items": [], "returned_count": 0}
    mode = "lite" if args.lite else args.mode
    settings = engine.settings
    vec, model = None, None
    if settings.recall_retrievers != "lexical":
        [emb] = await src.embed([query])
        if emb is not None:
            vec, model = emb.vector(), emb.model
    scope = ScopeFilter(args.agent_id, args.project_id, args.channel or None)
    req = RecallRequest(
        scope=scope, query=query, limit=0, deep=args.deep, source_id=args.source_id, after=after, before=before
    )
    plan = Plan(
        count=min(DEFAULT_COUNT if args.count is None else args.count, MAX_COUNT),
        top_k=DEFAULT_TOP_K if args.top_k is None else args.top_k,
        max_hops=DEFAULT_MAX_HOPS if args.max_hops is None else args.max_hops,
        max_evidence=DEFAULT_MAX_EVIDENCE if args.max_evidence is None else args.max_evidence,
        budget=args.budget,
        mode=mode,
        trace=args.trace,
    )

    def run() -> dict[str, Any]:
        return assemble(src, settings, dataclasses.replace(req, limit=plan.top_k), vec, model, plan)

    result: dict[str, Any] = await src.read(run)
    return result


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    count: int
    top_k: int
    max_hops: int
    max_evidence: int
    budget: int | None
    mode: str | None
    trace: bool


def candidates(
    engine: Reads, settings: Settings, req: RecallRequest, vec: np.ndarray | None, model: str | None, terms: list[str]
) -> tuple[list[str], bool]:
    """Stage 1: the candidate refs, most relevant first, and whether any retriever found anything.

    A3: the declared names a query mentions add a lexical vote, not a pass. The gate's verdicts
    are the plain recall's (the query as written); the expanded lexical search only reorders
    the rows that passed, so a record found only through an alias stays out exactly as it would
    without it. With no terms this is the plain recall, unchanged (A2).
    """
    plain = run_recall(engine, settings, req, vec, model)
    found = any(plain.lists.values())
    if not terms:
        return [c.ref for c in plain.candidates], found
    expanded = run_recall(
        engine, settings, dataclasses.replace(req, lexical_terms=tuple(terms)), vec, model, gate=False
    )
    allowed = {c.ref for c in plain.admitted}
    order: list[str] = []
    for cand in [*expanded.candidates, *plain.admitted]:
        if cand.ref in allowed and cand.ref not in order:
            order.append(cand.ref)
    return order[: req.limit], found


def assemble(
    engine: Reads, settings: Settings, req: RecallRequest, vec: np.ndarray | None, model: str | None, plan: Plan
) -> dict[str, Any]:
    """The whole reconstruction over one consistent state (runs under the read lock)."""
    agent = req.scope.agent_id
    graph = engine.associations.graph(agent)
    terms, named = query_terms(graph, req.query, req.scope)
    refs, found = candidates(engine, settings, req, vec, model, terms)
    bounds: dict[str, Any] = {"top_k": plan.top_k, "max_hops": plan.max_hops, "max_evidence": plan.max_evidence}
    if len(refs) >= plan.top_k:
        bounds["reached"] = ["top_k"]
    response: dict[str, Any] = {"items": [], "effective_count": plan.count, "returned_count": 0}
    trace: dict[str, Any] = {"candidate_refs": refs}
    if named:
        trace["cues"] = {"entities": named, "terms": terms}
    rows = [r for r in (_row(engine, ref, rank) for rank, ref in enumerate(refs)) if r is not None]
    question = core.content_terms(req.query) | core.content_terms(" ".join(terms))
    evidence = core.relevant(rows, question)
    trace["relevant_refs"] = [r.ref for r in evidence]

    def finish(extra: dict[str, Any]) -> dict[str, Any]:
        out = {**response, **extra, "bounds": bounds}
        if plan.trace:
            out["trace"] = trace
        if plan.mode:
            out["mode"] = plan.mode
            out["cap"] = MODE_CAPS[plan.mode]
            out["used_tokens"] = json_tokens(out)
        return out

    if plan.count == 0:
        return finish({"shortfall_reason": "count_zero"})
    if not evidence:
        # Nothing found, or only rows the gate refused (or that share nothing but function words
        # with the question): never unrelated items.
        reason = core.BELOW_QUALITY_THRESHOLD if (found or rows) and question else core.NO_RELEVANT_EVIDENCE
        return finish({"shortfall_reason": reason})

    links = record_links(graph, [r.ref for r in evidence], req.scope)
    clusters, why = core.bundle(evidence, links)
    trace["clusters"] = [[evidence[i].ref for i in g] for g in clusters]
    window = clusters[: plan.count]
    readable = _readable(engine, agent, req.scope, req.source_id)
    if plan.mode:
        # Under a token cap the walk is not followed (as CPersona): its evidence would count
        # against the cap and could cost an item, where the walk is promised to change none.
        walked, cuts = [[] for _ in window], [set() for _ in window]  # type: ignore[var-annotated]
    else:
        walked, cuts = core.walk(window, evidence, graph, plan.max_hops, plan.max_evidence, req.scope, readable)
    entries: list[core.Entry] = []
    for members, reached in zip(window, walked, strict=True):
        extra = []
        for w in reached:
            row = _row(engine, w.ref, len(refs))
            if row is not None:
                extra.append((row, w))
        item, head, others = core.structure([evidence[i] for i in members], why, extra, links, plan.max_evidence)
        for claim in item.get("claims", ()):
            # S3: a claim shows its record's current standing, only when one was declared.
            standing = engine.standings.standing_of(claim["ref"])
            if standing is not None:
                claim["standing"] = standing
        excerpts = [{"ref": r.ref, **_excerpt(r.content)} for r in others]
        entries.append((item, core.quote(head.content, QUOTE_CHARS), excerpts))

    if plan.budget is not None:
        budget = min(max(plan.budget, QUOTE_CHARS), MAX_BUDGET)
    elif plan.mode == "lite":
        budget = LITE_BUDGET
    else:
        budget = min(max(DEFAULT_BUDGET, QUOTE_CHARS * len(window)), MAX_BUDGET)
    steps = core.steps_within(entries, budget)

    def shaped(n: int) -> dict[str, Any]:
        items, used = core.allocate(entries, n)
        if plan.mode:
            items = [_lite_item(i) for i in items]
        out: dict[str, Any] = {"items": items, "returned_count": len(items)}
        cut_something = n < len(core.sequence(entries))
        if cut_something:
            out["effective_budget"], out["used_budget"] = budget, used
        if len(items) < plan.count:
            out["shortfall_reason"] = core.BUDGET_EXHAUSTED if len(items) < len(window) else core.EXHAUSTED_CANDIDATES
        omitted = []
        if any("claims_omitted" in i for i in items):
            omitted.append("max_evidence")
        if any("max_hops" in cuts[i] for i in range(len(items))):
            omitted.append("max_hops")
        if omitted:
            bounds["omitted"] = omitted
        else:
            bounds.pop("omitted", None)
        if any("max_evidence" in cuts[i] for i in range(len(items))) and "max_evidence" not in bounds.get(
            "reached", []
        ):
            bounds.setdefault("reached", []).append("max_evidence")
        return finish(out)

    if plan.mode:
        cap = MODE_CAPS[plan.mode]
        n = core.largest_fitting(steps, lambda k: shaped(k)["used_tokens"] <= cap)
        if n == 0:
            return {
                "ok": False,
                "error": "cap_below_minimum",
                "detail": f"the smallest response is over mode {plan.mode!r}'s cap of {cap} tokens",
                "items": [],
                "returned_count": 0,
                "mode": plan.mode,
                "cap": cap,
            }
        return shaped(n)
    return shaped(steps)


def _excerpt(text: str) -> dict[str, Any]:
    out = core.quote(text, EXCERPT_CHARS)
    out.pop("ranges")
    return out


for _tool in (
    Tool(
        "declare_associations",
        DeclareArgs,
        declare_associations,
        "Declare entities (with aliases), mentions and relations; retract is the only removal. Malformed items "
        "are reported in dropped. Nothing is extracted or inferred.",
        writes=True,
    ),
    Tool(
        "traverse",
        TraverseArgs,
        traverse_tool,
        "The neighbourhood of a declared entity (name or alias): relations to max_hops, ordered by hops.",
    ),
    Tool(
        "reconstruct",
        ReconstructArgs,
        reconstruct,
        "Recall items assembled from the candidate pool: bundled records, declared-relation evidence with hops, "
        "roles, shortfall_reason and bounds. Content is a quotation, never composed.",
    ),
):
    register(_tool)
