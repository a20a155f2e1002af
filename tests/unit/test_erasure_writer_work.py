"""An agent erasure's step on the bus's writer thread (deciding it, folding it into the decision
state, dropping the agent's cached sealing keys) makes no Python-level pass over the agent's
records: every other agent's write waits for that step, so its Python work must not grow with
the erased agent's size. Counted deterministically: the lines the interpreter runs."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from memstream.streams.commands import EraseAgentData
from memstream.streams.deciders.step import NewAudit, NewEvent, decide_and_fold
from memstream.streams.decision.facts import MemoryFacts
from memstream.streams.decision.limits import Limits
from memstream.streams.decision.state import DecisionState
from memstream.streams.events import Actor, Scope, decode, utcnow
from memstream.streams.log.sealing import Sealer
from memstream.streams.release import release_later
from tests.support.keys import MemoryKeyStore
from tests.unit.test_sealing import VECTOR, event

SMALL, BIG = 300, 3_000
# Lines that do not depend on the agent's size may still differ a little between two runs
# (a dict resized, a first call); a pass over the records would add thousands.
SLACK = 40
DEADLINE_S = 30.0


def lines_run(fn: Callable[[], Any]) -> int:
    """How many source lines the calling thread runs in ``fn`` (every frame it enters)."""
    count = 0

    def tracer(frame: FrameType, what: str, arg: Any) -> Any:
        nonlocal count
        if what == "line":
            count += 1
        return tracer

    release_later()  # the release thread is started before counting (its start is not the erasure's)
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


def stored(offset: int, mid: int, agent: str, *, locked: bool, source: str = "s") -> dict[str, Any]:
    return {
        "type": "memory.stored",
        "scope": {"agent_id": agent, "project_id": "p", "channel": "c"},
        "command_id": f"store-{agent}-{mid}",
        "payload": {
            "id": mid,
            "content": f"note {mid}",
            "msg_id": f"m{mid}",
            "source": {"id": source},
            "locked": locked,
            "embedding": {"model": "m", "dim": 3},
        },
    }


def state_of(n: int, *, declared: bool = False) -> DecisionState:
    """One agent with ``n`` memories (every 97th locked) and as many command memos, and another agent."""
    state = DecisionState(1)
    for i in range(n):
        state.apply_event(i, stored(i, i + 1, "big", locked=i % 97 == 0, source="s" if i % 2 else "t"))
    state.apply_event(n, stored(n, n + 1, "other", locked=False))
    if declared:
        ev = {
            "type": "associations.declared",
            "scope": {"agent_id": "big", "project_id": "p", "channel": "c"},
            "command_id": "declare-1",
            "payload": {"associations": [], "report": {"added": ["alice"]}},
        }
        state.apply_event(n + 1, ev)
    return state


def erase(state: DecisionState, source: str | None = None) -> dict[str, Any]:
    return decode(erase_value(state, source))


def erase_value(state: DecisionState, source: str | None = None) -> bytes:
    """The agent erasure's event as the bus appends it (encoded)."""
    cmd = EraseAgentData(
        command_id=f"erase-{source}",
        scope=Scope(agent_id="big"),
        actor=Actor(client_id="t"),
        received_at=utcnow(),
        reason="a data subject's request",
        source=source,
    )
    events: list[NewEvent] = []
    audits: list[NewAudit] = []
    out = decide_and_fold(state, cmd, Limits(), events, audits)
    assert out.outcome.result == "applied" and len(events) == 1
    return events[0].value


def test_deciding_and_folding_an_agent_erasure_runs_no_python_pass_over_its_records() -> None:
    counts, runs = {}, {}
    for n in (SMALL, BIG):
        state = state_of(n)
        out: dict[str, Any] = {}
        counts[n] = lines_run(lambda state=state, out=out: out.update(erase(state)))
        runs[n] = (state, out)
    assert counts[BIG] - counts[SMALL] < SLACK, counts
    for n, (state, out) in runs.items():
        p = out["payload"]
        assert "memory_ids" not in p and "episode_ids" not in p and p["scopes"] is None
        assert (p["memories"], p["episodes"], p["kind"]) == (n, 0, "agent")
        assert p["locked_overridden"] == [i + 1 for i in range(0, n, 97)]
        st = state.agents["big"]
        assert not st.memories and not st.by_msg and not st.by_content and not st.locked
        assert list(state.agents["other"].memories) == [n + 1]


def test_an_agent_erasures_event_does_not_grow_with_the_agent() -> None:
    """The event names no record (streams/decision/whole_agent.py): what the writer encodes,
    writes and the sealer and the key map parse is the same size at 300 and 3,000 memories
    (it listed every id: 590 KB at 100,000). Only the counts' digits differ."""
    sizes = {}
    for n in (SMALL, BIG):
        state = DecisionState(1)
        for i in range(n):
            state.apply_event(i, stored(i, i + 1, "big", locked=False))
        sizes[n] = len(erase_value(state))
    assert sizes[BIG] - sizes[SMALL] <= 2, sizes


