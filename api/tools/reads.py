"""Read tools over the simple read models: contents, listings, profile, precision, history,
audit and health. Successful reads carry no ``ok`` (CPersona's rule); failures do."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StrictInt, StrictStr

from memstream.api.services.acl import AclConfig, may_sweep
from memstream.api.services.failures import mark_failure
from memstream.api.services.ports import Engine, HealthProbe, ReadModels
from memstream.api.tools.common import BETAS, GLOBAL_PRECISION, MAX_INT, Flag, sql_time
from memstream.api.tools.points import AS_OF_HELP, AsOf, state_at
from memstream.api.tools.registry import Caller, Tool, ToolArgs, register
from memstream.api.tools.sanitize import InputError
from memstream.api.tools.views import audit_entry, history_entry
from memstream.projections.records import EpisodeRow, MemoryRow
from memstream.streams.events import parse_ref
from memstream.streams.log.port import resolved

GET_CONTENTS_BUDGET = 40_000
LIST_CAP = 500

Offset = Annotated[StrictInt, Field(ge=0, le=MAX_INT)]
Pair = Annotated[list[Offset], Field(min_length=2, max_length=2)]


class RangeRef(ToolArgs):
    ref: StrictStr
    node: Offset | Pair | None = None
    block: Offset | Pair | None = None
    span: Pair | None = None
    revision: StrictStr | None = None


class GetContentsArgs(ToolArgs):
    agent_id: StrictStr = Field(description="Owner: another agent's refs come back in `missing`.")
    refs: list[StrictStr | RangeRef] = Field(max_length=20, description="'mem:<id>' / 'ep:<id>' refs or range objects.")
    as_of: AsOf | None = Field(default=None, description=AS_OF_HELP)


def memory_timestamp(row: MemoryRow) -> str:
    return row.timestamp or row.created_at


def _item(kind: str, row: MemoryRow | EpisodeRow) -> tuple[dict[str, Any], str]:
    if isinstance(row, MemoryRow):
        item: dict[str, Any] = {
            "ref": f"mem:{row.id}",
            "content": row.content,
            "source": row.source,
            "timestamp": memory_timestamp(row),
        }
        if row.msg_id is not None:
            item["id"] = row.msg_id
        return item, row.content
    item = {
        "ref": f"ep:{row.id}",
        "content": f"[Episode] {row.summary}",
        "source": {"System": "episode"},
        "timestamp": row.start_time or row.created_at,
        "resolved": row.resolved,
    }
    return item, row.summary


async def get_contents(engine: Engine, caller: Caller, args: GetContentsArgs) -> dict[str, Any]:
    if not args.agent_id:
        return {"ok": False, "error": "agent_id is required"}
    if not args.refs:
        return {"ok": False, "error": "refs must be a non-empty list of 'mem:<id>' / 'ep:<id>' refs or range objects"}
    src = await state_at(engine, args.as_of)
    if isinstance(src, dict):
        return src

    def query() -> dict[str, Any]:
        items: list[dict[str, Any]] = []
        missing: list[str] = []
        unresolved: list[dict[str, Any]] = []
        deferred: list[Any] = []
        spent = 0
        for ref in args.refs:
            raw = ref if isinstance(ref, str) else ref.ref
            try:
                kind, ident = parse_ref(raw)
            except ValueError:
                missing.append(raw)
                continue
            table = src.memories.rows if kind == "mem" else src.episodes.rows
            row = table.get(ident)
            if row is None or row.agent_id != args.agent_id:
                missing.append(raw)
                continue
            item, text = _item(kind, row)
            if isinstance(ref, RangeRef):
                if sum(x is not None for x in (ref.node, ref.block, ref.span)) > 1:
                    unresolved.append({"ref": raw, "reason": "name at most one of node / span / block"})
                    continue
                if ref.node is not None or ref.block is not None:
                    # memstream keeps no overflow tree: records are embedded whole.
                    unresolved.append({"ref": raw, "reason": "no_current_nodes"})
                    continue
                if ref.span is not None:
                    start, end = ref.span
                    end = min(end, len(text))
                    start = min(start, end)
                    item["content"] = text[start:end]
                    item["range"] = {"span": [start, end], "content_len": len(text)}
            size = len(item["content"])
            if items and spent + size > GET_CONTENTS_BUDGET:
                deferred.append(ref if isinstance(ref, str) else ref.model_dump(exclude_none=True))
                continue
            spent += size
            items.append(item)
        body: dict[str, Any] = {"items": items, "missing": missing, "count": len(items)}
        if unresolved:
            body["unresolved"] = unresolved
        if deferred:
            body["deferred"] = deferred
            body["budget_chars"] = GET_CONTENTS_BUDGET
        return body

    result: dict[str, Any] = await src.read(query)
    return result


class ListArgs(ToolArgs):
    agent_id: StrictStr | None = Field(default=None, description="The agent; empty or omitted lists every agent.")
    limit: StrictInt = Field(default=100, ge=1, le=1_000_000, description="Most rows to return (capped at 500).")
    project_id: StrictStr | None = Field(
        default=None, max_length=256, description="Omit: no filter; '': global pool only; 'X': X and the global pool."
    )
    as_of: AsOf | None = Field(default=None, description=AS_OF_HELP)


def _in_project(project: str, wanted: str | None) -> bool:
    return wanted is None or project == wanted or project == ""


def _newest_first(rows: list[Any], args: ListArgs) -> tuple[list[Any], bool]:
    limit = min(args.limit, LIST_CAP)
    picked = []
    for row in reversed(rows):
        if _in_project(row.project_id, args.project_id):
            picked.append(row)
            if len(picked) > limit:
                break
    return picked[:limit], len(picked) > limit


def _all_agents(by_agent: dict[str, dict[int, None]], table: dict[int, Any]) -> list[Any]:
    return [table[i] for i in sorted(i for ids in by_agent.values() for i in ids)] if by_agent else []


async def list_memories(engine: Engine, caller: Caller, args: ListArgs) -> dict[str, Any]:
    src = await state_at(engine, args.as_of)
    if isinstance(src, dict):
        return src

    def query() -> dict[str, Any]:
        mem = src.memories
        rows = mem.of_agent(args.agent_id) if args.agent_id else _all_agents(mem.by_agent, mem.rows)
        picked, more = _newest_first(rows, args)
        body: dict[str, Any] = {
            "memories": [
                {
                    "id": r.id,
                    "agent_id": r.agent_id,
                    "project_id": r.project_id,
                    "content": r.content,
                    "source": r.source,
                    "timestamp": memory_timestamp(r),
                    "created_at": sql_time(r.created_at),
                    "locked": r.locked,
                    "channel": r.channel,
                }
                for r in picked
            ],
            "count": len(picked),
        }
        if more and args.limit > LIST_CAP:
            body["budget_rows"] = LIST_CAP
        return body

    listing: dict[str, Any] = await src.read(query)
    return listing


class ListEpisodesArgs(ListArgs):
    limit: StrictInt = Field(default=50, ge=1, le=1_000_000, description="Most rows to return (capped at 500).")


async def list_episodes(engine: Engine, caller: Caller, args: ListEpisodesArgs) -> dict[str, Any]:
    src = await state_at(engine, args.as_of)
    if isinstance(src, dict):
        return src

    def query() -> dict[str, Any]:
        eps = src.episodes
        rows = eps.of_agent(args.agent_id) if args.agent_id else _all_agents(eps.by_agent, eps.rows)
        picked, _ = _newest_first(rows, args)
        return {
            "episodes": [
                {
                    "id": r.id,
                    "agent_id": r.agent_id,
                    "project_id": r.project_id,
                    "summary": r.summary,
                    "keywords": r.keywords,
                    "start_time": r.start_time,
                    "end_time": r.end_time,
                    "created_at": sql_time(r.created_at),
                }
                for r in picked
            ],
            "count": len(picked),
        }

    episodes: dict[str, Any] = await src.read(query)
    return episodes


class AgentReadArgs(ToolArgs):
    agent_id: StrictStr = Field(description="The agent.")


async def get_profile(engine: Engine, caller: Caller, args: AgentReadArgs) -> dict[str, Any]:
    row = await engine.read(lambda: engine.profiles.rows.get(args.agent_id))
    return {"profile": row.content if row is not None else ""}


async def get_recall_precision(engine: Engine, caller: Caller, args: AgentReadArgs) -> dict[str, Any]:
    if not args.agent_id:
        return {"ok": False, "error": "agent_id is required"}
    override = await engine.read(lambda: engine.precision.of(args.agent_id))
    level, beta = override if override is not None else (GLOBAL_PRECISION, BETAS[GLOBAL_PRECISION])
    return {
        "ok": True,
        "agent_id": args.agent_id,
        "precision": level,
        "beta": beta,
        "overridden": override is not None,
        "global_precision": GLOBAL_PRECISION,
        "global_beta": BETAS[GLOBAL_PRECISION],
    }


# -- memstream's own: history and audit -------------------------------------------------------


class HistoryArgs(ToolArgs):
    ref: StrictStr | None = Field(default=None, description="'mem:<id>' or 'ep:<id>': that record's events.")
    agent_id: StrictStr | None = Field(
        default=None, description="With ref: owner check. Alone: every event of the agent, oldest first."
    )
    since_offset: StrictInt = Field(
        default=0,
        ge=0,
        le=MAX_INT,
        description="Agent history: start at this log offset (Kafka mode: of the agent's partition).",
    )
    limit: StrictInt = Field(default=1000, ge=1, le=10_000)


async def history(engine: Engine, caller: Caller, args: HistoryArgs) -> dict[str, Any]:
    """H1: every event of a memory (or an agent), oldest first, with actor, time, offset, change."""
    if args.ref is None and not args.agent_id:
        return {"ok": False, "error": "give ref ('mem:<id>' / 'ep:<id>') or agent_id"}
    if args.ref is None:
        records = await resolved(engine.log.read(args.since_offset, agent_id=args.agent_id, limit=args.limit))
        events = [history_entry(r) for r in records]
        return {"agent_id": args.agent_id, "events": events, "count": len(events)}
    try:
        kind, ident = parse_ref(args.ref)
    except ValueError as exc:
        return {"ok": False, "error": str(exc)}
    ref = f"{kind}:{ident}"
    offsets = await engine.read(lambda: list(engine.history.of(ref)))
    events = [history_entry(r) for r in await resolved(engine.log.read_offsets(offsets[: args.limit]))]
    if args.agent_id and any(e["scope"]["agent_id"] != args.agent_id for e in events):
        events = []
    if events:  # an erasure of everything of the agent names no record: the history adds it
        agent = events[0]["scope"]["agent_id"]
        erased = await engine.read(lambda: engine.history.erasures_after(agent, offsets[0]))
        if erased:
            offsets = sorted({*offsets, *erased})[: args.limit]
            events = [history_entry(r) for r in await resolved(engine.log.read_offsets(offsets))]
    if not events:
        return {"ok": False, "error": f"no history for {ref}"}
    return {"ref": ref, "events": events, "count": len(events)}


class AuditArgs(ToolArgs):
    agent_id: StrictStr | None = Field(
        default=None, description="Only this agent's records (required in Kafka mode: the trail is per partition)."
    )
    kind: Literal["refused", "skipped", "all"] = Field(default="refused", description="Which records.")
    since_offset: StrictInt = Field(
        default=0, ge=0, le=MAX_INT, description="First audit offset (Kafka mode: of the partition)."
    )
    limit: StrictInt = Field(default=100, ge=1, le=10_000)


async def audit_log(engine: Engine, caller: Caller, args: AuditArgs) -> dict[str, Any]:
    """H4: refused commands (who, what, why), and optionally the skipped ones."""
    kind = None if args.kind == "all" else args.kind
    try:
        records = await resolved(
            engine.log.read_audit(args.since_offset, agent_id=args.agent_id, kind=kind, limit=args.limit)
        )
    except InputError as exc:  # a log that cannot answer this form of the call says why
        mark_failure("invalid")
        return {"ok": False, "error": str(exc)}
    entries = [audit_entry(r) for r in records]
    return {"records": entries, "count": len(entries)}


# -- health -----------------------------------------------------------------------------------


class HealthArgs(ToolArgs):
    agent_id: StrictStr | None = None
    fix: Flag = False
    checks: list[StrictStr] | None = None
    session_key: Annotated[StrictStr, Field(max_length=256)] = ""


def _embedding_issues(engine: ReadModels, agent_id: str | None) -> list[dict[str, Any]]:
    """Agents whose vectors are split between models: a re-embed started and not switched yet
    (running, or stopped and waiting to be run again)."""
    agents = [agent_id] if agent_id else sorted(engine.memories.by_agent)
    out = []
    for name in agents:
        models = engine.vectors.models(name)
        if len(models) > 1:
            current = engine.vectors.model_of(name)
            others = {m: n for m, n in sorted(models.items()) if m != current}
            held = models.get(current, 0) if current is not None else 0
            out.append(
                {
                    "check": "embedding",
                    "severity": "info",
                    "agent_id": name,
                    "detail": f"re-embed under way or unfinished: recall uses {current!r} ({held} "
                    f"vectors); also {others}. Run `memstream reembed --model <model>` to finish it",
                }
            )
    return out


HEALTH_CHECKS = ("log_readable", "log_writable", "projection_lag", "checkpoints", "log_integrity", "embedding")
DEFAULT_CHECKS = ["log_readable", "log_writable", "projection_lag", "checkpoints", "embedding"]


def _checkpoint_issues(health: HealthProbe, every: int, end: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Checkpoints (snapshots) are an optimisation: a missing one costs a replay at start-up,
    never correctness. Missing ones on a log past one checkpoint interval, or folds that have
    gone two intervals without one (writes failing: disk full, permissions), are warnings; not
    while the first one is being written (a read answers before the checkpoint it made due)."""
    seen = health.checkpoint_ages()
    missing = [name for name, age in seen.items() if age is None]
    issues: list[dict[str, Any]] = []
    if missing and end >= every and not health.checkpoint_pending():
        issues.append(
            {
                "check": "checkpoints",
                "severity": "warn",
                "detail": f"no checkpoint for {', '.join(missing)} on a log of {end} events: the next start-up "
                "replays them from offset 0 (`memstream rebuild` writes them)",
            }
        )
    behind = health.events_since_checkpoint()
    if behind >= 2 * every:
        issues.append(
            {
                "check": "checkpoints",
                "severity": "warn",
                "detail": f"{behind} events folded since the last checkpoint (interval {every}): "
                "checkpoint writes are failing, see the server log",
            }
        )
    return issues, {"checkpoint_age_s": seen, "events_since_checkpoint": behind}


