"""The decision state's memories as columns in its snapshot (formats 3 and 4): one array per field.

A restart loads every memory's dedup facts. As one JSON list per memory (format 2) that was a
million small objects to parse at 100k memories; as columns it is a few base64 strings and
short tables. Format 4 holds the msg ids as a row column and their values, which format 3 held
as a [row, msg id] pair each: an agent that passes its message ids gives every memory one, and
at 1M memories the pairs were ~0.12 GB of lists at the top of a running server's checkpoint
(docs/benchmarks.md, "A running server's checkpoint with room (wave 12)"). The digest stays
over the format-2 rows (``DecisionState.canonical``), so states compare across formats."""

from __future__ import annotations

from sys import intern
from typing import Any

import numpy as np

from memstream.streams.base64_columns import decode, encode
from memstream.streams.decision.facts import MemoryFacts, intern_models

_KEY_BYTES = 16  # keys.content_key's digest size


class _Table:
    """Distinct values in first-seen order, each row naming its value by index."""

    def __init__(self) -> None:
        self.index: dict[Any, int] = {}
        self.values: list[Any] = []

    def of(self, value: Any) -> int:
        i = self.index.get(value)
        if i is None:
            i = self.index[value] = len(self.values)
            self.values.append(value)
        return i


def memories_to_columns(memories: dict[int, MemoryFacts]) -> dict[str, Any]:
    """The memories in id order as columns: ids, string and model-set tables with an index
    column each, the content keys as one byte string, the msg ids as the rows holding one and
    their values, the few locks sparse."""
    ids = sorted(memories)
    n = len(ids)
    strings, model_sets = _Table(), _Table()
    project = np.empty(n, "<u4")
    channel = np.empty(n, "<u4")
    source = np.empty(n, "<u4")
    models = np.empty(n, "<u4")
    keys = bytearray()
    has_msg_id = np.zeros(n, np.bool_)
    msg_ids: list[str] = []
    locked: list[int] = []
    for row, mid in enumerate(ids):
        f = memories[mid]
        project[row] = strings.of(f.project)
        channel[row] = strings.of(f.channel)
        source[row] = strings.of(f.source_id)
        models[row] = model_sets.of(f.models)
        if len(f.content_key) != _KEY_BYTES:
            raise ValueError(f"memory {mid}: content key of {len(f.content_key)} bytes")
        keys += f.content_key
        if f.msg_id is not None:
            has_msg_id[row] = True
            msg_ids.append(f.msg_id)
        if f.locked:
            locked.append(row)
    return {
        "n": n,
        "ids": encode(np.asarray(ids, "<i8")),
        "strings": strings.values,
        "project": encode(project),
        "channel": encode(channel),
        "source": encode(source),
        "model_sets": [list(m) for m in model_sets.values],
        "models": encode(models),
        "content_keys": encode(keys),
        "msg_ids": {"rows": encode(np.flatnonzero(has_msg_id).astype("<u4")), "values": msg_ids},
        "locked": locked,
    }


def memories_from_columns(cols: dict[str, Any]) -> dict[int, MemoryFacts]:
    """The memories by id, in id order, from format 4's columns or format 3's (told apart by
    their msg ids); raises ``ValueError`` (and the like) on a damaged layout."""
    n = cols["n"]
    id_column = decode(cols["ids"], "<i8", n)
    if n > 1 and not bool(np.all(id_column[1:] > id_column[:-1])):
        raise ValueError("memory ids not in ascending order")
    ids = id_column.tolist()
    strings = np.array([intern(s) for s in cols["strings"]] or [""], dtype=object)
    sets = np.empty(max(1, len(cols["model_sets"])), dtype=object)
    sets[:] = [intern_models(*m) for m in cols["model_sets"]] or [()]

    def pick(table: np.ndarray, column: str) -> list[Any]:
        index = decode(cols[column], "<u4", n)
        if n and int(index.max()) >= len(table):
            raise ValueError(f"column {column} names a value past its table")
        return table[index].tolist()  # type: ignore[no-any-return]

    # One bytes object per key, split in C (a void dtype keeps trailing zero bytes, unlike "S"):
    # ~3x faster than slicing in a loop (0.26 -> 0.09 s at 1M).
    keys: list[bytes] = decode(cols["content_keys"], f"V{_KEY_BYTES}", n).tolist()
    msg_ids = _msg_ids(cols["msg_ids"], n)
    locked = [False] * n
    for row in cols["locked"]:
        locked[row] = True
    facts = map(
        MemoryFacts,
        pick(strings, "project"),
        pick(strings, "channel"),
        msg_ids,
        keys,
        pick(strings, "source"),
        locked,
        pick(sets, "models"),
    )
    return dict(zip(ids, facts, strict=True))


def _msg_ids(held: dict[str, Any] | list[list[Any]], n: int) -> list[str | None]:
    """Each row's msg id: format 4's rows column and values, or format 3's [row, msg id] pairs."""
    out: list[str | None] = [None] * n
    if isinstance(held, list):
        for row, msg_id in held:
            out[row] = msg_id
        return out
    values = held["values"]
    if not isinstance(values, list):
        raise TypeError("msg id values are not a list")
    rows = decode(held["rows"], "<u4", len(values))
    if rows.shape[0] and (int(rows.max()) >= n or not bool(np.all(rows[1:] > rows[:-1]))):
        raise ValueError("msg id rows out of order or past the memories")
    if rows.shape[0] == n:  # every memory has one: the rows are 0..n-1
        return list(values)
    for row, msg_id in zip(rows.tolist(), values, strict=True):
        out[row] = msg_id
    return out
