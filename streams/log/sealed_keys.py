"""Which data keys an erasure names, read from the sealed records themselves.

The embedded log records which key seals what in its ``key_scopes`` table, written with the
first event a key seals. A log without such a table (the Kafka topics) still knows it: every
sealed value names its key id, and its clear part names the agent and (through ``scope_of``)
the scope. So an erasure's keys can be found by reading the agent's records before the
erasure (``keys_named``), or, without reading anything at the erasure, from a ``KeyScopes``
map folded from the same records as they are appended (the Kafka decider keeps one per
partition: docs/erasure.md, "Kafka mode").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from memstream.streams.keys.port import KEY_ID_BYTES
from memstream.streams.log.sealing import _HEAD, _LEN, AGENT_SCOPE, ERASURE_TYPES, MAGIC, scope_of
from memstream.streams.release import release_later


def sealed_binding(value: bytes) -> tuple[bytes, str, str] | None:
    """(key id, agent, scope) of a sealed event or audit record; None for a clear one. An
    audit record's request copy is sealed under its agent's key (``Sealer.seal_audit``)."""
    if not value.startswith(MAGIC):
        return None
    key_id = value[len(MAGIC) : len(MAGIC) + KEY_ID_BYTES]
    (n,) = _LEN.unpack_from(value, _HEAD)
    clear = orjson.loads(value[_HEAD + 4 : _HEAD + 4 + n])
    agent = str(clear["scope"]["agent_id"])
    if "payload" in clear:
        scope = scope_of(str(clear["type"]), clear["payload"])
        if scope is None:  # sealed, so it had a scope when written: the clear part keeps its fields
            raise ValueError(f"sealed event {clear.get('id')!r} names no key scope")
        return key_id, agent, scope
    return key_id, agent, AGENT_SCOPE


def keys_named(
    records: Iterable[tuple[int, bytes]], agent: str, scopes: Sequence[str] | None, before_offset: int
) -> list[bytes]:
    """The key ids sealing ``agent``'s data of ``scopes`` (None: all of it) among ``records``
    ((offset, value) pairs) before ``before_offset``, each once, in the order first met: what
    ``SqliteLog.key_ids`` answers from its table."""
    wanted = None if scopes is None else set(scopes)
    out: dict[bytes, None] = {}
    for offset, value in records:
        if offset >= before_offset:
            continue
        bound = sealed_binding(value)
        if bound is not None and bound[1] == agent and (wanted is None or bound[2] in wanted):
            out.setdefault(bound[0], None)
    return list(out)


def clear_content(rec: dict[str, Any]) -> tuple[str, str | None] | None:
    """(agent, scope) of a decoded *clear* event or audit record that holds what sealing would
    have covered (written before the topics were sealed); None for one that holds none. An audit
    record's request copy is of the agent, whatever the scope (None)."""
    agent = str(rec["scope"]["agent_id"])
    if "payload" in rec:
        if rec["type"] in ERASURE_TYPES:
            return None
        scope = scope_of(str(rec["type"]), rec["payload"])
        return None if scope is None else (agent, scope)
    return (agent, None) if rec.get("request") else None


@dataclass(slots=True)
class Named:
    """What one erasure names in its partition: the key ids sealing its data, by scope (as the
    map held them), and how many clear records of its data (written before sealing) each topic
    holds."""

    scopes: dict[str, dict[bytes, None]]
    clear: dict[str, int]

    def key_ids(self) -> list[bytes]:
        """The key ids, each once: a pass over all of them (100k for a large agent), which the
        worker makes on a thread, not on the decider's loop that folded the erasure."""
        return [k for ids in self.scopes.values() for k in ids]

    @property
    def keys(self) -> list[bytes]:
        return self.key_ids()


