"""The decision state forgets many memories at once (an erasure or deletion of an agent's data)
exactly as it forgets them one by one: records, dedup indexes, and the digest."""

from __future__ import annotations

import random

import pytest

from memstream.streams.decision.facts import AgentDecisionState, MemoryFacts


def agent_state(n: int, seed: int) -> AgentDecisionState:
    """``n`` memories, some sharing a message id or a content key (the index keeps one of them)."""
    rng = random.Random(seed)
    st = AgentDecisionState()
    for mid in range(1, n + 1):
        project = rng.choice(["", "p1"])
        msg = rng.choice([None, f"m{rng.randrange(n)}"])
        facts = MemoryFacts(project, rng.choice(["", "c"]), msg, bytes([rng.randrange(n // 2 + 1)]))
        st.memories[mid] = facts
        if msg is not None:
            st.by_msg[(project, msg)] = mid
        st.by_content[(project, facts.channel, facts.content_key)] = mid
    return st


@pytest.mark.parametrize("share", [0.1, 0.5, 0.9, 1.0])
def test_forgetting_many_at_once_equals_one_by_one(share: float) -> None:
    for seed in range(20):
        at_once, one_by_one = agent_state(60, seed), agent_state(60, seed)
        ids = random.Random(seed).sample(range(1, 70), int(69 * share))  # a few ids it never had
        at_once.forget_memories(ids)
        for mid in ids:
            one_by_one.forget_memory(mid)
        assert list(at_once.memories.items()) == list(one_by_one.memories.items())
        assert list(at_once.by_msg.items()) == list(one_by_one.by_msg.items())
        assert list(at_once.by_content.items()) == list(one_by_one.by_content.items())
