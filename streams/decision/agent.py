"""Deciders of the agent-wide commands: profile, recall precision, deleting the agent's data."""

from __future__ import annotations

from memstream.streams import commands as c
from memstream.streams.decision.checks import check_model, check_text, embedding_payload
from memstream.streams.decision.facts import AgentDecisionState
from memstream.streams.decision.state import DecisionState
from memstream.streams.decision.verdict import DecideContext, Decision, accept


def decide_profile(state: DecisionState, st: AgentDecisionState, cmd: c.UpdateProfile, ctx: DecideContext) -> Decision:
    bad = check_text(cmd, ctx, cmd.content, "profile") or check_model(cmd, ctx, st)
    if bad:
        return bad
    payload = {"content": cmd.content, "embedding": embedding_payload(cmd)}
    return accept(cmd, ctx, ("profile.updated", payload))


def decide_precision(
    state: DecisionState, st: AgentDecisionState, cmd: c.SetRecallPrecision, ctx: DecideContext
) -> Decision:
    return accept(cmd, ctx, ("recall_precision.set", {"level": cmd.level, "beta": cmd.beta, "gate": cmd.gate}))


def decide_delete_agent(
    state: DecisionState, st: AgentDecisionState, cmd: c.DeleteAgentData, ctx: DecideContext
) -> Decision:
    # Locked memories survive (W5: unlike CPersona, a lock protects from this too).
    doomed = sorted(mid for mid, f in st.memories.items() if not f.locked)
    kept = sorted(mid for mid, f in st.memories.items() if f.locked)
    payload = {
        "memory_ids": doomed,
        "episode_ids": sorted(st.episodes),
        "profile": st.has_profile,
        "kept_locked": kept,
    }
    return accept(cmd, ctx, ("agent_data.deleted", payload))
