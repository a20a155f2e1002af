"""History: which log offsets touched each memory or episode (H1).

The projection keeps offsets only; the events themselves are read back from the log when a
history is asked for. That keeps the fold small at millions of events and makes the answer
exactly what the log holds. Deleted records keep their history: nothing here is ever removed.

A history is read rarely (a history call, an export, an erasure's answer) and loaded at every
start, so a checkpoint holds it as columns (format 2): per ref kind (``mem``, ``ep``, ...) the
ids in ascending order, how many offsets each has, and the offsets in that order, hex
arrays a restart turns into numpy without a Python object per ref (1.8 CPU s at 1M memories as
a dict of ref strings: docs/benchmarks.md, "Restart"). What the fold adds after a load goes to a
dict beside the columns; ``of`` answers from both.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from sys import intern
from typing import Any

import numpy as np

from memstream.streams.decision.whole_agent import names_every_record

FORMAT = 2
_MAX_ID_DIGITS = 18  # fits int64


def refs_touched(ev: dict[str, Any]) -> list[str]:
    """The refs an event changes, as the history of each should list it."""
    t = ev["type"]
    p = ev["payload"]
    if t.startswith("memory."):
        return [f"{p.get('kind', 'mem')}:{p['id']}"]
    if t.startswith("episode."):
        return [f"ep:{p['id']}"]
    if t == "standing.declared":
        return [p["ref"]]
    if t == "agent_data.deleted" and not names_every_record(p):
        return [f"mem:{i}" for i in p["memory_ids"]] + [f"ep:{i}" for i in p["episode_ids"]]
    return []


def _split(ref: str) -> tuple[str, int] | None:
    """``("mem", 12)`` for ``"mem:12"``; None for a ref whose id is not a plain decimal (kept
    as a string), so that ``f"{kind}:{id}"`` gives the ref back exactly."""
    kind, sep, num = ref.rpartition(":")
    if not sep or not num.isascii() or not num.isdigit() or len(num) > _MAX_ID_DIGITS:
        return None
    if len(num) > 1 and num[0] == "0":
        return None
    return kind, int(num)


_DTYPES = ("<u1", "<u2", "<u4", "<u8")


_SLICE = 10_000  # Python ints turned into an array by one call


def _arrays(xs: list[int]) -> list[np.ndarray]:
    """``xs`` as int64 arrays of ``_SLICE`` each: one conversion of the 100k refs stored since
    the last load held the interpreter lock 20-70 ms while an erasure rewrote the checkpoints,
    and other agents' stores waited (bench/erasure.py --trace)."""
    return [np.asarray(xs[i : i + _SLICE], dtype=np.int64) for i in range(0, len(xs), _SLICE)]


def _pack(arr: np.ndarray) -> list[str]:
    """``[dtype, hex]``: non-negative integers in the narrowest unsigned type that holds them.
    Hex, not base64: ``bytes.fromhex`` decodes ~2.5x faster per byte than ``a2b_base64``, and
    narrow types (id gaps and counts are mostly 1) keep it short."""
    top = int(arr.max()) if len(arr) else 0
    dtype = next(d for d in _DTYPES if top < 1 << (8 * np.dtype(d).itemsize))
    return [dtype, arr.astype(dtype).tobytes().hex()]


def _unpack(column: list[str]) -> np.ndarray:
    dtype, text = column
    if dtype not in _DTYPES:
        raise ValueError(f"history: a column of type {dtype!r}")
    values = np.frombuffer(bytes.fromhex(text), dtype=dtype)
    if dtype == "<u8" and len(values) and int(values.max()) >= 1 << 63:
        raise ValueError("history: a value past int64")
    return values.astype(np.int64)


