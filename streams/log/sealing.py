"""Sealing at the log boundary: an event's content is encrypted under its record's data key
before it reaches the log, and opened (or redacted, once the key is destroyed) when read.

What stays clear is the envelope (id, type, scope, actor, command id, time) and the payload
fields that routing, id allocation, the idempotency memo and the erasure folds need
(``CLEAR``). Everything else in the payload, and the attached vector, is sealed with
AES-256-GCM; the associated data binds the ciphertext to its event (the clear JSON holds the
event id, type, agent and the key id). See docs/erasure.md.

Why a codec rather than a wrapper around the ``EventLog``: the embedded bus writes inside its
own SQLite transaction and reads the tail there too, so both adapters call this one codec
where bytes cross the storage boundary (``SqliteLog`` on reads, the bus on appends).
"""

from __future__ import annotations

import secrets
import struct
import threading
from collections import deque
from collections.abc import Iterable
from functools import partial
from itertools import repeat
from operator import itemgetter
from typing import Any, Final

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from memstream.streams.keys.port import KEY_ID_BYTES, BatchKeys, KeyStore
from memstream.streams.release import SLICE, release_later, run_later

MAGIC: Final = b"\x00ms1"
NONCE: Final = 12
_KEY_END: Final = len(MAGIC) + KEY_ID_BYTES
_HEAD: Final = _KEY_END + NONCE
_LEN = struct.Struct("<I")
# Opening keys a sealer keeps (key id -> 32-byte data key, ~160 B each with the dict's share):
# every record has a key of its own, so a fold of the whole log (a cold start, a rebuild) kept
# one per record for the life of the process, 16 MB per 100k records. Past this many the cache
# is emptied, and keys still in use are looked up again (once per read, with ``fetch``).
OPEN_CACHE: Final = 65_536

ERASURE_TYPES: Final = frozenset({"record.erased", "agent.erased"})
# Payload fields left in the clear: ids, flags and headers the folds, deciders and memos need
# of an event whose key is gone. Nothing a person said or is described by.
CLEAR: Final = frozenset(
    {
        "id",
        "kind",
        "ref",
        "locked",
        "embedding",
        "skipped",
        "memory_ids",
        "episode_ids",
        "profile",
        "kept_locked",
        "model",
        "previous",
        "level",
        "beta",
        "gate",
    }
)
# Event types whose content lives under the agent's key rather than one record's.
AGENT_SCOPED: Final = frozenset({"profile.updated", "associations.declared", "associations.retracted"})
AGENT_SCOPE: Final = "agent"


class SealBroken(Exception):
    """A sealed value failed authentication: tampered with, or moved to another event."""


def scope_of(event_type: str, payload: dict[str, Any]) -> str | None:
    """The key scope an event's content is sealed under; None: the event carries no content."""
    if event_type.startswith("memory."):
        return f"{payload.get('kind', 'mem')}:{payload['id']}"
    if event_type.startswith("episode."):
        return f"ep:{payload['id']}"
    if event_type == "standing.declared":
        return str(payload["ref"])
    if event_type in AGENT_SCOPED:
        return AGENT_SCOPE
    return None


def _aad(key_id: bytes, clear: bytes) -> bytes:
    return MAGIC + key_id + clear


