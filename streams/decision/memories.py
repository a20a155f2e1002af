"""Deciders of the memory commands: store (with its dedup), update, delete, lock and unlock, verify."""

from __future__ import annotations

from memstream.streams import commands as c
from memstream.streams.decision.checks import check_metadata, check_model, check_text, embedding_payload, live_memory
from memstream.streams.decision.facts import AgentDecisionState
from memstream.streams.decision.keys import content_key, source_id_of
from memstream.streams.decision.state import DecisionState
from memstream.streams.decision.verdict import DecideContext, Decision, accept, refuse, skip


def visible_projects(project: str) -> tuple[str, ...]:
    """A scope sees its own bucket and the global '' pool (CONTRACTS R10, W2)."""
    return (project,) if project == "" else (project, "")


def decide_store(state: DecisionState, st: AgentDecisionState, cmd: c.StoreMemory, ctx: DecideContext) -> Decision:
    bad = (
        check_text(cmd, ctx, cmd.content, "content")
        or check_metadata(cmd, ctx, cmd.metadata)
        or check_model(cmd, ctx, st)
    )
    if bad:
        return bad
    project, channel = cmd.scope.project_id, cmd.scope.channel
    if cmd.msg_id is not None:
        for pj in visible_projects(project):
            hit = st.by_msg.get((pj, cmd.msg_id))
            if hit is not None:
                return skip_store(cmd, ctx, st, hit, "duplicate msg_id")
    key = content_key(cmd.content)
    source_id = source_id_of(cmd.source)
    for pj in visible_projects(project):
        for ch in (channel,) if channel == "" else (channel, ""):
            hit = st.by_content.get((pj, ch, key))
            if hit is None:
                continue
            if st.memories[hit].source_id == source_id:
                return skip_store(cmd, ctx, st, hit, "duplicate content")
            if (pj, ch) == (project, channel):
                # One copy per bucket: the same text from another source is refused, not merged.
                return refuse(
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
        "embedding": embedding_payload(cmd),
    }
    return accept(cmd, ctx, ("memory.stored", payload))


def skip_store(cmd: c.StoreMemory, ctx: DecideContext, st: AgentDecisionState, hit: int, reason: str) -> Decision:
    """A duplicate store changes nothing, except that ``lock: true`` still locks the existing
    memory (as CPersona does): then the skip is carried by a lock event."""
    if cmd.lock and not st.memories[hit].locked:
        return accept(cmd, ctx, ("memory.locked", {"id": hit, "skipped": reason}))
    return skip(cmd, ctx, hit, reason, {"locked": True} if cmd.lock else None)


def decide_update(state: DecisionState, st: AgentDecisionState, cmd: c.UpdateMemory, ctx: DecideContext) -> Decision:
    found = live_memory(st, cmd, ctx, cmd.memory_id)
    if isinstance(found, Decision):
        return found
    if found.locked:
        return refuse(cmd, ctx, "locked", f"memory {cmd.memory_id} is locked")
    bad = (
        check_text(cmd, ctx, cmd.content, "content")
        or check_metadata(cmd, ctx, cmd.metadata)
        or check_model(cmd, ctx, st)
    )
    if bad:
        return bad
    twin = st.by_content.get((found.project, found.channel, content_key(cmd.content)))
    if twin is not None and twin != cmd.memory_id:
        # Two live memories in one bucket never share content, whichever path wrote them.
        return refuse(
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
        "embedding": embedding_payload(cmd),
    }
    return accept(cmd, ctx, ("memory.updated", payload))


def decide_delete(state: DecisionState, st: AgentDecisionState, cmd: c.DeleteMemory, ctx: DecideContext) -> Decision:
    found = live_memory(st, cmd, ctx, cmd.memory_id)
    if isinstance(found, Decision):
        return found
    if found.locked:
        return refuse(cmd, ctx, "locked", f"memory {cmd.memory_id} is locked")
    return accept(cmd, ctx, ("memory.deleted", {"id": cmd.memory_id}))


def decide_lock(
    state: DecisionState, st: AgentDecisionState, cmd: c.LockMemory | c.UnlockMemory, ctx: DecideContext
) -> Decision:
    found = live_memory(st, cmd, ctx, cmd.memory_id)
    if isinstance(found, Decision):
        return found
    lock = isinstance(cmd, c.LockMemory)
    return accept(cmd, ctx, ("memory.locked" if lock else "memory.unlocked", {"id": cmd.memory_id}))


def decide_verify(state: DecisionState, st: AgentDecisionState, cmd: c.VerifyMemory, ctx: DecideContext) -> Decision:
    # A locked memory may be verified: verifying asserts the content still holds, it edits nothing.
    found = live_memory(st, cmd, ctx, cmd.memory_id)
    if isinstance(found, Decision):
        return found
    return accept(cmd, ctx, ("memory.verified", {"id": cmd.memory_id, "note": cmd.note}))
