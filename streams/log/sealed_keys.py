"""Which data keys an erasure names, read from the sealed records themselves.

The embedded log records which key seals what in its ``key_scopes`` table, written with the
first event a key seals. A log without such a table (the Kafka topics) still knows it: every
sealed value names its key id, and its clear part names the agent and (through ``scope_of``)
the scope. So an erasure's keys are found by reading the agent's records before the erasure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import orjson

from memstream.streams.keys.port import KEY_ID_BYTES
from memstream.streams.log.sealing import _HEAD, _LEN, AGENT_SCOPE, MAGIC, scope_of


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
