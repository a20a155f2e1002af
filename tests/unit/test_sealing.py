"""Sealing at the log boundary (streams/log/sealing.py) and the key store (streams/keys/):
a sealed event opens to what was sealed, a tampered or moved ciphertext is refused, and an
event whose key was destroyed reads as its redacted envelope."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from memstream.streams.log.sealing import CLEAR, MAGIC, SealBroken, Sealer, scope_of
from tests.support.keys import MemoryKeyStore

VECTOR = b"\x01\x02\x03\x04" * 16


def event(ident: int = 7, content: str = "the secret recipe", agent: str = "a") -> dict[str, Any]:
    return {
        "id": f"ev{ident}",
        "type": "memory.stored",
        "v": 1,
        "scope": {"agent_id": agent, "project_id": "", "channel": ""},
        "actor": {"client_id": "c", "agent_id": agent, "session_id": ""},
        "occurred_at": "2026-01-01T00:00:00Z",
        "command_id": f"cmd{ident}",
        "payload": {
            "id": ident,
            "content": content,
            "msg_id": "m1",
            "source": {"id": "s"},
            "metadata": {"k": "v"},
            "locked": False,
            "embedding": {"model": "m", "dim": 16, "dtype": "f32"},
        },
    }


@pytest.fixture
def sealer() -> Sealer:
    return Sealer(MemoryKeyStore())


def sealed(sealer: Sealer, ev: dict[str, Any], offset: int = 0) -> tuple[bytes, bytes | None]:
    out = sealer.seal_event(offset, ev, VECTOR)
    assert out is not None
    return out


def destroy_where(sealer: Sealer, agent: str, scopes: list[str] | None, before_offset: int) -> int:
    """What an erasure destroys: the keys the log's bindings name (here the sealer's own)."""
    bindings = sealer.take_bindings()
    BINDINGS.extend(bindings)
    ids = [k for k, a, s, o in BINDINGS if a == agent and o < before_offset and (scopes is None or s in scopes)]
    return sealer.keys.destroy_ids(ids)


BINDINGS: list[tuple[bytes, str, str, int]] = []


def test_a_sealed_event_opens_to_what_was_sealed_and_hides_it_at_rest(sealer: Sealer) -> None:
    ev = event()
    value, vector = sealed(sealer, ev)
    assert value.startswith(MAGIC) and b"secret recipe" not in value and b"m1" not in value
    assert vector is not None and VECTOR not in vector
    opened, opened_vector = sealer.open(value, vector)
    assert orjson.loads(opened) == ev and opened_vector == VECTOR
    # A fresh sealer (another process) opens it from the key store alone.
    assert orjson.loads(Sealer(sealer.keys).open(value, vector)[0]) == ev


def test_tampered_ciphertext_is_refused(sealer: Sealer) -> None:
    value, vector = sealed(sealer, event())
    flipped = value[:-1] + bytes([value[-1] ^ 1])
    with pytest.raises(SealBroken):
        sealer.open(flipped, None)
    assert vector is not None
    with pytest.raises(SealBroken):
        sealer.open(value, vector[:-1] + bytes([vector[-1] ^ 1]))


def test_a_ciphertext_moved_to_another_envelope_is_refused(sealer: Sealer) -> None:
    """The associated data is the clear envelope: changing the event id, type or agent that a
    ciphertext is presented with makes it fail, and so does another event's vector."""
    value, _ = sealed(sealer, event(7))
    head = len(MAGIC) + 16 + 12
    n = int.from_bytes(value[head : head + 4], "little")
    clear = value[head + 4 : head + 4 + n]
    for old, new in (
        (b'"ev7"', b'"ev8"'),
        (b'"agent_id":"a"', b'"agent_id":"b"'),
        (b"memory.stored", b"memory.updatex"),
    ):
        moved = clear.replace(old, new, 1)
        assert moved != clear
        forged = value[:head] + len(moved).to_bytes(4, "little") + moved + value[head + 4 + n :]
        with pytest.raises(SealBroken):
            sealer.open(forged, None)
    _, other_vector = sealed(sealer, event(7, "another text"), offset=1)
    with pytest.raises(SealBroken):
        value2, _ = sealed(sealer, event(9), offset=2)
        sealer.open(value2, other_vector)