class Sealer:
    """Seals and opens events and audit records with data keys from a ``KeyStore``.

    Keys are cached: for sealing, the current key of each (agent, scope); for opening, by key
    id. ``forget`` drops an agent's cached keys when an erasure is folded; a move of the key
    store's generation (a destruction by any process) drops the opening cache.

    The caches hold the 32-byte data keys, not AES-GCM objects: each of those carries about
    2.4 kB of OpenSSL contexts outside Python's heap, and every record has a key of its own, so
    a fold of the whole log (a cold start) kept one per record for the life of the process
    (2.4 GB of a 6.9 GB RSS at 1M memories). Making one per call costs about 1 µs; looking a
    key up in the store again costs about 10 µs (docs/benchmarks.md, "1M memories")."""

    def __init__(self, keys: KeyStore, *, seal_new: bool = True, drop_later: bool = False) -> None:
        self.keys = keys
        self.seal_new = seal_new
        self.drop_later = drop_later  # see ``forget``
        # agent -> scope -> (key id, data key): by agent, so an erasure drops an agent's keys
        # without a pass over every agent's (100k keys took 0.9 s of the writer thread that way)
        self._current: dict[str, dict[str, tuple[bytes, bytes]]] = {}
        self._open: dict[bytes, bytes] = {}  # key id -> data key
        self._bindings: list[tuple[bytes, str, str, int]] = []
        self._generation = keys.generation()
        self._lock = threading.Lock()

    # -- writing ----------------------------------------------------------------------------

    def _key_for(self, agent: str, scope: str, offset: int) -> tuple[bytes, AESGCM]:
        current = self._current.get(agent)
        if current is None:
            current = self._current[agent] = {}
        hit = current.get(scope)
        if hit is None:
            hit = current[scope] = self.keys.take()
            self._cache_open(hit[0], hit[1])
            self._bindings.append((hit[0], agent, scope, offset))
        return hit[0], AESGCM(hit[1])

    def take_bindings(self) -> list[tuple[bytes, str, str, int]]:
        """(key id, agent, scope, first offset) of the keys first used since the last call: the
        bus writes them into the log in the transaction that appends their first events."""
        with self._lock:
            out, self._bindings = self._bindings, []
        return out

    def seal_event(self, offset: int, ev: dict[str, Any], vector: bytes | None) -> tuple[bytes, bytes | None] | None:
        """The sealed (value, vector) of a decoded event about to be appended at ``offset``;
        None when it stays clear (sealing off, or nothing in it to seal)."""
        if not self.seal_new:
            return None
        agent = ev["scope"]["agent_id"]
        t = ev["type"]
        if t in ERASURE_TYPES:
            self.forget(agent, ev["payload"].get("scopes"))
            return None
        payload = ev["payload"]
        scope = scope_of(t, payload)
        if scope is None:
            return None
        secret = {k: v for k, v in payload.items() if k not in CLEAR}
        if not secret and vector is None:
            return None
        with self._lock:
            key_id, aead = self._key_for(agent, scope, offset)
        clear = orjson.dumps({**ev, "payload": {k: v for k, v in payload.items() if k in CLEAR}})
        value = self._seal(key_id, aead, clear, orjson.dumps(secret))
        sealed_vector = None
        if vector is not None:
            nonce = secrets.token_bytes(NONCE)
            sealed_vector = nonce + aead.encrypt(nonce, vector, _aad(key_id, b"vector:" + ev["id"].encode()))
        return value, sealed_vector

    def seal_audit(self, offset: int, rec: dict[str, Any]) -> bytes | None:
        """An audit record's request copy (a refused store carries its content) under the agent's key."""
        request = rec.get("request")
        if not self.seal_new or not request:
            return None
        agent = rec["scope"]["agent_id"]
        with self._lock:
            key_id, aead = self._key_for(agent, AGENT_SCOPE, offset)
        clear = orjson.dumps({**rec, "request": {}})
        return self._seal(key_id, aead, clear, orjson.dumps({"request": request}))

    @staticmethod
    def _seal(key_id: bytes, aead: AESGCM, clear: bytes, secret: bytes) -> bytes:
        nonce = secrets.token_bytes(NONCE)
        return MAGIC + key_id + nonce + _LEN.pack(len(clear)) + clear + aead.encrypt(nonce, secret, _aad(key_id, clear))

    def forget(self, agent: str, scopes: list[str] | None = None) -> None:
        """Drop the agent's cached sealing keys (of ``scopes``, or all): the next write makes new ones.

        With ``drop_later`` they leave the opening cache on the release thread, a slice at a
        time (``_drop_opening``): popping 100k keys from it, even in C, held the bus's writer
        thread 50-100 ms on a busy machine. The embedded log sets it: every read through it
        refreshes first, and a destruction moves the generation, which empties the cache, so
        no read opens with a destroyed key meanwhile."""
        with self._lock:
            current = self._current.get(agent)
            if not current:
                return
            if scopes is None:
                dropped = self._current.pop(agent)
            else:
                dropped = {scope: current.pop(scope) for scope in scopes if scope in current}
            if not self.drop_later:
                deque(map(self._open.pop, map(itemgetter(0), dropped.values()), repeat(None)), maxlen=0)
        if self.drop_later:
            run_later(partial(self._drop_opening, dropped))
        else:
            release_later(dropped)  # freed off the calling thread, in slices

    def _drop_opening(self, dropped: dict[str, tuple[bytes, bytes]]) -> bool:
        """Take a slice of ``dropped`` out of the opening cache; whether any is left."""
        with self._lock:
            for _ in range(min(SLICE, len(dropped))):
                self._open.pop(dropped.popitem()[1][0], None)
        return bool(dropped)

    def reset(self) -> None:
        """Drop every cached key (after a failed append: keys made for it may not be durable)."""
        with self._lock:
            self._current.clear()
            self._open.clear()
            self._bindings = []

    # -- reading ----------------------------------------------------------------------------

    def refresh(self) -> None:
        """Drop cached opening keys if any process destroyed keys since they were cached."""
        generation = self.keys.generation()
        if generation != self._generation:
            with self._lock:
                self._generation = generation
                self._open.clear()
                self._current.clear()

    def _cache_open(self, key_id: bytes, dek: bytes) -> None:
        if len(self._open) >= OPEN_CACHE:
            self._open.clear()  # bounded (``OPEN_CACHE``): a key dropped is looked up again
        self._open[key_id] = dek

    def _dek(self, key_id: bytes) -> bytes | None:
        dek = self._open.get(key_id)
        if dek is None:
            dek = self.keys.get(key_id)
            if dek is not None:
                self._cache_open(key_id, dek)
        return dek

    def fetch(self, values: Iterable[bytes]) -> None:
        """Look up the keys of the sealed ``values`` not cached yet in one call of the store
        (``BatchKeys.get_many``: one query of ``keys.db`` for a read of 5,000 records, where one
        per record cost about 10 µs each), so that opening them finds their keys cached. A key
        the store no longer holds is not cached: its records open redacted."""
        keys = self.keys
        if not isinstance(keys, BatchKeys):
            return
        ids = dict.fromkeys(value[len(MAGIC) : _KEY_END] for value in values if value.startswith(MAGIC))
        cached = self._open
        if len(cached) + len(ids) > OPEN_CACHE:
            cached.clear()  # bounded, as ``_cache_open``; this read's keys are fetched whole
        wanted = [key_id for key_id in ids if key_id not in cached]
        if wanted:
            cached.update(keys.get_many(wanted))

    def open(self, value: bytes, vector: bytes | None) -> tuple[bytes, bytes | None]:
        """The plaintext (value, vector) of a stored record, or its redacted form (the clear
        part with ``"redacted": true`` and no vector) when its key was destroyed.
        Raises ``SealBroken`` when the ciphertext does not authenticate."""
        if not value.startswith(MAGIC):
            return value, vector
        ev, opened_vector = self.open_decoded(value, vector)
        return orjson.dumps(ev), opened_vector

    def open_decoded(self, value: bytes, vector: bytes | None) -> tuple[dict[str, Any], bytes | None]:
        """``open``, decoded: the record as the dict its readers parse it into. A fold takes it
        as it is, where ``open`` parses the clear part, encodes the whole again, and the fold
        parses that (docs/benchmarks.md, "Rebuild at scale", wave 8)."""
        if not value.startswith(MAGIC):
            clear_record: dict[str, Any] = orjson.loads(value)
            return clear_record, vector
        key_id = value[len(MAGIC) : _KEY_END]
        (n,) = _LEN.unpack_from(value, _HEAD)
        clear = value[_HEAD + 4 : _HEAD + 4 + n]
        ev: dict[str, Any] = orjson.loads(clear)
        dek = self._dek(key_id)
        if dek is None:
            ev["redacted"] = True
            return ev, None
        aead = AESGCM(dek)
        try:
            secret = orjson.loads(aead.decrypt(value[_KEY_END:_HEAD], value[_HEAD + 4 + n :], _aad(key_id, clear)))
            opened_vector = None
            if vector is not None:
                opened_vector = aead.decrypt(
                    vector[:NONCE], vector[NONCE:], _aad(key_id, b"vector:" + str(ev["id"]).encode())
                )
        except InvalidTag as exc:
            raise SealBroken(f"sealed record {ev.get('id')!r} does not authenticate: refusing it") from exc
        if "payload" in ev:
            ev["payload"].update(secret)
        else:
            ev.update(secret)
        return ev, opened_vector


def is_sealed(value: bytes) -> bool:
    return value.startswith(MAGIC)
