"""The key map a Kafka decider keeps per partition (streams/log/sealed_keys.py ``KeyScopes``):
an erasure names the same keys and the same clear records as a read of the records before it
(``keys_named`` and ``plaintext_left``, what an erasure without the map reads), less the keys an
earlier erasure already named (destroyed there), whether the map was folded record by record as
a decider appends or at once as after a restart."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.api.kafka.worker.erasure import plaintext_left, unreachable
from memstream.streams.log.sealed_keys import KeyScopes, keys_named, sealed_binding
from memstream.streams.log.sealing import Sealer
from tests.support.keys import MemoryKeyStore

EVENTS, AUDIT = "t.events", "t.audit"
AGENTS = ["ann", "bob"]

op = st.one_of(
    st.tuples(st.just("store"), st.sampled_from(AGENTS), st.integers(1, 4), st.booleans()),
    st.tuples(st.just("clear"), st.sampled_from(AGENTS), st.integers(1, 4), st.just(False)),
    st.tuples(st.just("profile"), st.sampled_from(AGENTS), st.just(0), st.just(False)),
    st.tuples(st.just("audit"), st.sampled_from(AGENTS), st.just(0), st.booleans()),
    st.tuples(st.just("erase"), st.sampled_from(AGENTS), st.integers(1, 4), st.booleans()),
)


def dumps(value: dict[str, Any]) -> bytes:
    return orjson.dumps(value)


class History:
    """Events and audit records as a sealing decider stores them."""

    def __init__(self) -> None:
        self.sealer = Sealer(MemoryKeyStore())
        self.events: list[tuple[int, str, bytes]] = []
        self.audits: list[tuple[int, bytes]] = []  # (the event offset decided before it, value)

    def event(self, type_: str, agent: str, payload: dict[str, Any], *, sealed: bool = True) -> None:
        offset = len(self.events)
        ev = {"id": f"e{offset}", "type": type_, "scope": {"agent_id": agent}, "payload": payload}
        out = self.sealer.seal_event(offset, ev, None) if sealed else None
        self.events.append((offset, type_, dumps(ev) if out is None else out[0]))

    def audit(self, agent: str, sealed: bool) -> None:
        rec = {"scope": {"agent_id": agent}, "kind": "refused", "request": {"content": "a refused note"}}
        out = self.sealer.seal_audit(len(self.audits), rec) if sealed else None
        self.audits.append((len(self.events) - 1, dumps(rec) if out is None else out))

    def play(self, ops: list[tuple[str, str, int, bool]]) -> None:
        for kind, agent, n, flag in ops:
            if kind == "store":  # flag: with content (sealed), or without (stays clear)
                self.event("memory.stored", agent, {"id": n, "kind": "mem", **({"content": "x"} if flag else {})})
            elif kind == "clear":  # written before the topics were sealed
                self.event("memory.stored", agent, {"id": n, "kind": "mem", "content": "x"}, sealed=False)
            elif kind == "profile":
                self.event("profile.updated", agent, {"profile": {"name": agent}})
            elif kind == "audit":
                self.audit(agent, flag)
            else:  # flag: the whole agent, or one memory
                t, scopes = ("agent.erased", None) if flag else ("record.erased", [f"mem:{n}"])
                self.event(t, agent, {"scopes": scopes})

    def before(self, offset: int) -> list[tuple[str, int, bytes]]:
        """What ``sealed_before`` reads for an erasure at ``offset`` (of every agent: the
        functions compared filter by agent themselves)."""
        out = [(EVENTS, o, v) for o, _, v in self.events if o < offset]
        return out + [(AUDIT, -1, v) for after, v in self.audits if after < offset]


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(op, max_size=30), chunks=st.lists(st.integers(1, 5), min_size=1, max_size=30))
def test_an_erasure_names_what_a_read_of_the_records_finds(
    ops: list[tuple[str, str, int, bool]], chunks: list[int]
) -> None:
    history = History()
    history.play(ops)
    at_once = KeyScopes(EVENTS, AUDIT)
    at_once.fold(history.events, history.audits)
    # As a decider folds its batches: a few events at a time, each with the audits decided among them.
    batched = KeyScopes(EVENTS, AUDIT)
    start, i, total = 0, 0, len(history.events)
    while True:
        stop = start + chunks[i % len(chunks)]
        i += 1
        end = stop if stop < total else None  # the last batch takes every audit left
        batch_audits = [a for a in history.audits if start <= a[0] + 1 and (end is None or a[0] + 1 < end)]
        batched.fold(history.events[start:stop], batch_audits)
        if end is None:
            break
        start = stop
    named_before: set[bytes] = set()
    for offset, type_, value in history.events:
        if type_ not in ("agent.erased", "record.erased"):
            continue
        ev = orjson.loads(value)
        agent, scopes = ev["scope"]["agent_id"], ev["payload"]["scopes"]
        records = history.before(offset)
        read = keys_named(((o, v) for _, o, v in records), agent, scopes, offset)
        for keys in (at_once, batched):
            named = keys.named(offset)
            assert named is not None
            assert set(named.keys) == set(read) - named_before
            assert len(named.keys) == len(set(named.keys))
            assert unreachable(named.clear, 3) == plaintext_left([r for r in records if agent_of(r) == agent], ev, 3)
        named_before |= set(read)
        at_once.completed_one(offset)
        assert at_once.named(offset) is None and batched.named(offset) is not None


def agent_of(record: tuple[str, int, bytes]) -> str | None:
    """The agent of a stored record (``sealed_before`` reads by the topic's key, the agent)."""
    bound = sealed_binding(record[2])
    return str(orjson.loads(record[2])["scope"]["agent_id"]) if bound is None else bound[1]


def test_completed_erasures_are_forgotten_up_to_an_offset() -> None:
    history = History()
    history.play([("store", "ann", 1, True), ("erase", "ann", 1, False), ("store", "ann", 2, True),
                  ("erase", "ann", 0, True)])  # fmt: skip
    keys = KeyScopes(EVENTS, AUDIT)
    keys.fold(history.events, history.audits)
    first, second = keys.named(1), keys.named(3)
    assert first is not None and len(first.keys) == 1
    assert second is not None and len(second.keys) == 1 and second.keys != first.keys
    keys.completed(2)
    assert keys.named(1) is None and keys.named(3) == second