class _Kind:
    """One kind's refs loaded from a checkpoint: ``ids`` ascending, ref ``i``'s offsets
    ``flat[starts[i]:starts[i + 1]]``. Looked up through memoryviews (``bisect`` on one, a
    slice's ``tolist``): about twice as fast per call as numpy's scalar ``searchsorted``."""

    __slots__ = ("_flat", "_ids", "_starts", "flat", "ids", "starts")

    def __init__(self, ids: np.ndarray, starts: np.ndarray, flat: np.ndarray) -> None:
        self.ids, self.starts, self.flat = ids, starts, flat
        self._ids, self._starts, self._flat = ids.data, starts.data, flat.data

    def of(self, ident: int) -> list[int]:
        ids = self._ids
        i = bisect_left(ids, ident)
        if i == len(ids) or ids[i] != ident:
            return []
        return self._flat[self._starts[i] : self._starts[i + 1]].tolist()

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Every (id, offset) pair, one per offset."""
        return np.repeat(self.ids, np.diff(self.starts)), self.flat


def _kind_from_columns(body: dict[str, Any], offsets: np.ndarray, at: int) -> tuple[_Kind, int]:
    """One kind's columns, its offsets taken from ``offsets`` from ``at`` on; ``ValueError``
    when they do not fit together."""
    gaps = _unpack(body["ids"])  # the first id, then each id less the one before it
    counts = _unpack(body["counts"])
    if len(gaps) != len(counts):
        raise ValueError("history: ids and counts of different lengths")
    if len(gaps) > 1 and int(gaps[1:].min()) == 0:
        raise ValueError("history: ids not ascending")
    ids = np.cumsum(gaps)
    if len(counts) and int(counts.min()) == 0:
        raise ValueError("history: a ref without offsets")
    starts = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    end = at + int(starts[-1])
    if end > len(offsets):
        raise ValueError("history: fewer offsets than the counts say")
    return _Kind(ids, starts, offsets[at:end]), end


@dataclass
class HistoryProjection:
    name: str = "history"
    # Events whose key an erasure destroyed are still listed (as redacted entries): ids are clear.
    sees_redacted = True
    offset: int = -1
    # ref -> the offsets that touched it since the checkpoint this was loaded from (all of them
    # when folded from the log): the one offset itself while there is one (most refs: a stored
    # memory nobody changed), a list from the second on.
    offsets: dict[str, int | list[int]] = field(default_factory=dict)
    # What a checkpoint held, by kind (read-only; the offsets above come after these).
    loaded: dict[str, _Kind] = field(default_factory=dict)
    # agent -> the offsets of its erasures of everything (which name no record): each is in the
    # history of every record of the agent first touched before it (``erasures_after``).
    agent_erasures: dict[str, list[int]] = field(default_factory=dict)

    def apply(self, offset: int, ev: dict[str, Any]) -> None:
        if ev["type"] == "agent_data.deleted" and names_every_record(ev["payload"]):
            self.agent_erasures.setdefault(ev["scope"]["agent_id"], []).append(offset)
            return
        for ref in refs_touched(ev):
            offsets = self.offsets.get(ref)
            if offsets is None:
                self.offsets[intern(ref)] = offset  # one string with the versions and lexical refs
            elif isinstance(offsets, int):
                self.offsets[ref] = [offsets, offset]
            else:
                offsets.append(offset)

    def of(self, ref: str) -> list[int]:
        out: list[int] = []
        if self.loaded:
            split = _split(ref)
            kind = None if split is None else self.loaded.get(split[0])
            if kind is not None and split is not None:
                out = kind.of(split[1])
        since = self.offsets.get(ref)
        if since is None:
            return out
        return [*out, since] if isinstance(since, int) else [*out, *since]

    def erasures_after(self, agent_id: str, first: int) -> list[int]:
        """The offsets of the erasures of everything of ``agent_id`` after ``first`` (a record's
        first offset): they erased that record, and belong in its history."""
        return [o for o in self.agent_erasures.get(agent_id, ()) if o > first]

    def to_snapshot(self) -> dict[str, Any]:
        """Columns by kind, ids ascending (format 2): the same bytes whichever part of the
        state came from a checkpoint, so a loaded history and its refold digest alike."""
        pairs: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        for name, kind in self.loaded.items():
            ids, offs = kind.pairs()
            pairs.setdefault(name, ([], []))
            pairs[name][0].append(ids)
            pairs[name][1].append(offs)
        other: dict[str, list[int]] = {}
        added: dict[str, tuple[list[int], list[int]]] = {}
        for ref, since in self.offsets.items():
            split = _split(ref)
            if split is None:
                other[ref] = [since] if isinstance(since, int) else list(since)
                continue
            ids_of, offs_of = added.setdefault(split[0], ([], []))
            if isinstance(since, int):
                ids_of.append(split[1])
                offs_of.append(since)
            else:
                ids_of.extend([split[1]] * len(since))
                offs_of.extend(since)
        for name, (ids_of, offs_of) in added.items():
            pairs.setdefault(name, ([], []))
            pairs[name][0].extend(_arrays(ids_of))
            pairs[name][1].extend(_arrays(offs_of))
        kinds: dict[str, dict[str, list[str]]] = {}
        flat: list[np.ndarray] = []
        for name in sorted(pairs):
            ids = np.concatenate(pairs[name][0])
            offs = np.concatenate(pairs[name][1])
            order = np.lexsort((offs, ids))
            ids, offs = ids[order], offs[order]
            unique, counts = np.unique(ids, return_counts=True)
            kinds[name] = {"ids": _pack(np.diff(unique, prepend=0)), "counts": _pack(counts)}
            flat.append(offs)
        everything = np.concatenate(flat) if flat else np.empty(0, dtype=np.int64)
        body: dict[str, Any] = {
            "format": FORMAT,
            "kinds": kinds,
            "offsets": _pack(everything),
            "other": dict(sorted(other.items())),
        }
        if self.agent_erasures:  # absent when none: a log without them digests as before
            body["agent_erasures"] = dict(sorted(self.agent_erasures.items()))
        return body

    def load_snapshot(self, body: dict[str, Any]) -> None:
        self.agent_erasures = {intern(a): [int(o) for o in offs] for a, offs in body.get("agent_erasures", {}).items()}
        if body.get("format") != FORMAT:  # format 1: a dict of ref -> offsets
            self.offsets = {intern(k): v[0] if len(v) == 1 else list(v) for k, v in body["offsets"].items()}
            self.loaded = {}
            return
        offsets = _unpack(body["offsets"])
        loaded: dict[str, _Kind] = {}
        at = 0
        for name, columns in sorted(body["kinds"].items()):
            loaded[name], at = _kind_from_columns(columns, offsets, at)
        if at != len(offsets):
            raise ValueError("history: more offsets than the counts say")
        other: dict[str, int | list[int]] = {}
        for ref, offs in body["other"].items():
            if _split(ref) is not None or not offs or not all(isinstance(o, int) for o in offs):
                raise ValueError(f"history: malformed entry for {ref!r}")
            other[intern(ref)] = offs[0] if len(offs) == 1 else list(offs)
        self.loaded = {name: kind for name, kind in loaded.items() if len(kind.ids)}
        self.offsets = other
