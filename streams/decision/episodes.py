"""Deciders of the episode commands: archive and delete."""

from __future__ import annotations

from memstream.streams import commands as c
from memstream.streams.decision.checks import check_metadata, check_model, check_text, embedding_payload
from memstream.streams.decision.facts import AgentDecisionState
from memstream.streams.decision.state import DecisionState
from memstream.streams.decision.verdict import DecideContext, Decision, accept, refuse


def decide_archive(state: DecisionState, st: AgentDecisionState, cmd: c.ArchiveEpisode, ctx: DecideContext) -> Decision:
    bad = (
        check_text(cmd, ctx, cmd.summary, "summary")
        or check_metadata(cmd, ctx, cmd.metadata)
        or check_model(cmd, ctx, st)
    )
    if bad:
        return bad
    if len(cmd.keywords) > ctx.limits.max_keywords_chars:
        return refuse(cmd, ctx, "too_large", f"keywords exceed {ctx.limits.max_keywords_chars} characters")
    if cmd.start_time and cmd.end_time and cmd.end_time < cmd.start_time:
        return refuse(cmd, ctx, "invalid", "end_time is before start_time")
    payload = {
        "id": state.peek_id(ctx.partition),
        "summary": cmd.summary,
        "keywords": cmd.keywords,
        "resolved": cmd.resolved,
        "start_time": cmd.start_time.isoformat() if cmd.start_time else None,
        "end_time": cmd.end_time.isoformat() if cmd.end_time else None,
        "metadata": cmd.metadata,
        "embedding": embedding_payload(cmd),
    }
    return accept(cmd, ctx, ("episode.archived", payload))


def decide_delete_episode(
    state: DecisionState, st: AgentDecisionState, cmd: c.DeleteEpisode, ctx: DecideContext
) -> Decision:
    if cmd.episode_id not in st.episodes:
        return refuse(cmd, ctx, "not_found", f"episode {cmd.episode_id} not found")
    return accept(cmd, ctx, ("episode.deleted", {"id": cmd.episode_id}))
