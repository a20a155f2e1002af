"""Decision state and deciders: the rules every write must pass, as pure functions.

``DecisionState`` is a fold of the log (events and audit records) holding only what the rules
need: which memories are live, their dedup keys, locks, episodes, the profile flag and the
outcomes of recent command ids. ``decide`` maps (state, command) to the events to append (or
the audit record of a refusal or skip) and the caller's outcome. Nothing here does I/O or
reads a clock: time arrives on the command, ids come from the fold's counters, so replaying
the same log gives the same state and the same answers.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from memstream.streams import commands as c
from memstream.streams.associations import AssocIndex, decide_declaration
from memstream.streams.events import AuditRecord, Event, EventType, parse_ref

# Retries are recognised within this many most recent commands per agent. A bound keeps the
# fold's memory flat on a log of millions of commands; it is counted in commands, not in
# wall-clock time, so the window is itself a deterministic function of the log.
COMMAND_MEMO_PER_AGENT: Final = 50_000


@dataclass(frozen=True, slots=True)
class Limits:
    max_content_chars: int = 100_000
    max_metadata_bytes: int = 64_000
    max_keywords_chars: int = 10_000


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the caller hears. ``result`` is applied / skipped / rejected."""

    result: str
    id: int | None = None
    reason: str | None = None
    error: str | None = None  # a stable code for rejections: invalid, not_found, locked, ...
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"result": self.result}
        if self.id is not None:
            d["id"] = self.id
        if self.reason is not None:
            d["reason"] = self.reason
        if self.error is not None:
            d["error"] = self.error
        if self.detail:
            d["detail"] = self.detail
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Outcome:
        return cls(d["result"], d.get("id"), d.get("reason"), d.get("error"), d.get("detail", {}))


@dataclass(slots=True)
class MemoryFacts:
    project: str
    channel: str
    msg_id: str | None
    content_key: bytes
    source_id: str = ""
    locked: bool = False
    # Models this memory has a vector of: one after a write, two while a re-embed is under
    # way (see ``memory.reembedded``), so the switch can check that nobody is left behind.
    models: tuple[str, ...] = ()


@dataclass(slots=True)
class AgentDecisionState:
    memories: dict[int, MemoryFacts] = field(default_factory=dict)
    by_msg: dict[tuple[str, str], int] = field(default_factory=dict)
    by_content: dict[tuple[str, str, bytes], int] = field(default_factory=dict)
    # episode id -> models it has a vector of (as ``MemoryFacts.models``)
    episodes: dict[int, tuple[str, ...]] = field(default_factory=dict)
    has_profile: bool = False
    # The embedding model of the agent's vectors: fixed by its first embedded write, changed
    # only by a completed re-embed (``embedding.switched``), so one agent's vectors are never
    # a mix of models that cannot be compared.
    model: str | None = None
    # Declared associations (streams/associations.py); None until the agent declares any.
    assoc: AssocIndex | None = None
    # command id -> its first outcome: a dict for audited outcomes, a compact event memo
    # (see ``memo_of_event``) for applied ones.
    commands: OrderedDict[str, Any] = field(default_factory=OrderedDict)

    def remember(self, command_id: str, outcome: Any) -> None:
        if command_id in self.commands:
            return  # the first outcome is the one a retry gets back
        self.commands[command_id] = outcome
        if len(self.commands) > COMMAND_MEMO_PER_AGENT:
            self.commands.popitem(last=False)

    def saw_model(self, models: tuple[str, ...]) -> None:
        if self.model is None and models:
            self.model = models[0]

    def missing_model(self, model: str) -> int:
        """How many live memories and episodes have no vector of ``model``."""
        gone = sum(1 for f in self.memories.values() if model not in f.models)
        return gone + sum(1 for models in self.episodes.values() if model not in models)

    def forget_memory(self, memory_id: int) -> None:
        facts = self.memories.pop(memory_id, None)
        if facts is None:
            return
        if facts.msg_id is not None and self.by_msg.get((facts.project, facts.msg_id)) == memory_id:
            del self.by_msg[(facts.project, facts.msg_id)]
        key = (facts.project, facts.channel, facts.content_key)
        if self.by_content.get(key) == memory_id:
            del self.by_content[key]


