"""Write tools: store, update/delete/lock/unlock memories, episodes, profile, agent data,
recall precision. Each validates and normalises its input, embeds when the write carries
text, submits one command and words the outcome as CPersona 2.6 does."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import Field, StrictStr, field_validator

from memstream.api.query.recall.calibrate import MIN_EMBEDDED, calibrate, sample_ids
from memstream.api.services.failures import mark_failure
from memstream.api.services.ports import Engine
from memstream.api.tools.common import BETAS, GLOBAL_PRECISION, Flag, Id, Name, WriteArgs, envelope
from memstream.api.tools.declarations import store_rider
from memstream.api.tools.registry import Caller, Handler, Tool, ToolArgs, register
from memstream.api.tools.sanitize import (
    InputError,
    cap,
    check_size,
    check_utf8,
    clean_text,
    normalize_source,
    parse_timestamp,
)
from memstream.streams import commands as c
from memstream.streams.decision.outcome import Outcome

# -- store ----------------------------------------------------------------------------------


class StoreMessage(ToolArgs):
    content: StrictStr | None = None
    id: Name | None = None
    source: dict[str, Any] | StrictStr | None = None
    timestamp: Name | None = Field(default=None, max_length=64)
    metadata: dict[str, Any] | None = None


class StoreArgs(WriteArgs):
    content: StrictStr | None = Field(default=None, description="The text to store.")
    agent_id: Name | None = Field(default=None, description="The agent the memory belongs to.")
    id: Name | None = Field(
        default=None, description="Caller's message id: a later store with the same id in the same project is skipped."
    )
    source: dict[str, Any] | None = Field(default=None, description="Who produced the content: {type, id, name}.")
    timestamp: StrictStr | None = Field(default=None, max_length=64, description="ISO-8601; naive means UTC.")
    metadata: dict[str, Any] | None = Field(default=None, description="Free-form JSON (size-capped).")
    lock: Flag = Field(default=False, description="Also lock the memory against edits and deletion.")
    message: StoreMessage | None = Field(
        default=None, description="Older form of content/id/source/timestamp/metadata."
    )
    channel: Name | None = Field(default=None, description="Channel bucket; '' is shared.")
    project_id: Name | None = Field(default=None, description="Project bucket; '' is the global pool.")
    associations: dict[str, Any] | None = Field(
        default=None, description="Entities, mentions and relations to declare."
    )


def _rejected(reason: str) -> dict[str, Any]:
    return {"ok": False, "result": "rejected", "reason": reason}


def _metadata_problem(metadata: dict[str, Any] | None, limit: int, what: str = "metadata") -> str | None:
    if metadata is None:
        return None
    size = len(orjson.dumps(metadata).decode())
    if size > limit:
        return f"{what} too large ({size} chars, max {limit})"
    return None


async def store(engine: Engine, caller: Caller, args: StoreArgs) -> dict[str, Any]:
    settings = engine.settings
    source: dict[str, Any] | str | None  # the legacy message form also takes a plain string
    content, msg_id, source, timestamp, metadata = args.content, args.id, args.source, args.timestamp, args.metadata
    if args.message is not None:
        if any(v is not None for v in (content, msg_id, source, timestamp, metadata)):
            return _rejected(
                "send content, id, source, timestamp and metadata either at the top level or inside message, not both"
            )
        m = args.message
        content, msg_id, source, timestamp, metadata = m.content, m.id, m.source, m.timestamp, m.metadata
    if not args.agent_id:
        return _rejected("agent_id is required")
    if not content:
        return _rejected("empty content")
    try:
        check_size(content, "content", settings.max_input_chars)
        check_utf8(content, "content")
        cleaned = clean_text(content)
        if not cleaned:
            return _rejected("empty after sanitization")
        cleaned, truncated = cap(cleaned, settings.max_content_chars)
        when = parse_timestamp(timestamp)
        src = normalize_source(source, args.agent_id)
        if msg_id is not None:
            check_utf8(msg_id, "id")
    except InputError as exc:
        return _rejected(str(exc))
    problem = _metadata_problem(metadata, settings.max_metadata_chars) or _metadata_problem(
        src, settings.max_metadata_chars, "source"
    )
    if problem:
        return _rejected(problem)
    [embedding] = await engine.embed([cleaned], agent_id=args.agent_id)
    cmd = c.StoreMemory(
        **envelope(caller, args, args.agent_id, args.project_id, args.channel),
        content=cleaned,
        msg_id=msg_id,
        source=src,
        metadata=metadata or {},
        embedding=embedding,
        timestamp=when,
        lock=args.lock,
    )
    out = (await engine.submit(cmd)).outcome
    body = store_answer(out, truncated=truncated, lock_requested=args.lock)
    if args.associations and out.result != "rejected" and out.id is not None:
        # The rider runs against the stored or echoed record (as CPersona's); a malformed item
        # is dropped in its report, never a reason to lose the memory.
        body["associations"] = await store_rider(
            engine, caller, args, args.agent_id, args.project_id, args.channel, out.id, args.associations
        )
    return body


def store_answer(out: Outcome, *, truncated: bool = False, lock_requested: bool = False) -> dict[str, Any]:
    if out.result == "rejected":
        return _rejected(out.reason or "rejected")
    body: dict[str, Any] = {"ok": True, "result": "stored" if out.result == "applied" else "skipped"}
    if out.result == "skipped":
        body["reason"] = out.reason
    body["id"] = out.id
    if out.result == "applied":
        body["embedded"] = bool(out.detail.get("embedded"))
    if truncated:
        body["truncated"] = True
    if lock_requested:
        body["locked"] = bool(out.detail.get("locked"))
    return body


# -- memory edits ---------------------------------------------------------------------------


class MemoryIdArgs(WriteArgs):
    agent_id: Name | None = Field(default=None, description="Owner check: only this agent's memory is touched.")
    memory_id: Id = Field(description="The memory's id.")


class UpdateArgs(MemoryIdArgs):
    content: StrictStr = Field(description="The new text (re-embedded).")


async def memory_owner(engine: Engine, args: MemoryIdArgs) -> str | None:
    """The agent whose partition decides this edit: the caller's claim, or the memory's owner."""
    if args.agent_id:
        return args.agent_id
    row = await engine.read(lambda: engine.memories.rows.get(args.memory_id))
    return row.agent_id if row is not None else None


def _edit_failure(out: Outcome, args: MemoryIdArgs, verb: str) -> dict[str, Any]:
    mid = args.memory_id
    if out.error == "conflict":
        return {"ok": False, "error": f"Memory {mid} was not edited: {out.reason}"}
    if args.agent_id:
        return {"ok": False, "error": f"Memory {mid} not found, not owned by agent, or locked"}
    if out.error == "locked":
        return {"ok": False, "error": f"Memory {mid} is locked and cannot be {verb}"}
    return {"ok": False, "error": f"Memory {mid} not found"}


async def update_memory(engine: Engine, caller: Caller, args: UpdateArgs) -> dict[str, Any]:
    if not args.content.strip():
        return {"ok": False, "error": "Content cannot be empty"}
    try:
        check_size(args.content, "content", engine.settings.max_input_chars)
        check_utf8(args.content, "content")
    except InputError as exc:
        return {"ok": False, "error": str(exc)}
    cleaned = clean_text(args.content)
    if not cleaned:
        return {"ok": False, "error": "Content cannot be empty after sanitization"}
    cleaned, truncated = cap(cleaned, engine.settings.max_content_chars)
    owner = await memory_owner(engine, args)
    if owner is None:
        mark_failure("not_found")
        return {"ok": False, "error": f"Memory {args.memory_id} not found"}
    [embedding] = await engine.embed([cleaned], agent_id=owner)
    cmd = c.UpdateMemory(
        **envelope(caller, args, owner), memory_id=args.memory_id, content=cleaned, embedding=embedding
    )
    out = (await engine.submit(cmd)).outcome
    if out.result != "applied":
        return _edit_failure(out, args, "edited")
    body: dict[str, Any] = {"ok": True, "updated_id": args.memory_id}
    if truncated:
        body["truncated"] = True
    return body


def _simple_edit(
    command: type[c.DeleteMemory] | type[c.LockMemory] | type[c.UnlockMemory], key: str, verb: str
) -> Handler:
    async def run(engine: Engine, caller: Caller, args: MemoryIdArgs) -> dict[str, Any]:
        owner = await memory_owner(engine, args)
        if owner is None:
            mark_failure("not_found")
            return {"ok": False, "error": f"Memory {args.memory_id} not found"}
        out = (await engine.submit(command(**envelope(caller, args, owner), memory_id=args.memory_id))).outcome
        if out.result != "applied":
            return _edit_failure(out, args, verb)
        return {"ok": True, key: args.memory_id}

    return run


# -- episodes and profile ---------------------------------------------------------------------


class ArchiveArgs(WriteArgs):
    agent_id: Name = Field(description="The agent the episode belongs to.")
    summary: StrictStr = Field(description="Episode summary, computed by the caller.")
    history: list[dict[str, Any]] | None = Field(default=None, description="Messages; their timestamps give start/end.")
    keywords: StrictStr | None = Field(default=None, description="Space-separated keywords.")
    resolved: Flag | None = Field(default=None, description="Whether the topic was concluded.")
    project_id: Name | None = None
    channel: Name | None = None


async def archive_episode(engine: Engine, caller: Caller, args: ArchiveArgs) -> dict[str, Any]:
    def fail(error: str) -> dict[str, Any]:
        return {"ok": False, "episode_id": None, "error": error}

    if not args.agent_id:
        return fail("agent_id is required")
    if args.summary == "":
        return fail(
            "summary is required: server-side episode summarisation was removed; pre-compute summary "
            "(and keywords) before calling archive_episode"
        )
    try:
        check_size(args.summary, "summary", engine.settings.max_input_chars)
        check_size(args.keywords or "", "keywords", engine.settings.max_input_chars)
        check_utf8(args.summary, "summary")
        check_utf8(args.keywords or "", "keywords")
        summary = clean_text(args.summary)
        if not summary:
            return fail("summary is required to archive an episode")
        summary, _ = cap(summary, engine.settings.max_content_chars)
        stamps = []
        for i, msg in enumerate(args.history or []):
            raw = msg.get("timestamp")
            if raw is not None:
                if not isinstance(raw, str):
                    raise InputError(f"history[{i}].timestamp must be a string")
                stamp = parse_timestamp(raw, f"history[{i}].timestamp")
                if stamp is not None:
                    stamps.append(stamp)
    except InputError as exc:
        return fail(str(exc))
    [embedding] = await engine.embed([summary], agent_id=args.agent_id)
    cmd = c.ArchiveEpisode(
        **envelope(caller, args, args.agent_id, args.project_id, args.channel),
        summary=summary,
        keywords=args.keywords or "",
        resolved=args.resolved,
        start_time=min(stamps) if stamps else None,
        end_time=max(stamps) if stamps else None,
        embedding=embedding,
    )
    out = (await engine.submit(cmd)).outcome
    if out.result != "applied":
        return fail(out.reason or "rejected")
    return {"ok": True, "episode_id": out.id}


class DeleteEpisodeArgs(WriteArgs):
    agent_id: Name | None = Field(default=None, description="Owner check.")
    episode_id: Id = Field(description="The episode's id.")


async def delete_episode(engine: Engine, caller: Caller, args: DeleteEpisodeArgs) -> dict[str, Any]:
    owner = args.agent_id
    if not owner:
        row = await engine.read(lambda: engine.episodes.rows.get(args.episode_id))
        owner = row.agent_id if row is not None else None
    if owner is None:
        mark_failure("not_found")
        return {"ok": False, "error": f"Episode {args.episode_id} not found or not owned by agent"}
    out = (await engine.submit(c.DeleteEpisode(**envelope(caller, args, owner), episode_id=args.episode_id))).outcome
    if out.result != "applied":
        return {"ok": False, "error": f"Episode {args.episode_id} not found or not owned by agent"}
    return {"ok": True, "deleted_id": args.episode_id}


class ProfileArgs(WriteArgs):
    agent_id: Name = Field(description="The agent whose profile is replaced.")
    profile: StrictStr = Field(description="The whole profile text; it replaces the previous one.")


async def update_profile(engine: Engine, caller: Caller, args: ProfileArgs) -> dict[str, Any]:
    def fail(reason: str) -> dict[str, Any]:
        return {"ok": False, "profiles_updated": 0, "reason": reason, "error": reason}

    if not args.agent_id:
        return fail("agent_id is required")
    if args.profile == "":
        return fail("empty profile")
    try:
        check_size(args.profile, "profile", engine.settings.max_input_chars)
        check_utf8(args.profile, "profile")
    except InputError as exc:
        return fail(str(exc))
    text = clean_text(args.profile)
    if not text:
        return fail("empty after sanitization")
    text, truncated = cap(text, engine.settings.max_profile_chars)
    out = (await engine.submit(c.UpdateProfile(**envelope(caller, args, args.agent_id), content=text))).outcome
    if out.result != "applied":
        return fail(out.reason or "rejected")
    body: dict[str, Any] = {"ok": True, "profiles_updated": 1}
    if truncated:
        body["truncated"] = True
    return body


class AgentArgs(WriteArgs):
    agent_id: Name = Field(description="The agent.")


async def delete_agent_data(engine: Engine, caller: Caller, args: AgentArgs) -> dict[str, Any]:
    if not args.agent_id:
        return {"ok": False, "error": "agent_id is required for bulk deletion"}
    out = (await engine.submit(c.DeleteAgentData(**envelope(caller, args, args.agent_id)))).outcome
    if out.result != "applied":
        return {"ok": False, "error": out.reason or "rejected"}
    d = out.detail
    return {
        "ok": True,
        "agent_id": args.agent_id,
        "deleted_memories": d.get("memories", 0),
        "deleted_profiles": d.get("profile", 0),
        "deleted_episodes": d.get("episodes", 0),
        "deleted_pending_tasks": 0,
        # memstream: locked memories survive a bulk delete (W5); this says how many did.
        "kept_locked": d.get("kept_locked", 0),
    }


# -- recall precision -----------------------------------------------------------------------


class PrecisionArgs(WriteArgs):
    agent_id: Name = Field(description="The agent whose recall precision is set.")
    precision: StrictStr = Field(default="", description="strict / balanced / lenient; '' with beta <= 0 clears.")
    beta: float = Field(default=0, description="Raw specificity weight; overrides precision when > 0.")

    @field_validator("beta", mode="before")
    @classmethod
    def _number(cls, v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValueError("beta must be a number")
        return v


async def set_recall_precision(engine: Engine, caller: Caller, args: PrecisionArgs) -> dict[str, Any]:
    if not args.agent_id:
        return {"ok": False, "error": "agent_id is required"}
    level: str | None
    if args.beta > 0:
        level, beta = "custom", float(args.beta)
    elif args.precision == "":
        level, beta = None, BETAS[GLOBAL_PRECISION]
    elif args.precision in BETAS:
        level, beta = args.precision, BETAS[args.precision]
    else:
        return {"ok": False, "error": f"Unknown precision {args.precision!r}; expected strict / balanced / lenient"}
    body: dict[str, Any] = {
        "ok": True,
        "agent_id": args.agent_id,
        "precision": level or "default",
        "beta": beta,
        "cleared": level is None,
        "fused_gate": None,
    }
    gate = None
    if level is not None:
        calibration = await calibrate_agent(engine, args.agent_id, beta)
        if not calibration["ok"]:
            # Nothing is written: a precision the gate cannot be calibrated for is not set.
            return {**body, "ok": False, "error": calibration["error"]}
        body["calibrate"] = calibration
        gate = {k: calibration[k] for k in ("signal", "seed", "n_null", "n_pos")}
        gate["threshold"] = calibration["new_threshold"]
        body["fused_gate"] = {"threshold": gate["threshold"], "signal": gate["signal"]}
    cmd = c.SetRecallPrecision(**envelope(caller, args, args.agent_id), level=level, beta=beta, gate=gate)  # type: ignore[arg-type]
    out = (await engine.submit(cmd)).outcome
    if out.result != "applied":
        return {"ok": False, "error": out.reason or "rejected"}
    return body


async def calibrate_agent(engine: Engine, agent_id: str, beta: float) -> dict[str, Any]:
    """Seeded calibration over the agent's current memories (see ``api/query/recall/calibrate.py``)."""
    if engine.settings.embedder == "none":
        return {"ok": False, "error": f"Need at least {MIN_EMBEDDED} embeddings, found 0"}
    model = await engine.read(lambda: engine.vectors.model_of(agent_id)) or engine.embedder.model_id
    seed = f"{agent_id}:{engine.log.end_offset()}"

    def pick() -> list[tuple[int, str]]:
        rows = [r for r in engine.memories.of_agent(agent_id) if r.embedding_model == model]
        chosen = set(sample_ids([r.id for r in rows], seed, 100))
        return [(r.id, r.content) for r in rows if r.id in chosen]

    picked = await engine.read(pick)
    if len(picked) < MIN_EMBEDDED:
        return {"ok": False, "error": f"Need at least {MIN_EMBEDDED} embeddings, found {len(picked)}"}
    embeddings = await engine.embed([text for _, text in picked], model=model)
    vectors = {ident: e.vector() for (ident, _), e in zip(picked, embeddings, strict=True) if e is not None}
    result: dict[str, Any] = await engine.read(lambda: calibrate(engine, agent_id, beta, seed, vectors))
    result["seed"] = seed
    return result


