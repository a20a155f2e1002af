"""The rows of one (agent, model, kind): recency-ordered columns, vectors in fixed chunks, tombstones."""

from __future__ import annotations

import math
from typing import Final

import numpy as np

from memstream.projections.vectors.spill import Spill, release

CHUNK: Final = 8192  # rows per vector chunk


def inv_norm(vec: np.ndarray) -> float:
    """``np.vdot``, not ``np.dot``: the same BLAS sum to the bit, but it keeps the interpreter
    lock. ``np.dot`` lets it go for each call, once per folded vector, and every release wakes
    another thread waiting for it (docs/benchmarks.md, "The fold keeps the lock (wave 11)")."""
    wide = vec.astype(np.float64)
    norm = math.sqrt(float(np.vdot(wide, wide)))
    return 1.0 / norm if norm > 0 and math.isfinite(norm) else 0.0


class Segment:
    """The rows of one (agent, model, kind), recency-ordered when ``sorted``."""

    __slots__ = (
        "_base_keys",
        "_base_pos",
        "_extra",
        "alive",
        "buckets",
        "chunks",
        "dead",
        "dim",
        "inv",
        "keys",
        "kind",
        "model",
        "n",
        "offs",
        "sorted",
        "spill",
    )

    def __init__(self, model: str, kind: int, dim: int, capacity: int = 64, spill: Spill | None = None) -> None:
        self.model = model
        self.kind = kind
        self.dim = dim
        self.n = 0
        self.dead = 0
        self.sorted = True
        self.keys = np.empty(capacity, np.int64)
        self.offs = np.empty(capacity, np.int64)
        self.buckets = np.empty(capacity, np.int32)
        self.alive = np.empty(capacity, np.bool_)
        self.inv = np.empty(capacity, np.float32)  # 1/|v| (0 for a zero vector): derived, not state
        self.chunks: list[np.ndarray] = []
        # key -> position: rows as of the last compaction (or load) as a sorted key array with
        # their positions (None: the keys ascend with position, the usual case), rows appended
        # since in a dict. A dict for every row held ~250 B per row at 100k; this holds 8-12.
        self._base_keys = np.empty(0, np.int64)
        self._base_pos: np.ndarray | None = None
        self._extra: dict[int, int] = {}
        # Where full-size chunks come from when set: file-backed, released once full (spill.py).
        self.spill = spill

    @property
    def live(self) -> int:
        return self.n - self.dead

    def _grow(self, need: int) -> None:
        cap = max(need, int(self.keys.shape[0] * 1.5) + 64)
        for name in ("keys", "offs", "buckets", "alive", "inv"):
            old = getattr(self, name)
            new = np.empty(cap, old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)

    def append(self, key: int, off: int, bucket: int, vec: np.ndarray) -> None:
        n = self.n
        if n == self.keys.shape[0]:
            self._grow(n + 1)
        c, i = divmod(n, CHUNK)
        if c == len(self.chunks):
            self.chunks.append(self._new_chunk(c, 0))
        chunk = self.chunks[c]
        if i == chunk.shape[0]:
            grown = self._new_chunk(c, i)
            grown[:i] = chunk[:i]
            self.chunks[c] = chunk = grown
        chunk[i] = vec
        if i == CHUNK - 1:
            release(chunk)  # full: a spilled chunk's pages leave the process (no-op otherwise)
        if n and off < self.offs[n - 1]:
            self.sorted = False
        self.keys[n] = key
        self.offs[n] = off
        self.buckets[n] = bucket
        self.alive[n] = True
        self.inv[n] = inv_norm(vec)
        self._extra[key] = n
        self.n = n + 1

    def _new_chunk(self, c: int, rows: int) -> np.ndarray:
        """Room for chunk ``c`` holding ``rows`` rows now. The last chunk grows by doubling up
        to CHUNK rows: a small segment, or the tail of a loaded or compacted one, holds about the
        rows it has, not a whole chunk. With a spill, a chunk that would be whole (or one after
        the first) is a whole spilled chunk at once: its unwritten pages take no memory."""
        size = min(CHUNK, max(64, 2 * rows))
        if self.spill is not None and (size == CHUNK or c > 0):
            return self.spill.chunk(CHUNK, self.dim)
        return np.empty((size, self.dim), np.float32)

    def index_rows(self) -> None:
        """Index the ``n`` rows held now by key (after a compaction or a load: all alive)."""
        keys = self.keys[: self.n]
        if len(keys) < 2 or bool(np.all(keys[1:] > keys[:-1])):
            self._base_keys, self._base_pos = keys.copy(), None
        else:
            order = np.argsort(keys, kind="stable")
            self._base_keys, self._base_pos = keys[order], order.astype(np.int32)
        self._extra = {}

    def pos(self, key: int) -> int | None:
        """The position of the key's live row, or None."""
        p = self._extra.get(key)
        if p is not None:
            return p
        base = self._base_keys
        if not len(base) or key > base[-1] or key < base[0]:
            return None
        i = int(np.searchsorted(base, key))
        if base[i] != key:
            return None
        p = i if self._base_pos is None else int(self._base_pos[i])
        return p if self.alive[p] else None

    def has(self, key: int) -> bool:
        return self.pos(key) is not None

    def at(self, key: int) -> int:
        """The position of the key's live row; ``KeyError`` when it has none."""
        p = self.pos(key)
        if p is None:
            raise KeyError(key)
        return p

    def live_keys(self) -> list[int]:
        """The keys of the live rows, in position order."""
        n = self.n
        return self.keys[:n][self.alive[:n]].tolist()  # type: ignore[no-any-return]

    def row(self, pos: int) -> np.ndarray:
        return self.chunks[pos // CHUNK][pos % CHUNK]

    def kill(self, key: int) -> int:
        pos = self._extra.pop(key, None)
        if pos is None:
            pos = self.at(key)
        self.alive[pos] = False
        self.dead += 1
        return pos

    def kill_many(self, pos: np.ndarray) -> None:
        """``kill`` the live rows at ascending positions ``pos``, and zero their vectors."""
        extra = self._extra
        if extra:
            for key in self.keys[pos].tolist():
                extra.pop(key, None)
        self.alive[pos] = False
        self.dead += len(pos)
        ci = pos // CHUNK
        cuts = np.flatnonzero(np.diff(ci)) + 1
        for part in np.split(pos, cuts):
            c = int(part[0]) // CHUNK
            self.chunks[c][part - c * CHUNK] = 0

    def gather(self, pos: np.ndarray) -> np.ndarray:
        """Vectors at ``pos`` (any order), as one (len, dim) float32 array."""
        out = np.empty((len(pos), self.dim), np.float32)
        if not len(pos):
            return out
        ci = pos // CHUNK
        order = np.argsort(ci, kind="stable")
        sci = ci[order]
        cuts = np.flatnonzero(np.diff(sci)) + 1
        for grp in np.split(order, cuts):
            c = int(ci[grp[0]])
            out[grp] = self.chunks[c][pos[grp] - c * CHUNK]
        return out

    def scores(self, pos: np.ndarray, q: np.ndarray) -> np.ndarray:
        """float32 cosines (up to |q|) of rows at ascending positions ``pos`` with ``q``."""
        out = np.empty(len(pos), np.float32)
        if not len(pos):
            return out
        ci = pos // CHUNK
        cuts = np.flatnonzero(np.diff(ci)) + 1
        start = 0
        for end in [*cuts.tolist(), len(pos)]:
            c = int(ci[start])
            local = pos[start:end] - c * CHUNK
            lo, hi = int(local[0]), int(local[-1]) + 1
            chunk = self.chunks[c]
            if (end - start) * 2 >= hi - lo:  # dense: one product over the span, then pick
                s = chunk[lo:hi] @ q
                out[start:end] = s if end - start == hi - lo else s[local - lo]
            else:
                out[start:end] = chunk[local] @ q
            start = end
        out *= self.inv[pos]
        return out

    def compact(self) -> None:
        """Drop tombstones and restore recency order (positions change)."""
        n = self.n
        order = np.flatnonzero(self.alive[:n])
        if not self.sorted:
            order = order[np.argsort(self.offs[order], kind="stable")]
        m = len(order)
        chunks = []
        for a in range(0, m, CHUNK):
            chunks.append(self.gather(order[a : a + CHUNK]))  # the last one as long as its rows
        self.chunks = chunks
        for name in ("keys", "offs", "buckets", "inv"):
            arr = getattr(self, name)
            arr[:m] = arr[order]
        self.alive[:m] = True
        self.n = m
        self.dead = 0
        self.sorted = True
        self.index_rows()

    def maybe_compact(self) -> None:
        if not self.sorted or (self.dead > 1024 and self.dead * 4 > self.n):
            self.compact()

    def maybe_compact_dead(self) -> None:
        """Compact once a quarter of the rows (and more than 1024) are dead."""
        if self.dead > 1024 and self.dead * 4 > self.n:
            self.compact()

    def select(self, lut: np.ndarray | None, hi: int) -> np.ndarray:
        """Ascending positions of the newest ``hi`` live rows admitted by ``lut`` (sorted segment)."""
        n = self.n
        if hi <= 0 or n == 0:
            return np.empty(0, np.int64)
        if lut is None and self.dead == 0:
            return np.arange(max(0, n - hi), n, dtype=np.int64)
        found: list[np.ndarray] = []
        total = 0
        end = n
        block = max(2 * hi, 32_768)
        while end > 0 and total < hi:
            start = max(0, end - block)
            m = self.alive[start:end]
            if lut is not None:
                m = m & lut[self.buckets[start:end]]
            p = np.flatnonzero(m) + start
            found.append(p)
            total += len(p)
            end = start
            block *= 2
        allp = found[0] if len(found) == 1 else np.concatenate(found[::-1])
        return allp[max(0, len(allp) - hi) :]

    def newest_live_offset(self) -> int:
        n = self.n
        if self.live == 0:
            return -1
        if not self.sorted:
            return int(self.offs[:n][self.alive[:n]].max())
        end = n
        while end > 0:
            start = max(0, end - 4096)
            p = np.flatnonzero(self.alive[start:end])
            if len(p):
                return int(self.offs[start + p[-1]])
            end = start
        return -1