# Model tuples are shared, not built per record: a fold of a million memories holds one.
_MODEL_TUPLES: dict[Any, tuple[str, ...]] = {}


def _models(*models: str) -> tuple[str, ...]:
    t = _MODEL_TUPLES.get(models)
    if t is None:
        t = _MODEL_TUPLES[models] = models
    return t


def _models_of(p: dict[str, Any]) -> tuple[str, ...]:
    emb = p.get("embedding")
    return _models(emb["model"]) if emb else ()


def _with_model(models: tuple[str, ...], model: str) -> tuple[str, ...]:
    return models if model in models else _models(*models, model)


def source_id_of(source: Any) -> str:
    """The part of a source that content dedup compares: its id (``""`` when anonymous)."""
    return str(source.get("id") or "") if isinstance(source, dict) else ""


def content_key(content: str) -> bytes:
    """Content dedup compares a 128-bit digest, so the fold never holds the texts."""
    return hashlib.blake2b(content.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class DecisionState:
    """The fold of the whole log (all partitions an owner holds) that deciders consult."""

    # The snapshot layout; a snapshot of another format is discarded and the state refolded.
    FORMAT: Final = 2

    def __init__(self, num_partitions: int) -> None:
        self.num_partitions = num_partitions
        self.agents: dict[str, AgentDecisionState] = {}
        self.next_seq: list[int] = [0] * num_partitions  # id allocation, per partition
        self.event_offset = -1  # last applied event offset
        self.audit_offset = -1  # last applied audit offset

    def agent(self, agent_id: str) -> AgentDecisionState:
        st = self.agents.get(agent_id)
        if st is None:
            st = self.agents[agent_id] = AgentDecisionState()
        return st

    def peek_id(self, partition: int) -> int:
        """The id the partition's next record gets: ``seq * partitions + partition + 1``.

        Unique across partitions without coordination (each partition owns one residue), never
        0, and allocated by folding the event that uses it, so replay re-derives it exactly."""
        return self.next_seq[partition] * self.num_partitions + partition + 1

    def _saw_id(self, ident: int) -> None:
        p = (ident - 1) % self.num_partitions
        seq = (ident - 1) // self.num_partitions
        if seq >= self.next_seq[p]:
            self.next_seq[p] = seq + 1

    # -- the fold ---------------------------------------------------------------------------

    def apply_event(self, offset: int, ev: dict[str, Any]) -> None:
        if offset <= self.event_offset:
            return  # at-least-once delivery: an event seen twice changes nothing
        self.event_offset = offset
        st = self.agent(ev["scope"]["agent_id"])
        p = ev["payload"]
        t = ev["type"]
        facts: MemoryFacts | None
        if t == "memory.stored":
            mid = p["id"]
            self._saw_id(mid)
            scope = ev["scope"]
            facts = MemoryFacts(
                scope["project_id"],
                scope["channel"],
                p.get("msg_id"),
                content_key(p["content"]),
                source_id_of(p.get("source")),
                bool(p.get("locked", False)),
                _models_of(p),
            )
            st.saw_model(facts.models)
            st.memories[mid] = facts
            if facts.msg_id is not None:
                st.by_msg.setdefault((facts.project, facts.msg_id), mid)
            st.by_content.setdefault((facts.project, facts.channel, facts.content_key), mid)
        elif t == "memory.updated":
            facts = st.memories.get(p["id"])
            if facts is not None:
                old = (facts.project, facts.channel, facts.content_key)
                if st.by_content.get(old) == p["id"]:
                    del st.by_content[old]
                facts.content_key = content_key(p["content"])
                st.by_content.setdefault((facts.project, facts.channel, facts.content_key), p["id"])
                # The old vectors described the old text: only the update's own one is left.
                facts.models = _models_of(p)
                st.saw_model(facts.models)
        elif t == "memory.deleted":
            st.forget_memory(p["id"])
            if st.assoc is not None:
                st.assoc.forget_record(f"mem:{p['id']}")
        elif t == "memory.locked" or t == "memory.unlocked":
            facts = st.memories.get(p["id"])
            if facts is not None:
                facts.locked = t == "memory.locked"
        elif t == "memory.reembedded":
            model = p["embedding"]["model"]
            if p.get("kind", "mem") == "ep":
                if p["id"] in st.episodes:
                    st.episodes[p["id"]] = _with_model(st.episodes[p["id"]], model)
            else:
                facts = st.memories.get(p["id"])
                if facts is not None:
                    facts.models = _with_model(facts.models, model)
        elif t == "embedding.switched":
            model = p["model"]
            st.model = model
            for facts in st.memories.values():
                facts.models = _models(model) if model in facts.models else ()
            for eid, models in st.episodes.items():
                st.episodes[eid] = _models(model) if model in models else ()
        elif t == "episode.archived":
            self._saw_id(p["id"])
            st.episodes[p["id"]] = _models_of(p)
            st.saw_model(st.episodes[p["id"]])
        elif t == "episode.deleted":
            st.episodes.pop(p["id"], None)
            if st.assoc is not None:
                st.assoc.forget_record(f"ep:{p['id']}")
        elif t == "profile.updated":
            st.has_profile = True
            st.saw_model(_models_of(p))
        elif t == "agent_data.deleted":
            for mid in p["memory_ids"]:
                st.forget_memory(mid)
            for eid in p["episode_ids"]:
                st.episodes.pop(eid, None)
            if p.get("profile"):
                st.has_profile = False
            if st.assoc is not None:
                for ref in [f"mem:{i}" for i in p["memory_ids"]] + [f"ep:{i}" for i in p["episode_ids"]]:
                    st.assoc.forget_record(ref)
        elif t == "associations.declared" or t == "associations.retracted":
            if st.assoc is None:
                st.assoc = AssocIndex()
            st.assoc.apply(ev["scope"]["project_id"], ev["scope"]["channel"], p)
        st.remember(ev["command_id"], memo_of_event(t, p))

    def apply_audit(self, offset: int, rec: dict[str, Any]) -> None:
        if offset <= self.audit_offset:
            return
        self.audit_offset = offset
        self.agent(rec["scope"]["agent_id"]).remember(rec["command_id"], rec["outcome"])

    # -- snapshot and digest ----------------------------------------------------------------

    def to_snapshot(self) -> dict[str, Any]:
        """A canonical, JSON-able form: equal states give byte-equal snapshots."""
        agents = {}
        for name in sorted(self.agents):
            st = self.agents[name]
            agents[name] = {
                "memories": [
                    [mid, f.project, f.channel, f.msg_id, f.content_key.hex(), f.source_id, f.locked, list(f.models)]
                    for mid, f in sorted(st.memories.items())
                ],
                "episodes": [[eid, list(models)] for eid, models in sorted(st.episodes.items())],
                "has_profile": st.has_profile,
                "model": st.model,
                "commands": [[k, v] for k, v in st.commands.items()],
            }
            if st.assoc is not None:
                agents[name]["assoc"] = st.assoc.to_snapshot()
        return {
            "format": self.FORMAT,
            "num_partitions": self.num_partitions,
            "next_seq": self.next_seq,
            "event_offset": self.event_offset,
            "audit_offset": self.audit_offset,
            "agents": agents,
        }

    @classmethod
    def from_snapshot(cls, snap: dict[str, Any]) -> DecisionState:
        state = cls(snap["num_partitions"])
        state.next_seq = list(snap["next_seq"])
        state.event_offset = snap["event_offset"]
        state.audit_offset = snap["audit_offset"]
        for name, a in snap["agents"].items():
            st = state.agent(name)
            for mid, project, channel, msg_id, key, source_id, locked, models in a["memories"]:
                facts = MemoryFacts(project, channel, msg_id, bytes.fromhex(key), source_id, locked, _models(*models))
                st.memories[mid] = facts
            # Index maps are rebuilt in id order, the order the fold first saw them.
            for mid, f in sorted(st.memories.items()):
                if f.msg_id is not None:
                    st.by_msg.setdefault((f.project, f.msg_id), mid)
                st.by_content.setdefault((f.project, f.channel, f.content_key), mid)
            st.episodes = {eid: _models(*models) for eid, models in a["episodes"]}
            st.has_profile = a["has_profile"]
            st.model = a["model"]
            if "assoc" in a:
                st.assoc = AssocIndex.from_snapshot(a["assoc"])
            st.commands = OrderedDict((k, v if isinstance(v, dict) else tuple(v)) for k, v in a["commands"])
        return state

    def digest(self) -> str:
        snap = self.to_snapshot()
        snap.pop("event_offset")
        snap.pop("audit_offset")
        return hashlib.sha256(orjson.dumps(snap)).hexdigest()


# -- deciders -------------------------------------------------------------------------------


@dataclass(slots=True)
class Decision:
    outcome: Outcome
    events: list[Event] = field(default_factory=list)
    audit: AuditRecord | None = None


@dataclass(frozen=True, slots=True)
class DecideContext:
    partition: int
    limits: Limits
    new_id: Any  # () -> str: event/record ids; injected so tests can make them deterministic


def _event(cmd: c.Command, ctx: DecideContext, type_: EventType, payload: dict[str, Any]) -> Event:
    emb = getattr(cmd, "embedding", None)
    return Event(
        vector=emb.data if emb is not None and payload.get("embedding") is not None else None,
        id=ctx.new_id(),
        type=type_,
        scope=cmd.scope,
        actor=cmd.actor,
        occurred_at=cmd.received_at,
        command_id=cmd.command_id,
        payload=payload,
    )


def _audit(cmd: c.Command, ctx: DecideContext, outcome: Outcome) -> AuditRecord:
    request = cmd.model_dump(exclude={"command_id", "scope", "actor", "received_at", "embedding"}, mode="json")
    for key in ("content", "summary"):
        if isinstance(request.get(key), str) and len(request[key]) > 512:
            request[key] = request[key][:512] + f"…[{len(request[key]) - 512} more chars]"
    return AuditRecord(
        id=ctx.new_id(),
        kind="skipped" if outcome.result == "skipped" else "refused",
        command=cmd.name,
        command_id=cmd.command_id,
        scope=cmd.scope,
        actor=cmd.actor,
        occurred_at=cmd.received_at,
        outcome=outcome.to_dict(),
        request=request,
    )


def _refuse(cmd: c.Command, ctx: DecideContext, error: str, reason: str) -> Decision:
    out = Outcome("rejected", reason=reason, error=error)
    return Decision(out, audit=_audit(cmd, ctx, out))


def _skip(
    cmd: c.Command, ctx: DecideContext, existing: int, reason: str, detail: dict[str, Any] | None = None
) -> Decision:
    out = Outcome("skipped", id=existing, reason=reason, detail=detail or {})
    return Decision(out, audit=_audit(cmd, ctx, out))


def _accept(cmd: c.Command, ctx: DecideContext, *events: tuple[EventType, dict[str, Any]]) -> Decision:
    evs = [_event(cmd, ctx, t, p) for t, p in events]
    return Decision(outcome_of_memo(memo_of_event(evs[0].type, evs[0].payload)), events=evs)


def _check_text(cmd: c.Command, ctx: DecideContext, text: str, what: str) -> Decision | None:
    if not text.strip():
        return _refuse(cmd, ctx, "invalid", f"{what} is empty")
    if len(text) > ctx.limits.max_content_chars:
        return _refuse(
            cmd,
            ctx,
            "too_large",
            f"{what} has {len(text)} characters; the limit is {ctx.limits.max_content_chars}",
        )
    return None


def _check_metadata(cmd: c.Command, ctx: DecideContext, metadata: dict[str, Any] | None) -> Decision | None:
    if metadata and len(orjson.dumps(metadata)) > ctx.limits.max_metadata_bytes:
        return _refuse(cmd, ctx, "too_large", f"metadata exceeds {ctx.limits.max_metadata_bytes} bytes")
    return None


def _check_model(cmd: c.Command, ctx: DecideContext, st: AgentDecisionState) -> Decision | None:
    """An agent's vectors stay comparable: a write embedded with another model than the
    agent's is refused rather than stored as a vector no query of the agent would match."""
    emb = getattr(cmd, "embedding", None)
    if emb is None or st.model is None or emb.model == st.model:
        return None
    return _refuse(
        cmd,
        ctx,
        "model_mismatch",
        f"agent {cmd.scope.agent_id!r} keeps vectors of model {st.model!r}; this write was embedded with "
        f"{emb.model!r}. Embed with {st.model!r}, or move the agent with `memstream reembed --model {emb.model}`",
    )


def _embedding_payload(cmd: c.StoreMemory | c.UpdateMemory | c.ArchiveEpisode | c.UpdateProfile) -> Any:
    return cmd.embedding.header() if cmd.embedding is not None else None


def visible_projects(project: str) -> tuple[str, ...]:
    """A scope sees its own bucket and the global '' pool (CONTRACTS R10, W2)."""
    return (project,) if project == "" else (project, "")


def _live_memory(st: AgentDecisionState, cmd: c.Command, ctx: DecideContext, mid: int) -> Decision | MemoryFacts:
    facts = st.memories.get(mid)
    if facts is None:
        return _refuse(cmd, ctx, "not_found", f"memory {mid} not found")
    return facts


def decide(state: DecisionState, cmd: c.Command, ctx: DecideContext) -> Decision:
    """Judge one command. A retried command id returns its first outcome and appends nothing."""
    st = state.agent(cmd.scope.agent_id)
    first = st.commands.get(cmd.command_id)
    if first is not None:
        return Decision(outcome_of_memo(first))
    handler = _DECIDERS[type(cmd)]
    return handler(state, st, cmd, ctx)


def _decide_store(state: DecisionState, st: AgentDecisionState, cmd: Any, ctx: DecideContext) -> Decision:
    bad = (
        _check_text(cmd, ctx, cmd.content, "content")
        or _check_metadata(cmd, ctx, cmd.metadata)
        or _check_model(cmd, ctx, st)
    )
    if bad:
        return bad
    project, channel = cmd.scope.project_id, cmd.scope.channel
    if cmd.msg_id is not None:
        for pj in visible_projects(project):
            hit = st.by_msg.get((pj, cmd.msg_id))
            if hit is not None:
                return _skip_store(cmd, ctx, st, hit, "duplicate msg_id")
    key = content_key(cmd.content)
    source_id = source_id_of(cmd.source)
    for pj in visible_projects(project):
        for ch in (channel,) if channel == "" else (channel, ""):
            hit = st.by_content.get((pj, ch, key))
            if hit is None:
                continue
            if st.memories[hit].source_id == source_id:
                return _skip_store(cmd, ctx, st, hit, "duplicate content")
            if (pj, ch) == (project, channel):
                # One copy per bucket: the same text from another source is refused, not merged.
                return _refuse(
                    cmd,
                    ctx,
                    "conflict",
                    "this content is already stored under a different source id in the same agent, project and "
                    "channel; one copy is kept per bucket, so it was not stored for this source",
                )
    payload = {
        "id": state.peek_id(ctx.partition),
        "content": cmd.content,
        "msg_id": cmd.msg_id,
        "source": cmd.source,
        "metadata": cmd.metadata,
        "timestamp": cmd.timestamp.isoformat() if cmd.timestamp else None,
        "locked": cmd.lock,
        "embedding": _embedding_payload(cmd),
    }
    return _accept(cmd, ctx, ("memory.stored", payload))


def _skip_store(cmd: Any, ctx: DecideContext, st: AgentDecisionState, hit: int, reason: str) -> Decision:
    """A duplicate store changes nothing, except that ``lock: true`` still locks the existing
    memory (as CPersona does): then the skip is carried by a lock event."""
    if cmd.lock and not st.memories[hit].locked:
        return _accept(cmd, ctx, ("memory.locked", {"id": hit, "skipped": reason}))
    return _skip(cmd, ctx, hit, reason, {"locked": True} if cmd.lock else None)


def _decide_update(state: DecisionState, st: AgentDecisionState, cmd: Any, ctx: DecideContext) -> Decision:
    found = _live_memory(st, cmd, ctx, cmd.memory_id)
    if isinstance(found, Decision):
        return found
    if found.locked:
        return _refuse(cmd, ctx, "locked", f"memory {cmd.memory_id} is locked")
    bad = (
        _check_text(cmd, ctx, cmd.content, "content")
        or _check_metadata(cmd, ctx, cmd.metadata)
        or _check_model(cmd, ctx, st)
    )
    if bad:
        return bad
    twin = st.by_content.get((found.project, found.channel, content_key(cmd.content)))
    if twin is not None and twin != cmd.memory_id:
        # Two live memories in one bucket never share content, whichever path wrote them.
        return _refuse(
            cmd,
            ctx,
            "conflict",
            (
                f"memory {twin} in the same agent, project and channel already holds this content, "
                "and one copy is kept per bucket"
            ),
        )
    payload = {
        "id": cmd.memory_id,
        "content": cmd.content,
        "metadata": cmd.metadata,
        "embedding": _embedding_payload(cmd),
    }
    return _accept(cmd, ctx, ("memory.updated", payload))


def _decide_delete(state: DecisionState, st: AgentDecisionState, cmd: Any, ctx: DecideContext) -> Decision:
    found = _live_memory(st, cmd, ctx, cmd.memory_id)
    if isinstance(found, Decision):
        return found
    if found.locked:
        return _refuse(cmd, ctx, "locked", f"memory {cmd.memory_id} is locked")
    return _accept(cmd, ctx, ("memory.deleted", {"id": cmd.memory_id}))


def _decide_lock(state: DecisionState, st: AgentDecisionState, cmd: Any, ctx: DecideContext) -> Decision:
    found = _live_memory(st, cmd, ctx, cmd.memory_id)
    if isinstance(found, Decision):
        return found
    lock = isinstance(cmd, c.LockMemory)
    return _accept(cmd, ctx, ("memory.locked" if lock else "memory.unlocked", {"id": cmd.memory_id}))


def _decide_archive(state: DecisionState, st: AgentDecisionState, cmd: Any, ctx: DecideContext) -> Decision:
    bad = (
        _check_text(cmd, ctx, cmd.summary, "summary")
        or _check_metadata(cmd, ctx, cmd.metadata)
        or _check_model(cmd, ctx, st)
    )
    if bad:
        return bad
    if len(cmd.keywords) > ctx.limits.max_keywords_chars:
        return _refuse(cmd, ctx, "too_large", f"keywords exceed {ctx.limits.max_keywords_chars} characters")
    if cmd.start_time and cmd.end_time and cmd.end_time < cmd.start_time:
        return _refuse(cmd, ctx, "invalid", "end_time is before start_time")
    payload = {
        "id": state.peek_id(ctx.partition),
        "summary": cmd.summary,
        "keywords": cmd.keywords,
        "resolved": cmd.resolved,
        "start_time": cmd.start_time.isoformat() if cmd.start_time else None,
        "end_time": cmd.end_time.isoformat() if cmd.end_time else None,
        "metadata": cmd.metadata,
        "embedding": _embedding_payload(cmd),
    }
    return _accept(cmd, ctx, ("episode.archived", payload))


def _decide_delete_episode(state: DecisionState, st: AgentDecisionState, cmd: Any, ctx: DecideContext) -> Decision:
    if cmd.episode_id not in st.episodes:
        return _refuse(cmd, ctx, "not_found", f"episode {cmd.episode_id} not found")
    return _accept(cmd, ctx, ("episode.deleted", {"id": cmd.episode_id}))


def _decide_profile(state: DecisionState, st: AgentDecisionState, cmd: Any, ctx: DecideContext) -> Decision:
    bad = _check_text(cmd, ctx, cmd.content, "profile") or _check_model(cmd, ctx, st)
    if bad:
        return bad
    payload = {"content": cmd.content, "embedding": _embedding_payload(cmd)}
    return _accept(cmd, ctx, ("profile.updated", payload))


def _decide_delete_agent(state: DecisionState, st: AgentDecisionState, cmd: Any, ctx: DecideContext) -> Decision:
    # Locked memories survive (W5: unlike CPersona, a lock protects from this too).
    doomed = sorted(mid for mid, f in st.memories.items() if not f.locked)
    kept = sorted(mid for mid, f in st.memories.items() if f.locked)
    payload = {
        "memory_ids": doomed,
        "episode_ids": sorted(st.episodes),
        "profile": st.has_profile,
        "kept_locked": kept,
    }
    return _accept(cmd, ctx, ("agent_data.deleted", payload))


def _decide_precision(state: DecisionState, st: AgentDecisionState, cmd: Any, ctx: DecideContext) -> Decision:
    return _accept(cmd, ctx, ("recall_precision.set", {"level": cmd.level, "beta": cmd.beta, "gate": cmd.gate}))


def _decide_standing(state: DecisionState, st: AgentDecisionState, cmd: Any, ctx: DecideContext) -> Decision:
    try:
        kind, ident = parse_ref(cmd.ref)
    except ValueError as exc:
        return _refuse(cmd, ctx, "invalid", str(exc))
    if (kind == "mem" and ident not in st.memories) or (kind == "ep" and ident not in st.episodes):
        return _refuse(cmd, ctx, "not_found", f"{cmd.ref} not found")
    payload = {"ref": f"{kind}:{ident}", "standing": cmd.standing, "note": cmd.note}
    return _accept(cmd, ctx, ("standing.declared", payload))


def _decide_reembed(state: DecisionState, st: AgentDecisionState, cmd: Any, ctx: DecideContext) -> Decision:
    if cmd.kind == "mem":
        facts = st.memories.get(cmd.memory_id)
        if facts is None:
            return _refuse(cmd, ctx, "not_found", f"memory {cmd.memory_id} not found")
        if cmd.content_key is not None and facts.content_key.hex() != cmd.content_key:
            # The text changed between the job reading it and this command: the vector would
            # describe the old text. The job's next pass embeds the new one.
            return _refuse(cmd, ctx, "conflict", f"memory {cmd.memory_id} changed since it was read for re-embedding")
    elif cmd.memory_id not in st.episodes:
        return _refuse(cmd, ctx, "not_found", f"episode {cmd.memory_id} not found")
    payload = {"id": cmd.memory_id, "kind": cmd.kind, "embedding": cmd.embedding.header()}
    return _accept(cmd, ctx, ("memory.reembedded", payload))


def _decide_switch(state: DecisionState, st: AgentDecisionState, cmd: Any, ctx: DecideContext) -> Decision:
    missing = st.missing_model(cmd.model)
    if missing:
        # The switch is the moment recall moves to the new model: everyone must be there first,
        # or the records left behind would vanish from dense recall.
        return _refuse(
            cmd, ctx, "incomplete", f"{missing} memories or episodes have no vector of model {cmd.model!r} yet"
        )
    payload = {"model": cmd.model, "previous": st.model}
    return _accept(cmd, ctx, ("embedding.switched", payload))


def _decide_associations(state: DecisionState, st: AgentDecisionState, cmd: Any, ctx: DecideContext) -> Decision:
    """Judge a declaration (streams/associations.py). One event carries all of it, resolved;
    a call that changes nothing (only dropped or repeated items) is audited as skipped, with
    the same answer, so a retry still gets it back (W9)."""

    def exists(node: tuple[str, int]) -> bool:
        return node[1] in (st.memories if node[0] == "mem" else st.episodes)

    payload, changed = decide_declaration(
        st.assoc or AssocIndex(),
        cmd.scope.project_id,
        cmd.scope.channel,
        cmd.associations,
        cmd.anchor_ref,
        cmd.retract,
        exists,
    )
    if not changed:
        return _skip_quiet(cmd, ctx, payload["report"])
    declared = payload["entities"] or payload["mentions"] or payload["relations"]
    return _accept(cmd, ctx, ("associations.declared" if declared else "associations.retracted", payload))


def _skip_quiet(cmd: c.Command, ctx: DecideContext, report: dict[str, Any]) -> Decision:
    out = Outcome("skipped", detail={"report": report})
    return Decision(out, audit=_audit(cmd, ctx, out))


def _decide_verify(state: DecisionState, st: AgentDecisionState, cmd: Any, ctx: DecideContext) -> Decision:
    # A locked memory may be verified: verifying asserts the content still holds, it edits nothing.
    found = _live_memory(st, cmd, ctx, cmd.memory_id)
    if isinstance(found, Decision):
        return found
    return _accept(cmd, ctx, ("memory.verified", {"id": cmd.memory_id, "note": cmd.note}))


_DECIDERS: dict[type, Any] = {
    c.StoreMemory: _decide_store,
    c.UpdateMemory: _decide_update,
    c.DeleteMemory: _decide_delete,
    c.LockMemory: _decide_lock,
    c.UnlockMemory: _decide_lock,
    c.ArchiveEpisode: _decide_archive,
    c.DeleteEpisode: _decide_delete_episode,
    c.UpdateProfile: _decide_profile,
    c.DeleteAgentData: _decide_delete_agent,
    c.SetRecallPrecision: _decide_precision,
    c.DeclareStanding: _decide_standing,
    c.ReembedMemory: _decide_reembed,
    c.SwitchEmbedding: _decide_switch,
    c.DeclareAssociations: _decide_associations,
    c.VerifyMemory: _decide_verify,
}


def memo_of_event(t: str, p: dict[str, Any]) -> tuple[Any, ...]:
    """What a retry needs of an applied command's first event, kept small: the fold stores one
    per recent command, and computing a full outcome for each would dominate replay time."""
    if t == "agent_data.deleted":
        counts = (len(p["memory_ids"]), len(p["episode_ids"]), 1 if p["profile"] else 0, len(p["kept_locked"]))
        return (t, None, counts)
    if t == "memory.stored":
        return (t, p["id"], p.get("embedding") is not None, bool(p.get("locked")))
    if t == "memory.locked" and p.get("skipped"):
        return (t, p["id"], p["skipped"])
    if t == "associations.declared" or t == "associations.retracted":
        return (t, None, p["report"])
    return (t, p.get("id"))


def outcome_of_memo(memo: Any) -> Outcome:
    """The caller's outcome from a memo: audited outcomes are stored whole, applied ones are
    re-derived, so a replayed log answers a retry exactly as the live decision answered."""
    if isinstance(memo, dict):
        return Outcome.from_dict(memo)
    t = memo[0]
    if t == "agent_data.deleted":
        memories, episodes, profile, kept = memo[2]
        detail = {"memories": memories, "episodes": episodes, "profile": profile, "kept_locked": kept}
        return Outcome("applied", detail=detail)
    if t == "memory.stored":
        detail = {"embedded": memo[2]}
        if memo[3]:
            detail["locked"] = True
        return Outcome("applied", id=memo[1], detail=detail)
    if t == "memory.locked" and len(memo) == 3:
        return Outcome("skipped", id=memo[1], reason=memo[2], detail={"locked": True})
    if t == "associations.declared" or t == "associations.retracted":
        return Outcome("applied", detail={"report": memo[2]})
    return Outcome("applied", id=memo[1])
