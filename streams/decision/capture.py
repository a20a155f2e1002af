"""A copy of the decision state for its snapshot, made on the writer, serialised elsewhere."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from memstream.streams.decision.associations.index import AssocIndex
from memstream.streams.decision.facts import AgentDecisionState
from memstream.streams.decision.state import DecisionState


def capture(state: DecisionState) -> DecisionState:
    """A copy of what the state's snapshot holds, which later folds do not change: taken on
    the writer thread, it is serialised on another while the writer goes on (an erasure's
    rewrite of the decision snapshot held every write for 0.4-0.9 s at 100k memories, most of
    it the memo of the erased agent's commands). Copies the memories' facts (mutable) and the
    containers; the memos are immutable or never changed once made, so they are shared. The
    dedup indexes are left out: a snapshot does not hold them."""
    out = type(state)(state.num_partitions)
    out.next_seq = list(state.next_seq)
    out.event_offset, out.audit_offset = state.event_offset, state.audit_offset
    for name, st in state.agents.items():
        out.agents[name] = AgentDecisionState(
            memories={mid: replace(f) for mid, f in st.memories.items()},
            episodes=dict(st.episodes),
            has_profile=st.has_profile,
            model=st.model,
            assoc=None if st.assoc is None else AssocIndex.from_snapshot(st.assoc.to_snapshot()),
            commands=OrderedDict(st.commands),
        )
    return out