def test_an_erasure_by_source_lists_the_locks_it_overrode_and_keeps_the_rest() -> None:
    state = state_of(SMALL)
    p = erase(state, source="s")["payload"]
    by_s = [i + 1 for i in range(SMALL) if i % 2]
    assert p["memory_ids"] == by_s
    assert p["locked_overridden"] == [mid for mid in by_s if (mid - 1) % 97 == 0]
    st = state.agents["big"]
    assert sorted(st.memories) == [i + 1 for i in range(SMALL) if i % 2 == 0]
    assert st.locked == {mid for mid, f in st.memories.items() if f.locked}


def test_declarations_reports_are_still_redacted_by_an_agent_erasure() -> None:
    state = state_of(SMALL, declared=True)
    st = state.agents["big"]
    assert st.commands["declare-1"].report == {"added": ["alice"]}  # type: ignore[union-attr]
    erase(state)
    assert st.commands["declare-1"].report == {"redacted": True}  # type: ignore[union-attr]
    assert st.assoc is None


def test_the_locked_ids_follow_the_facts_through_the_fold_and_a_snapshot() -> None:
    state = state_of(SMALL)
    st = state.agents["big"]

    def ev(offset: int, t: str, mid: int) -> None:
        base = {"scope": {"agent_id": "big", "project_id": "p", "channel": "c"}, "command_id": f"{t}-{offset}"}
        state.apply_event(offset, {**base, "type": t, "payload": {"id": mid}})

    ev(SMALL + 10, "memory.locked", 5)
    ev(SMALL + 11, "memory.unlocked", 1)
    ev(SMALL + 12, "memory.deleted", 98)  # was locked
    st.forget_memories([2, 3, 195])  # 195 was locked
    expected = {mid for mid, f in st.memories.items() if f.locked}
    assert st.locked == expected and 5 in expected and 1 not in expected and 98 not in expected
    again = DecisionState.from_snapshot(state.to_snapshot())
    assert again.agents["big"].locked == expected
    assert again.digest() == state.digest()


def test_forgetting_every_memory_at_once_empties_the_indexes() -> None:
    state = state_of(SMALL)
    st = state.agents["big"]
    st.memories["not an id"] = MemoryFacts("p", "c", None, b"k")  # type: ignore[index]
    st.forget_memories([i + 1 for i in range(SMALL)])  # all but one: the filtered path
    assert list(st.memories) == ["not an id"] and not st.locked
    st.forget_memories(["not an id"])  # type: ignore[list-item]
    assert not st.memories and not st.by_msg and not st.by_content


def emptied(sealer: Sealer, ids: list[bytes]) -> bool:
    """Whether ``ids`` left the opening cache (on the release thread, with ``drop_later``)."""
    deadline = time.monotonic() + DEADLINE_S
    while any(k in sealer._open for k in ids) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not any(k in sealer._open for k in ids)


@pytest.mark.parametrize("drop_later", [False, True])
@pytest.mark.parametrize("scopes", [None, "listed"])
def test_sealer_forget_runs_no_python_pass_over_the_agents_keys(scopes: str | None, drop_later: bool) -> None:
    counts = {}
    for n in (SMALL, BIG):
        sealer = Sealer(MemoryKeyStore(), drop_later=drop_later)
        for i in range(n):
            sealer.seal_event(i, event(i, agent="big"), VECTOR)
        sealer.seal_event(n, event(n, agent="small"), VECTOR)
        ids = [key_id for key_id, _ in sealer._current["big"].values()]
        assert all(k in sealer._open for k in ids)
        if scopes is None:
            counts[n] = lines_run(lambda sealer=sealer: sealer.forget("big"))
        else:
            listed = [f"mem:{i}" for i in range(n)]
            lines_run(lambda sealer=sealer, listed=listed: sealer.forget("big", listed))
        assert "big" not in sealer._current or not sealer._current["big"]
        if not drop_later:
            assert not any(k in sealer._open for k in ids)
        assert emptied(sealer, ids)
        assert "small" in sealer._current and len(sealer._open) == 1
    if scopes is None:
        assert counts[BIG] - counts[SMALL] < SLACK, counts


def test_a_key_still_in_the_opening_cache_opens_nothing_once_destroyed() -> None:
    """``drop_later``: an erased key may sit in the opening cache until the release thread
    reaches it; a read refreshes first, and the destruction empties the cache."""
    keys = MemoryKeyStore()
    sealer = Sealer(keys, drop_later=True)
    out = sealer.seal_event(0, event(1, agent="big"), VECTOR)
    assert out is not None
    [(key_id, agent, scope, _)] = sealer.take_bindings()
    assert (agent, scope) == ("big", "mem:1")
    aead = sealer._open[key_id]
    sealer.forget("big")
    sealer._open[key_id] = aead  # as if the release thread had not reached it yet
    assert decode(sealer.open(*out)[0])["payload"]["content"] == "the secret recipe"
    assert keys.destroy_ids([key_id]) == 1
    sealer.refresh()
    opened = decode(sealer.open(*out)[0])
    assert opened["redacted"] is True and "content" not in opened["payload"]