# An agent's own figures in a health answer; every other figure is the whole store's.
AGENT_FIGURES = ("memories", "episodes", "profiles")
STORE_WIDE = "a store-wide check: its figures go only to clients that may read every agent"


def health_seen_by(
    acl: AclConfig | None, caller: Caller, agent_id: str | None, verdict: dict[str, Any]
) -> dict[str, Any]:
    """``check_health`` as ``caller`` may see it. With an ``agent_id``, in ACL mode, a client
    that may not read every agent gets the verdict with that agent's figures only: the log's
    offsets, the folds' lag and checkpoints, and the issues of store-wide checks (their
    severity kept, their detail not) tell of every agent's writes (docs/security.md)."""
    if not agent_id or verdict.get("ok") is False or may_sweep(acl, caller.client_id):
        return verdict
    issues = [
        issue if issue.get("agent_id") == agent_id else {**issue, "detail": STORE_WIDE}
        for issue in verdict.get("issues", [])
        if issue.get("agent_id") in (None, agent_id)
    ]
    stats = verdict.get("stats", {})
    kept = {key: stats[key] for key in ("mode", *AGENT_FIGURES) if key in stats}
    return {**verdict, "issues": issues, "stats": kept}


async def check_health(engine: Engine, caller: Caller, args: HealthArgs) -> dict[str, Any]:
    verdict = await _check_health(engine, args)
    return health_seen_by(engine.acl, caller, args.agent_id, verdict)