for _tool in (
    Tool("store", StoreArgs, store, "Store a memory. Answers result: stored / skipped / rejected.", writes=True),
    Tool(
        "update_memory",
        UpdateArgs,
        update_memory,
        "Replace a memory's content (re-embedded). Refused if locked.",
        writes=True,
    ),
    Tool(
        "delete_memory",
        MemoryIdArgs,
        _simple_edit(c.DeleteMemory, "deleted_id", "deleted"),
        "Delete a memory. Refused if locked; its history stays.",
        writes=True,
    ),
    Tool(
        "lock_memory",
        MemoryIdArgs,
        _simple_edit(c.LockMemory, "locked_id", "locked"),
        "Protect a memory from edits and deletion (ranking is unchanged).",
        writes=True,
    ),
    Tool(
        "unlock_memory",
        MemoryIdArgs,
        _simple_edit(c.UnlockMemory, "unlocked_id", "unlocked"),
        "Lift a memory's lock.",
        writes=True,
    ),
    Tool(
        "archive_episode",
        ArchiveArgs,
        archive_episode,
        "Archive a conversation episode with a caller-computed summary.",
        writes=True,
    ),
    Tool("delete_episode", DeleteEpisodeArgs, delete_episode, "Delete an episode.", writes=True),
    Tool(
        "update_profile",
        ProfileArgs,
        update_profile,
        "Replace the agent's profile (at most one per agent).",
        writes=True,
    ),
    Tool(
        "delete_agent_data",
        AgentArgs,
        delete_agent_data,
        "Delete an agent's memories, episodes and profile; locked memories stay.",
        writes=True,
        admin=True,
    ),
    Tool(
        "set_recall_precision",
        PrecisionArgs,
        set_recall_precision,
        "Set an agent's recall precision (strict / balanced / lenient or a raw beta).",
        writes=True,
    ),
):
    register(_tool)