class KeyScopes:
    """Per partition: which key ids seal which (agent, scope), folded from the stored values of
    the events and audit records in the order they were decided, and what each erasure folded
    so far names (``named``), held until it is completed (``completed``). The same answer as
    ``keys_named`` over the records before the erasure, without reading them at the erasure."""

    def __init__(self, events_topic: str, audit_topic: str) -> None:
        self.events_topic = events_topic
        self.audit_topic = audit_topic
        self._keys: dict[str, dict[str, dict[bytes, None]]] = {}  # agent -> scope -> key ids
        self._clear: dict[str, dict[str | None, dict[str, int]]] = {}  # agent -> scope -> topic -> n
        self._erasures: dict[int, Named] = {}  # erasure offset -> what it names, until completed

    def fold(self, events: Iterable[tuple[int, str, bytes]], audits: Iterable[tuple[int, bytes]]) -> None:
        """``events``: (offset, type, stored value), in offset order; ``audits``: (the event offset
        it was decided after, stored value), in their order. Merged as they were decided (an
        audit record decided after event e comes before event e + 1)."""
        pending = iter(audits)
        audit = next(pending, None)
        for offset, event_type, value in events:
            while audit is not None and audit[0] < offset:
                self.audit(audit[1])
                audit = next(pending, None)
            self.event(offset, event_type, value)
        while audit is not None:
            self.audit(audit[1])
            audit = next(pending, None)

    def event(self, offset: int, event_type: str, value: bytes) -> None:
        if not value:
            return
        bound = sealed_binding(value)
        if bound is not None:
            self._bind(*bound)
            return
        rec = orjson.loads(value)
        if event_type in ERASURE_TYPES:
            self._erased(offset, str(rec["scope"]["agent_id"]), rec["payload"].get("scopes"))
            return
        self._count(clear_content(rec), self.events_topic)

    def audit(self, value: bytes) -> None:
        if not value:
            return
        bound = sealed_binding(value)
        if bound is not None:
            self._bind(*bound)
        else:
            self._count(clear_content(orjson.loads(value)), self.audit_topic)

    def _bind(self, key_id: bytes, agent: str, scope: str) -> None:
        self._keys.setdefault(agent, {}).setdefault(scope, {})[key_id] = None

    def _count(self, found: tuple[str, str | None] | None, topic: str) -> None:
        if found is not None:
            counts = self._clear.setdefault(found[0], {}).setdefault(found[1], {})
            counts[topic] = counts.get(topic, 0) + 1

    def _erased(self, offset: int, agent: str, scopes: Sequence[str] | None) -> None:
        # Its keys leave the map (they are destroyed at its completion, and a later write of the
        # same data is sealed under a new key); the clear records stay in the topics, so a later
        # erasure of the same data names them again, as a read of the records would.
        # Folded on the decider's loop, which every other write waits for: what leaves the map
        # is moved, not copied (an agent's 100k scopes are one dict taken whole), and freed on
        # the release thread once the erasure is completed (streams/release.py).
        keys = self._keys.get(agent, {})
        if scopes is None:
            taken = self._keys.pop(agent, {})
        else:
            taken = {s: keys.pop(s) for s in scopes if s in keys}
            if not keys:
                self._keys.pop(agent, None)
        clear: dict[str, int] = {}
        for scope, counts in self._clear.get(agent, {}).items():
            if scope is None or scopes is None or scope in scopes:
                for topic, n in counts.items():
                    clear[topic] = clear.get(topic, 0) + n
        self._erasures[offset] = Named(taken, clear)

    def named(self, offset: int) -> Named | None:
        """What the erasure at ``offset`` names; None when no erasure at ``offset`` was folded
        here or it was completed already."""
        return self._erasures.get(offset)

    def completed(self, through: int) -> None:
        """Forget what the erasures up to ``through`` named (completed: their keys are destroyed)."""
        for offset in [o for o in self._erasures if o <= through]:
            self.completed_one(offset)

    def completed_one(self, offset: int) -> None:
        """Forget what the erasure at ``offset`` named (completed)."""
        named = self._erasures.pop(offset, None)
        if named is not None:
            release_later(named.scopes)
