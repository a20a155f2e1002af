"""Big structures an erasure drops are freed on the release thread, in slices, not on the
thread that dropped them (streams/release.py): the bus's writer thread, which every other
agent's write waits for, hands the erased agent's cached keys and decision facts over."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, ClassVar

import pytest

from memstream.streams.decision.facts import AgentDecisionState
from memstream.streams.log.sealing import Sealer
from memstream.streams.release import SWITCH_S, drain, release_later, short_switches
from tests.support.keys import MemoryKeyStore
from tests.unit.test_sealing import VECTOR, event

DEADLINE_S = 30.0


class Probe:
    """Records the thread that frees it."""

    freed: ClassVar[list[str]] = []

    def __del__(self) -> None:
        Probe.freed.append(threading.current_thread().name)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    Probe.freed = []


def wait_freed(n: int) -> list[str]:
    deadline = time.monotonic() + DEADLINE_S
    while len(Probe.freed) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(Probe.freed) == n, Probe.freed
    return Probe.freed


def test_release_later_frees_on_the_release_thread_and_empties_every_kind() -> None:
    d: dict[int, Any] = {i: Probe() for i in range(2_500)}
    lst: list[Any] = [Probe() for _ in range(1_500)]
    s: set[Any] = {Probe() for _ in range(700)}
    release_later(d, lst, s, {}, [])
    assert set(wait_freed(4_700)) == {"memstream-release"}
    assert not d and not lst and not s


@pytest.mark.parametrize("kind", [dict, list, set])
def test_drain_empties_in_slices(kind: type) -> None:
    items = [Probe() for _ in range(2_345)]
    box: Any = {i: p for i, p in enumerate(items)} if kind is dict else kind(items)
    del items
    drain(box, step=100)
    assert not box and len(Probe.freed) == 2_345


def test_sealer_forget_frees_the_agents_keys_off_the_calling_thread() -> None:
    sealer = Sealer(MemoryKeyStore())
    for i in range(50):
        ev = event(i, agent="big")
        ev["type"] = "memory.stored"
        sealer.seal_event(i, ev, VECTOR)
    kept = sealer.seal_event(99, event(99, agent="small"), VECTOR)
    assert kept is not None
    current = sealer._current["big"]
    assert len(current) == 50
    for scope, (key_id, _) in list(current.items()):  # the cached contexts, traced
        probe = Probe()
        current[scope] = (key_id, probe)  # type: ignore[assignment]
        sealer._open[key_id] = probe  # type: ignore[assignment]
    del probe, current
    sealer.forget("big")
    assert "big" not in sealer._current and "small" in sealer._current
    assert set(wait_freed(50)) == {"memstream-release"}


def test_forgetting_most_of_an_agent_frees_its_facts_off_the_calling_thread() -> None:
    st = AgentDecisionState()
    for mid in range(300):
        st.memories[mid] = Probe()  # type: ignore[assignment]
    st.forget_memories(list(range(200)))
    assert sorted(st.memories) == list(range(200, 300))
    assert set(wait_freed(200)) == {"memstream-release"}


def test_short_switches_nest_and_restore_the_interval() -> None:
    kept = sys.getswitchinterval()
    with short_switches():
        assert sys.getswitchinterval() <= SWITCH_S
        with short_switches():
            assert sys.getswitchinterval() <= SWITCH_S
        assert sys.getswitchinterval() <= SWITCH_S  # the outer one still runs
    assert sys.getswitchinterval() == kept
