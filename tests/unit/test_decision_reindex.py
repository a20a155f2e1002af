"""``AgentDecisionState.reindex`` (the indexes a restart rebuilds in bulk) against the per-row
``setdefault`` loop it replaced, which is what the fold leaves: the same entries in the same
order, the first memory under a repeated key keeping it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.streams.decision.facts import AgentDecisionState, MemoryFacts

_facts = st.builds(
    MemoryFacts,
    project=st.sampled_from(["", "p", "q"]),
    channel=st.sampled_from(["c", "d"]),
    msg_id=st.one_of(st.none(), st.sampled_from(["m1", "m2", "m3"])),
    content_key=st.sampled_from([bytes([b]) * 16 for b in (0, 1, 2)] + [b"\x00" * 15 + b"\x07"]),
    source_id=st.sampled_from(["", "s"]),
    locked=st.booleans(),
    models=st.just(()),
)


def _by_loop(memories: dict[int, MemoryFacts]) -> AgentDecisionState:
    st_ = AgentDecisionState(memories=dict(memories))
    for mid, f in st_.memories.items():
        if f.msg_id is not None:
            st_.by_msg.setdefault((f.project, f.msg_id), mid)
        st_.by_content.setdefault((f.project, f.channel, f.content_key), mid)
        if f.locked:
            st_.locked.add(mid)
    return st_


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.integers(1, 10_000), _facts, max_size=30))
def test_reindex_is_the_per_row_loop(memories: dict[int, MemoryFacts]) -> None:
    memories = dict(sorted(memories.items()))
    want = _by_loop(memories)
    got = AgentDecisionState(memories=dict(memories))
    got.reindex()
    assert list(got.by_content.items()) == list(want.by_content.items())
    assert list(got.by_msg.items()) == list(want.by_msg.items())
    assert got.locked == want.locked


def test_a_repeated_key_keeps_its_first_memory() -> None:
    key = b"\x00" * 16  # trailing zero bytes survive the columns' split (snapshot.py)
    memories = {
        3: MemoryFacts("p", "c", "m", key, locked=True),
        5: MemoryFacts("p", "c", "m", key),
        8: MemoryFacts("p", "c", None, b"\x01" * 16),
    }
    got = AgentDecisionState(memories=memories)
    got.reindex()
    assert got.by_content == {("p", "c", key): 3, ("p", "c", b"\x01" * 16): 8}
    assert got.by_msg == {("p", "m"): 3}
    assert got.locked == {3}
