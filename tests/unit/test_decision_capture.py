"""The copy of the decision state an erasure's checkpoint serialises off the writer thread
(``capture.capture``): the same snapshot as the state's, and untouched by later changes."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import example, given, settings, strategies

from memstream.streams.decision.capture import capture
from memstream.streams.decision.state import DecisionState
from memstream.streams.events import Scope
from tests.unit.test_decision_properties import PARTITIONS, command_specs, run


@settings(max_examples=100, deadline=None)
@given(command_specs)
def test_a_capture_writes_the_states_snapshot_and_keeps_it(specs: list[tuple[Any, ...]]) -> None:
    live, _, _, _ = run(specs)
    expected = orjson.dumps(live.to_snapshot())
    copy = capture(live)
    assert orjson.dumps(copy.to_snapshot()) == expected
    # Everything a later fold may change, changed as a fold changes it: the copy's snapshot
    # stays. (A memory's facts are replaced, never changed in place: the copy shares them.)
    live.next_seq[0] += 7
    live.event_offset += 3
    for st in live.agents.values():
        for mid, f in list(st.memories.items()):
            st.change(mid, f, locked=not f.locked, models=("another-model",), project="elsewhere")
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


_ALICE = Scope(agent_id="alice")
# A store (its memory gets id 4), then the changes a fold makes to a memory's facts.
_CHANGED = [("store", _ALICE, "alpha", None, 2, 1)] + [
    (kind, _ALICE, "beta", None, 4, n) for n, kind in enumerate(["lock", "update", "reembed", "unlock"], 2)
]


@settings(max_examples=150, deadline=None)
@given(command_specs, strategies.integers(min_value=0, max_value=60))
@example(_CHANGED, 1)
def test_a_capture_keeps_its_snapshot_while_the_fold_goes_on(specs: list[tuple[Any, ...]], cut: int) -> None:
    """The log's first events folded, captured; the rest folded into the live state (every
    kind of event, audits included): the copy's snapshot is still the one at the cut. Fails
    if a fold changes in place anything a capture shares (a memory's facts, a memo)."""
    _, events, audits, _ = run(specs)
    live = DecisionState(PARTITIONS)
    cut = min(cut, len(events))
    pending = list(audits)

    def fold(upto: int, start: int) -> None:
        for i in range(start, upto):
            live.apply_event(i, events[i])
            while pending and pending[0][0] == i:
                live.apply_audit(len(audits) - len(pending), pending.pop(0)[1])

    while pending and pending[0][0] < 0:
        live.apply_audit(len(audits) - len(pending), pending.pop(0)[1])
    fold(cut, 0)
    expected = orjson.dumps(live.to_snapshot())
    copy = capture(live)
    fold(len(events), cut)
    assert orjson.dumps(copy.to_snapshot()) == expected


def test_a_capture_copies_declared_associations() -> None:
    from memstream.streams.decision.associations.index import AssocIndex

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