def test_a_destroyed_key_reads_as_the_redacted_envelope(sealer: Sealer) -> None:
    ev = event()
    value, vector = sealed(sealer, ev)
    assert destroy_where(sealer, "a", ["mem:7"], before_offset=1) == 1
    sealer.refresh()
    opened, opened_vector = sealer.open(value, vector)
    redacted = orjson.loads(opened)
    assert redacted["redacted"] is True and opened_vector is None
    assert set(redacted["payload"]) <= CLEAR
    assert redacted["payload"]["id"] == 7 and redacted["payload"]["embedding"]["model"] == "m"
    assert "content" not in redacted["payload"] and redacted["id"] == "ev7"


def test_destroy_spares_keys_first_used_after_the_erasure(sealer: Sealer) -> None:
    """An agent's data written after its erasure (new key, later offset) survives it."""
    old = {**event(), "type": "profile.updated", "payload": {"content": "old profile", "embedding": None}}
    v_old, _ = sealer.seal_event(3, old, None) or (b"", None)
    sealer.forget("a")  # as the bus does when it appends or folds the erasure (at offset 5)
    new = {**old, "id": "ev9", "payload": {"content": "new profile", "embedding": None}}
    v_new, _ = sealer.seal_event(6, new, None) or (b"", None)
    assert destroy_where(sealer, "a", None, before_offset=5) == 1
    sealer.refresh()
    assert orjson.loads(sealer.open(v_old, None)[0])["redacted"] is True
    assert orjson.loads(sealer.open(v_new, None)[0])["payload"]["content"] == "new profile"


def test_audit_request_copies_are_sealed_under_the_agent_key(sealer: Sealer) -> None:
    rec = {
        "id": "au1",
        "kind": "refused",
        "scope": {"agent_id": "a", "project_id": "", "channel": ""},
        "outcome": {"result": "rejected"},
        "request": {"content": "refused secret"},
    }
    value = sealer.seal_audit(0, rec)
    assert value is not None and b"refused secret" not in value
    assert orjson.loads(sealer.open(value, None)[0]) == rec
    destroy_where(sealer, "a", ["agent"], before_offset=1)
    sealer.refresh()
    redacted = orjson.loads(sealer.open(value, None)[0])
    assert redacted["redacted"] is True and redacted["request"] == {} and redacted["outcome"] == rec["outcome"]


def test_events_without_content_stay_clear(sealer: Sealer) -> None:
    deleted = {**event(), "type": "memory.deleted", "payload": {"id": 7}}
    assert sealer.seal_event(0, deleted, None) is None
    switched = {**event(), "type": "embedding.switched", "payload": {"model": "m2", "previous": "m"}}
    assert sealer.seal_event(0, switched, None) is None
    assert scope_of("standing.declared", {"ref": "ep:3"}) == "ep:3"
    assert scope_of("memory.reembedded", {"id": 3, "kind": "ep"}) == "ep:3"
    assert scope_of("associations.declared", {}) == "agent"


def test_sealing_off_writes_clear_events() -> None:
    off = Sealer(MemoryKeyStore(), seal_new=False)
    assert off.seal_event(0, event(), VECTOR) is None


class CountingKeys(MemoryKeyStore):
    def __init__(self) -> None:
        super().__init__()
        self.gets = 0

    def get(self, key_id: bytes) -> bytes | None:
        self.gets += 1
        return super().get(key_id)


def test_caches_hold_data_keys_not_cipher_contexts() -> None:
    """A key per record: a fold of the whole log opens every one of them. The caches keep the
    32-byte keys (an AES-GCM object carries ~2.4 kB of OpenSSL contexts), and a record opened
    again is opened without asking the store."""
    keys = CountingKeys()
    writer = Sealer(keys)
    records = [(ev, sealed(writer, ev, i)) for i, ev in enumerate(event(i, f"text {i}") for i in range(200))]
    reader = Sealer(keys)
    for _ in range(2):
        for ev, (value, vector) in records:
            opened, opened_vector = reader.open(value, vector)
            assert orjson.loads(opened) == ev and opened_vector == VECTOR
    assert keys.gets == 200
    assert len(reader._open) == 200 and all(type(dek) is bytes and len(dek) == 32 for dek in reader._open.values())
    cached = [hit for scopes in writer._current.values() for hit in scopes.values()]
    assert len(cached) == 200 and all(type(k) is bytes and type(dek) is bytes for k, dek in cached)
