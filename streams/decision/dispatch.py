"""``decide``: a command judged by the decider of its type, purely, so replaying a log gives the same answers."""

from __future__ import annotations

from memstream.streams import commands as c
from memstream.streams.decision.agent import decide_delete_agent, decide_precision, decide_profile
from memstream.streams.decision.declarations import decide_associations, decide_standing
from memstream.streams.decision.embeddings import decide_reembed, decide_switch
from memstream.streams.decision.episodes import decide_archive, decide_delete_episode
from memstream.streams.decision.erasure import decide_erase_agent, decide_erase_memory
from memstream.streams.decision.memo import outcome_of_memo
from memstream.streams.decision.memories import decide_delete, decide_lock, decide_store, decide_update, decide_verify
from memstream.streams.decision.state import DecisionState
from memstream.streams.decision.verdict import DecideContext, Decision


def decide(state: DecisionState, cmd: c.Command, ctx: DecideContext) -> Decision:
    """Judge one command. A retried command id returns its first outcome and appends nothing."""
    st = state.agent(cmd.scope.agent_id)
    first = st.commands.get(cmd.command_id)
    if first is not None:
        return Decision(outcome_of_memo(first))
    # The commonest command first: each case is an isinstance check.
    match cmd:
        case c.StoreMemory():
            return decide_store(state, st, cmd, ctx)
        case c.UpdateMemory():
            return decide_update(state, st, cmd, ctx)
        case c.DeleteMemory():
            return decide_delete(state, st, cmd, ctx)
        case c.LockMemory() | c.UnlockMemory():
            return decide_lock(state, st, cmd, ctx)
        case c.VerifyMemory():
            return decide_verify(state, st, cmd, ctx)
        case c.ArchiveEpisode():
            return decide_archive(state, st, cmd, ctx)
        case c.DeleteEpisode():
            return decide_delete_episode(state, st, cmd, ctx)
        case c.UpdateProfile():
            return decide_profile(state, st, cmd, ctx)
        case c.SetRecallPrecision():
            return decide_precision(state, st, cmd, ctx)
        case c.DeleteAgentData():
            return decide_delete_agent(state, st, cmd, ctx)
        case c.DeclareStanding():
            return decide_standing(state, st, cmd, ctx)
        case c.DeclareAssociations():
            return decide_associations(state, st, cmd, ctx)
        case c.ReembedMemory():
            return decide_reembed(state, st, cmd, ctx)
        case c.SwitchEmbedding():
            return decide_switch(state, st, cmd, ctx)
        case c.EraseMemory():
            return decide_erase_memory(state, st, cmd, ctx)
        case c.EraseAgentData():
            return decide_erase_agent(state, st, cmd, ctx)
    raise TypeError(f"no decider for {type(cmd).__name__}")
