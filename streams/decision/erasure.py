"""Deciders of the erasure commands: which records an erasure takes and which key scopes die with them.

An erasure is a legal act, not an edit: a lock (W5) does not stop it, and the event says which
locked memories it overrode. The event holds ids, scopes and the reason, never content.
"""

from __future__ import annotations

import hashlib

from memstream.streams import commands as c
from memstream.streams.decision.facts import AgentDecisionState
from memstream.streams.decision.keys import source_id_of
from memstream.streams.decision.state import DecisionState
from memstream.streams.decision.verdict import DecideContext, Decision, accept, refuse


def source_digest(source: str) -> str:
    """How an erasure by source names it: a digest, so the clear log does not say who it was."""
    return hashlib.blake2b(source.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def decide_erase_memory(
    state: DecisionState, st: AgentDecisionState, cmd: c.EraseMemory, ctx: DecideContext
) -> Decision:
    ref = f"{cmd.kind}:{cmd.record_id}"
    if cmd.kind == "mem":
        facts = st.memories.get(cmd.record_id)
        if facts is None:
            return refuse(cmd, ctx, "not_found", f"memory {cmd.record_id} not found")
        memory_ids, episode_ids = [cmd.record_id], []
        overridden = [cmd.record_id] if facts.locked else []
    else:
        if cmd.record_id not in st.episodes:
            return refuse(cmd, ctx, "not_found", f"episode {cmd.record_id} not found")
        memory_ids, episode_ids, overridden = [], [cmd.record_id], []
    payload = {
        "kind": "memory" if cmd.kind == "mem" else "episode",
        "refs": [ref],
        "memory_ids": memory_ids,
        "episode_ids": episode_ids,
        "profile": False,
        "agent_scope": False,
        "scopes": [ref],
        "locked_overridden": overridden,
        "reason": cmd.reason,
    }
    return accept(cmd, ctx, ("record.erased", payload))


def decide_erase_agent(
    state: DecisionState, st: AgentDecisionState, cmd: c.EraseAgentData, ctx: DecideContext
) -> Decision:
    if cmd.source is not None:
        memory_ids = sorted(mid for mid, f in st.memories.items() if f.source_id == source_id_of({"id": cmd.source}))
        scopes = [f"mem:{i}" for i in memory_ids]
        payload = {
            "kind": "source",
            "source_digest": source_digest(cmd.source),
            "memory_ids": memory_ids,
            "episode_ids": [],
            "profile": False,
            "agent_scope": False,
            "scopes": scopes,
            "locked_overridden": sorted(st.locked.intersection(memory_ids)),
            "reason": cmd.reason,
        }
        return accept(cmd, ctx, ("agent.erased", payload))
    # Everything of the agent: the event names no record, only how many there were (for the
    # answer); every consumer takes the ids from its own state (streams/decision/whole_agent.py).
    payload = {
        "kind": "agent",
        "source_digest": None,
        "memories": len(st.memories),
        "episodes": len(st.episodes),
        "profile": st.has_profile,
        "agent_scope": True,
        "scopes": None,  # every key of the agent, records' and agent-wide
        # The fold keeps the locked ids (``st.locked``): no pass over every memory's facts.
        "locked_overridden": sorted(st.locked),
        "reason": cmd.reason,
    }
    return accept(cmd, ctx, ("agent.erased", payload))


def decide_erase_agent_listing(
    state: DecisionState, st: AgentDecisionState, cmd: c.EraseAgentData, ctx: DecideContext
) -> Decision:
    """``decide_erase_agent`` as it was before its event stopped naming the records: an erasure
    of everything lists every memory and episode id. Logs written then hold such events, which
    still fold by their lists; kept for the tests that fold them and the A/B of
    ``bench/erasure.py --ab-of listed``. Not dispatched."""
    if cmd.source is not None:
        return decide_erase_agent(state, st, cmd, ctx)
    payload = {
        "kind": "agent",
        "source_digest": None,
        "memory_ids": sorted(st.memories),
        "episode_ids": sorted(st.episodes),
        "profile": st.has_profile,
        "agent_scope": True,
        "scopes": None,
        "locked_overridden": sorted(st.locked),
        "reason": cmd.reason,
    }
    return accept(cmd, ctx, ("agent.erased", payload))