async def _check_health(engine: Engine, args: HealthArgs) -> dict[str, Any]:
    wanted = list(args.checks or DEFAULT_CHECKS)
    unknown = [c for c in wanted if c not in HEALTH_CHECKS]
    if unknown:
        return {"ok": False, "error": f"unknown checks: {', '.join(unknown)}; known: {', '.join(HEALTH_CHECKS)}"}
    if args.fix:
        return {
            "ok": False,
            "error": "fix is not needed: every read model is rebuilt from the log with `memstream rebuild`",
        }
    health = engine.health()
    if health is None:  # a Kafka worker: the router answers for the deployment
        mark_failure("invalid")
        return {"ok": False, "error": "check_health is the router's to answer (memstream serve --kafka)"}
    issues: list[dict[str, Any]] = []
    try:
        end, audit_end = health.log_ends()
    except Exception as exc:
        return {
            "status": "unhealthy",
            "checks_run": wanted,
            "issues": [{"check": "log_readable", "severity": "critical", "detail": str(exc)}],
        }

    def stats() -> dict[str, Any]:
        mem, eps = engine.memories, engine.episodes
        if args.agent_id:
            return {
                "memories": len(mem.by_agent.get(args.agent_id, {})),
                "episodes": len(eps.by_agent.get(args.agent_id, {})),
                "profiles": int(args.agent_id in engine.profiles.rows),
            }
        return {
            "memories": len(mem.rows),
            "episodes": len(eps.rows),
            "profiles": len(engine.profiles.rows),
            "agents": len(mem.by_agent),
        }

    body = await engine.read(stats)
    if "embedding" in wanted:
        issues.extend(await engine.read(lambda: _embedding_issues(engine, args.agent_id)))
    if "log_writable" in wanted and not health.committer_running():
        issues.append(
            {"check": "log_writable", "severity": "critical", "detail": "the command committer is not running"}
        )
    checkpoint_stats: dict[str, Any] = {}
    if "checkpoints" in wanted:
        found, checkpoint_stats = _checkpoint_issues(health, engine.settings.snapshot_every, end)
        issues.extend(found)
    applied = engine.applied_offset
    lag = end - 1 - applied
    if "projection_lag" in wanted and lag > 0:
        issues.append({"check": "projection_lag", "severity": "warn", "detail": f"read models are {lag} events behind"})
    if "log_integrity" in wanted:
        verdict = health.integrity()
        if verdict != "ok":
            issues.append({"check": "log_integrity", "severity": "critical", "detail": verdict})
    severities = {i["severity"] for i in issues}
    status = "unhealthy" if "critical" in severities else "degraded" if "warn" in severities else "healthy"
    return {
        "status": status,
        "checks_run": wanted,
        "issues": issues,
        "stats": {
            **body,
            "log_end_offset": end,
            "audit_end_offset": audit_end,
            "projection_offset": applied,
            "projection_lag": max(lag, 0),
            **checkpoint_stats,
        },
    }


for _tool in (
    Tool(
        "get_contents", GetContentsArgs, get_contents, "Full content for recall refs (mem:<id> / ep:<id>), with ranges."
    ),
    Tool("list_memories", ListArgs, list_memories, "Recent memories, newest first."),
    Tool("list_episodes", ListEpisodesArgs, list_episodes, "Recent episodes, newest first."),
    Tool("get_profile", AgentReadArgs, get_profile, "The agent's profile ('' when none)."),
    Tool("get_recall_precision", AgentReadArgs, get_recall_precision, "The agent's recall precision and beta."),
    Tool("check_health", HealthArgs, check_health, "Health verdict (status) with log and read-model figures."),
    Tool(
        "history",
        HistoryArgs,
        history,
        "Every event of a memory or an agent, oldest first (actor, time, offset, change).",
    ),
    Tool("audit_log", AuditArgs, audit_log, "Refused (and skipped) commands: who, what, why."),
):
    register(_tool)
