"""The keys an erasure names, found in sealed records (streams/log/sealed_keys.py): what the
embedded log's key_scopes table answers, for logs that have none (Kafka)."""

from __future__ import annotations

from typing import Any

from memstream.streams.log.sealed_keys import keys_named, sealed_binding
from memstream.streams.log.sealing import Sealer
from tests.support.keys import MemoryKeyStore


def event(i: int, agent: str, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"e{i}", "type": type_, "scope": {"agent_id": agent}, "payload": payload}


def test_keys_are_found_by_agent_scope_and_offset() -> None:
    sealer = Sealer(MemoryKeyStore())
    written = [
        (0, event(0, "ann", "memory.stored", {"id": 1, "kind": "mem", "content": "the heron at the weir"})),
        (1, event(1, "ann", "memory.stored", {"id": 2, "kind": "mem", "content": "the kingfisher"})),
        (2, event(2, "ann", "profile.updated", {"profile": {"name": "Ann"}, "note": "likes birds"})),
        (3, event(3, "bob", "memory.stored", {"id": 3, "kind": "mem", "content": "bob's otter"})),
        (4, event(4, "ann", "episode.recorded", {"id": 9, "summary": "a walk by the river"})),
    ]
    records: list[tuple[int, bytes]] = []
    for offset, ev in written:
        sealed = sealer.seal_event(offset, ev, None)
        assert sealed is not None
        records.append((offset, sealed[0]))
    audit = sealer.seal_audit(5, {"scope": {"agent_id": "ann"}, "kind": "refused", "request": {"content": "x"}})
    assert audit is not None
    records.append((5, audit))
    records.append((6, b'{"id":"e6","type":"agent.erased","scope":{"agent_id":"ann"},"payload":{}}'))  # clear

    bindings = [sealed_binding(v) for _, v in records]
    assert [b[1:] if b else None for b in bindings] == [
        ("ann", "mem:1"),
        ("ann", "mem:2"),
        ("ann", "agent"),
        ("bob", "mem:3"),
        ("ann", "ep:9"),
        ("ann", "agent"),
        None,
    ]
    key = {offset: b[0] for (offset, _), b in zip(records, bindings, strict=True) if b}
    assert keys_named(records, "ann", ["mem:1"], 10) == [key[0]]
    assert keys_named(records, "ann", ["mem:2", "ep:9"], 10) == [key[1], key[4]]
    # the agent's profile and its audit copies share the agent key
    assert key[2] == key[5] and keys_named(records, "ann", ["agent"], 10) == [key[2]]
    assert keys_named(records, "ann", None, 10) == [key[0], key[1], key[2], key[4]]
    assert keys_named(records, "ann", None, 2) == [key[0], key[1]]  # later writes: not this erasure's
    assert keys_named(records, "bob", None, 10) == [key[3]]
    assert keys_named(records, "cat", None, 10) == []
