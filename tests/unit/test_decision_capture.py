"""The copy of the decision state an erasure's checkpoint serialises off the writer thread
(``capture.capture``): the same snapshot as the state's, and untouched by later changes."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings

from memstream.streams.decision.capture import capture
from tests.unit.test_decision_properties import command_specs, run


@settings(max_examples=100, deadline=None)
@given(command_specs)
def test_a_capture_writes_the_states_snapshot_and_keeps_it(specs: list[tuple[Any, ...]]) -> None:
    live, _, _, _ = run(specs)
    expected = orjson.dumps(live.to_snapshot())
    copy = capture(live)
    assert orjson.dumps(copy.to_snapshot()) == expected
    # Everything a later fold may change in place, changed: the copy's snapshot stays.
    live.next_seq[0] += 7
    live.event_offset += 3
    for st in live.agents.values():
        for f in st.memories.values():
            f.locked = not f.locked
            f.models = ("another-model",)
            f.project = "elsewhere"
        st.memories.clear()
        st.episodes.clear()
        st.commands.clear()
        st.model = "another-model"
        st.has_profile = not st.has_profile
        if st.assoc is not None:
            st.assoc.entities.clear()
            st.assoc.mentions.clear()
            st.assoc.relations.clear()
    assert orjson.dumps(copy.to_snapshot()) == expected


def test_a_capture_copies_declared_associations() -> None:
    from memstream.streams.decision.associations.index import AssocIndex
    from memstream.streams.decision.state import DecisionState

    live = DecisionState(2)
    body = {"entities": [[1, "p", "", ["ada"]], [2, "p", "", ["bob"]]], "mentions": [[1, 5]], "next": [3, 2]}
    live.agent("a").assoc = AssocIndex.from_snapshot({**body, "relations": [[1, [1, "knows", 2]]]})
    expected = orjson.dumps(live.to_snapshot())
    copy = capture(live)
    assoc = live.agents["a"].assoc
    assert assoc is not None
    assoc.entities.clear()
    assoc.mentions.clear()
    assoc.relations.clear()
    assert orjson.dumps(copy.to_snapshot()) == expected
    assert orjson.dumps(live.to_snapshot()) != expected
