"""Deciders of a model migration: a record's vector of the new model, then the agent's switch to it."""

from __future__ import annotations

from memstream.streams import commands as c
from memstream.streams.decision.facts import AgentDecisionState
from memstream.streams.decision.state import DecisionState
from memstream.streams.decision.verdict import DecideContext, Decision, accept, refuse


def decide_reembed(state: DecisionState, st: AgentDecisionState, cmd: c.ReembedMemory, ctx: DecideContext) -> Decision:
    if cmd.kind == "mem":
        facts = st.memories.get(cmd.memory_id)
        if facts is None:
            return refuse(cmd, ctx, "not_found", f"memory {cmd.memory_id} not found")
        if cmd.content_key is not None and facts.content_key.hex() != cmd.content_key:
            # The text changed between the job reading it and this command: the vector would
            # describe the old text. The job's next pass embeds the new one.
            return refuse(cmd, ctx, "conflict", f"memory {cmd.memory_id} changed since it was read for re-embedding")
    elif cmd.memory_id not in st.episodes:
        return refuse(cmd, ctx, "not_found", f"episode {cmd.memory_id} not found")
    payload = {"id": cmd.memory_id, "kind": cmd.kind, "embedding": cmd.embedding.header()}
    return accept(cmd, ctx, ("memory.reembedded", payload))


def decide_switch(state: DecisionState, st: AgentDecisionState, cmd: c.SwitchEmbedding, ctx: DecideContext) -> Decision:
    missing = st.missing_model(cmd.model)
    if missing:
        # The switch is the moment recall moves to the new model: everyone must be there first,
        # or the records left behind would vanish from dense recall.
        return refuse(
            cmd, ctx, "incomplete", f"{missing} memories or episodes have no vector of model {cmd.model!r} yet"
        )
    payload = {"model": cmd.model, "previous": st.model}
    return accept(cmd, ctx, ("embedding.switched", payload))
