"""The lexical snapshot's sidecar: each agent's analysed index (slots, postings, keyword words) as
binary arrays, so a restart reads the index instead of re-analysing every text."""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Generator, Iterator, Sequence
from sys import intern
from typing import Any, Final

import numpy as np
import orjson

from memstream.projections.lexical.index import AgentIndex
from memstream.projections.lexical.packed import Packed
from memstream.projections.lexical.rows import SnapshotRows
from memstream.projections.vectors.spill import page_out
from memstream.streams.snapshots import SnapshotStore

# 3: the arrays first, each written as it is made, and the header last (a trailer), so a
# checkpoint never holds the whole sidecar (docs/benchmarks.md, "The lexical checkpoint's peak (wave 10)").
# 2: no refs in the header (the snapshot's rows give them, through ``row_of``); postings and
# grams stay packed after a load (``packed.py``). 2 and 1 still load.
FORMAT: Final = 3
READS: Final = frozenset({1, 2, 3})

# The first word of a format-3 sidecar: no header that long was ever written before it.
TRAILED: Final = 0xFFFF_FFFF_FFFF_FFFF
_ALIGN: Final = 64

# The per-slot columns, with the dtype each is stored in.
_COLUMNS: Final = (("seq", np.int64), ("dlen", np.float64), ("proj", np.int32), ("chan", np.int32), ("alive", np.bool_))

Piece = bytes | memoryview
Pieces = Generator[Piece, None, list[int]]


class _Parts:
    """Arrays laid out one after another, each 64-byte aligned; the header names them [offset, bytes]."""

    def __init__(self, at: int) -> None:
        self.pos = at

    def put(self, *data: Any) -> Pieces:
        """Yields the bytes of ``data`` (arrays of one dtype, laid one after another as one
        array) and their padding, and returns where they are: the caller passes the arrays
        inline, so they are released once written."""
        at = self.pos
        nbytes = 0
        for d in data:
            view = memoryview(d).cast("B")
            if view.nbytes:
                yield view
                nbytes += view.nbytes
        pad = (-nbytes) % _ALIGN
        if pad:
            yield b"\0" * pad
        self.pos += nbytes + pad
        return [at, nbytes]


def _flat(lists: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Several int32 arrays as one CSR: (prefix sums of their lengths, their concatenation)."""
    ptr = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(np.fromiter((len(a) for a in lists), dtype=np.int64, count=len(lists)), out=ptr[1:])
    return ptr, np.frombuffer(b"".join(lists), dtype=np.int32)


def _packed_csr(table: Packed[Any], keys: list[str], col: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """One column of a packed mapping as a CSR in the order of ``keys`` (its unpacked keys, then
    its base's): its prefix sums, and its flat array in parts: the unpacked keys' joined, then
    the base's as views of the loaded sidecar, written from there without a copy."""
    ptr, flat = _flat([table.buffers(k)[col] for k in keys[: len(keys) - len(table.base)]])
    if not table.base:
        return ptr, [flat]
    rows = np.fromiter(table.base.values(), dtype=np.int64, count=len(table.base))
    starts, ends = table.ptr[rows], table.ptr[rows + 1]
    base_ptr = np.cumsum(ends - starts) + ptr[-1]
    return np.concatenate((ptr, base_ptr)), [flat, *_runs(table.cols[col], starts, ends)]


def _runs(column: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[np.ndarray]:
    """``column[starts[i]:ends[i]]`` for each ``i`` in order, as views, a run of rows each starting
    where the one before ended taken as one slice. The base is in row order less the keys
    unpacked since the load, so a running server's is as many runs as it unpacked keys; copied
    through an index of every entry instead, it was two int64 arrays of the whole column at the
    top of a 1M checkpoint's peak (docs/benchmarks.md, "A running server's checkpoint with room
    (wave 12)")."""
    if not starts.shape[0]:
        return []
    cut = np.flatnonzero(starts[1:] != ends[:-1]) + 1
    firsts = starts[np.concatenate(([0], cut))].tolist()
    lasts = ends[np.concatenate((cut - 1, [starts.shape[0] - 1]))].tolist()
    return [column[a:b] for a, b in zip(firsts, lasts, strict=True) if b > a]


def _renumbered(parts: list[np.ndarray], remap: np.ndarray) -> list[np.ndarray]:
    """The parts' ids renumbered by ``remap``, those it maps to -1 left out."""
    out = []
    for a in parts:
        r = remap[a]
        out.append(r[r >= 0])
    return out


def _page_out(table: Packed[Any], col: int) -> None:
    """Once written, the base's pages of the loaded sidecar go back to the kernel: read for the
    write, they were 0.14 GB of resident file pages at the top of a 1M checkpoint's peak."""
    if col < len(table.cols):
        page_out(table.cols[col])


def _kept_ptr(ptr: np.ndarray, keep: np.ndarray | None) -> np.ndarray:
    """The prefix sums of a CSR once only the ``keep`` entries of its flat array stay."""
    if keep is None:
        return ptr
    kept = np.zeros(keep.shape[0] + 1, dtype=np.int64)
    np.cumsum(keep, out=kept[1:])
    return kept[ptr]


def _agent_arrays(name: str, idx: AgentIndex, parts: _Parts) -> Generator[Piece, None, dict[str, Any]]:
    """One agent's index without its dead slots, and without the keyword words and grams only
    dead slots held: what the sidecar keeps is what the live rows say (an erased or deleted
    text leaves nothing in it), renumbered in slot order so recency ties break the same.
    Yields the arrays one at a time, each made just before it is written; returns the header's
    entry naming them."""
    kw = idx.kw
    if len(kw.dw):
        kw.merge()  # the pending keyword postings join the CSR; the answers do not change
    n = idx.n
    alive = idx.alive[:n]
    live = np.flatnonzero(alive)
    every = live.shape[0] == n  # no dead slot: nothing to drop or renumber
    remap = np.full(n, -1, dtype=np.int32)
    remap[live] = np.arange(live.shape[0], dtype=np.int32)
    e: dict[str, Any] = {"agent": name, "n": int(live.shape[0]), "total_len": idx.total_len, "names": idx.names}
    # Each slot's row in the snapshot's list (sorted by seq, ties in slot order: live_rows).
    order = np.argsort(idx.seq[live], kind="stable")
    e["row_of"] = yield from parts.put(np.argsort(order, kind="stable").astype(np.int32))
    del order
    e["columns"] = {}
    for col, _ in _COLUMNS:
        e["columns"][col] = yield from parts.put(np.ascontiguousarray(getattr(idx, col)[live]))
    # BM25 postings: every term is held by a live row (``remove`` drops the others).
    terms = e["terms"] = idx.post.unpacked() + list(idx.post.base)
    e["df"] = yield from parts.put(np.fromiter((idx.df[t] for t in terms), dtype=np.int32, count=len(terms)))
    sptr, sflat = _packed_csr(idx.post, terms, 0)
    keeps = None if every else [alive[a] for a in sflat]
    e["post_ptr"] = yield from parts.put(_kept_ptr(sptr, None if keeps is None else np.concatenate(keeps)))
    del sptr
    e["post_slots"] = yield from parts.put(*(sflat if every else _renumbered(sflat, remap)))
    del sflat
    _page_out(idx.post, 0)
    tflat = _packed_csr(idx.post, terms, 1)[1]
    if keeps is not None:
        tflat = [t[k] for t, k in zip(tflat, keeps, strict=True)]
    e["post_tfs"] = yield from parts.put(*tflat)
    del tflat, keeps
    _page_out(idx.post, 1)
    # Keyword words: those some live row holds, renumbered in order; their grams likewise.
    n_words = kw.ptr.shape[0] - 1
    wkeep = None if every else alive[kw.flat]
    wptr_all = _kept_ptr(kw.ptr, wkeep)
    live_words = np.diff(wptr_all) > 0
    wremap = np.full(len(kw.words), -1, dtype=np.int32)
    wremap[:n_words][live_words] = np.arange(int(live_words.sum()), dtype=np.int32)
    every_word = n_words == len(kw.words) and bool(live_words.all())  # no word to drop or renumber
    e["words"] = kw.words if every_word else [w for w, ok in zip(kw.words, live_words.tolist(), strict=False) if ok]
    e["word_ptr"] = yield from parts.put(np.concatenate(([0], wptr_all[1:][live_words])).astype(np.int64))
    del wptr_all
    e["word_flat"] = yield from parts.put(kw.flat if wkeep is None else remap[kw.flat[wkeep]])
    del wkeep, remap
    page_out(kw.ptr)
    page_out(kw.flat)
    grams = kw.grams.unpacked() + list(kw.grams.base)
    gptr_all, gflat = _packed_csr(kw.grams, grams, 0)
    gkeep = None if every_word else np.concatenate([wremap[a] >= 0 for a in gflat])
    gptr_kept = _kept_ptr(gptr_all, gkeep)
    del gptr_all, gkeep
    live_grams = np.diff(gptr_kept) > 0
    e["grams"] = [g for g, ok in zip(grams, live_grams.tolist(), strict=True) if ok]
    del grams
    e["gram_ptr"] = yield from parts.put(np.concatenate(([0], gptr_kept[1:][live_grams])).astype(np.int64))
    del gptr_kept, live_grams
    e["gram_words"] = yield from parts.put(*(gflat if every_word else _renumbered(gflat, wremap)))
    del gflat
    _page_out(kw.grams, 0)
    return e


def encode(agents: dict[str, AgentIndex], rows_hash: str) -> Iterator[Piece]:
    """The sidecar's bytes, as parts written in order: the format-3 mark (64 bytes), every
    agent's arrays, the header (JSON: strings and where each array is), the header's length."""
    yield struct.pack("<Q", TRAILED).ljust(_ALIGN, b"\0")
    parts = _Parts(_ALIGN)
    entries = []
    for name in sorted(agents):
        if agents[name].slot_of:
            entries.append((yield from _agent_arrays(name, agents[name], parts)))
    head = orjson.dumps({"format": FORMAT, "rows_hash": rows_hash, "agents": entries})
    yield head
    yield struct.pack("<Q", len(head))


def write(blobs: SnapshotStore, name: str, agents: dict[str, AgentIndex], rows_hash: str) -> None:
    blobs.save_blob(name, encode(agents, rows_hash))


def _header(mv: memoryview) -> tuple[dict[str, Any], int, int]:
    """The header and the span of bytes its arrays may lie in: [base, end)."""
    (first,) = struct.unpack_from("<Q", mv, 0)
    if first == TRAILED:
        (head_len,) = struct.unpack_from("<Q", mv, mv.nbytes - 8)
        end = mv.nbytes - 8 - head_len
        if end < _ALIGN:
            raise ValueError("lexical sidecar header past its start")
        header = orjson.loads(bytes(mv[end : mv.nbytes - 8]))
        if header.get("format") != FORMAT:
            raise ValueError("lexical sidecar of another format")
        return header, 0, end
    header = orjson.loads(bytes(mv[8 : 8 + first]))
    if header.get("format") not in (1, 2):
        raise ValueError("lexical sidecar of another format")
    return header, 8 + first, mv.nbytes


def read(mv: memoryview, rows_hash: str, rows: dict[str, SnapshotRows]) -> dict[str, AgentIndex]:
    """The agents' indexes from a sidecar, their texts from the snapshot's ``rows``; raises
    ``ValueError`` (or ``KeyError``, ``TypeError``, ``IndexError``, ``struct.error``) when the
    sidecar is not the one of these rows, or is inconsistent."""
    header, base, end = _header(mv)
    fmt = header.get("format")
    if fmt not in READS or header.get("rows_hash") != rows_hash:
        raise ValueError("lexical sidecar is not this snapshot's")

    def arr(spec: list[int], dtype: Any, count: int | None = None) -> np.ndarray:
        at, nbytes = spec
        size = np.dtype(dtype).itemsize
        if count is None:
            count = nbytes // size
        if nbytes != count * size or at < 0 or base + at + nbytes > end:
            raise ValueError("lexical sidecar array of the wrong size")
        return np.frombuffer(mv, dtype=dtype, count=count, offset=base + at) if count else np.empty(0, dtype)

    def csr(ptr_spec: list[int], flat_spec: list[int], count: int) -> tuple[np.ndarray, np.ndarray]:
        """A CSR of ``count`` lists, checked: read-only views of the sidecar's buffer (its
        mapping lasts while they do; nothing writes to them, unpacking copies)."""
        ptr_arr = arr(ptr_spec, np.int64, count + 1)
        flat = arr(flat_spec, np.int32)
        if ptr_arr[0] != 0 or ptr_arr[-1] != flat.shape[0] or bool(np.any(np.diff(ptr_arr) < 0)):
            raise ValueError("lexical sidecar postings out of order")
        ptr_arr.flags.writeable = flat.flags.writeable = False
        return ptr_arr, flat

    agents: dict[str, AgentIndex] = {}
    for e in header["agents"]:
        idx = AgentIndex()
        n = e["n"]
        cap = max(16, n)
        for col, dtype in _COLUMNS:
            out = np.zeros(cap, dtype=dtype)
            out[:n] = arr(e["columns"][col], dtype, n)
            setattr(idx, col, out)
        if not idx.alive[:n].all():
            raise ValueError("lexical sidecar holds dead slots")
        idx.n, idx.dead, idx.total_len = n, 0, e["total_len"]
        idx.names = e["names"]
        idx.codes = {s: i for i, s in enumerate(idx.names)}
        width = max(1, len(idx.names))
        pairs, counts = np.unique(idx.proj[:n].astype(np.int64) * width + idx.chan[:n], return_counts=True)
        idx.buckets = Counter(
            {
                (idx.names[pc // width], idx.names[pc % width]): c
                for pc, c in zip(pairs.tolist(), counts.tolist(), strict=True)
            }
        )
        # Not interned: the dict and the packed postings share these strings; interning ~0.9M
        # terms was ~1 CPU s of a 1M restart, for the few thousand grams it would share.
        terms = e["terms"]
        df = arr(e["df"], np.int32, len(terms))
        pptr, pslots = csr(e["post_ptr"], e["post_slots"], len(terms))
        _, ptfs = csr(e["post_ptr"], e["post_tfs"], len(terms))
        if not np.array_equal(df, np.diff(pptr)) or (pslots.shape[0] and int(pslots.max()) >= n):
            raise ValueError("lexical sidecar postings do not match their counts")
        idx.df = dict(zip(terms, df.tolist(), strict=True))
        idx.post.pack(terms, pptr, (pslots, ptfs))
        kw = idx.kw
        kw.words = e["words"]
        kw.ids = dict(zip(kw.words, range(len(kw.words)), strict=True))
        kw.ptr, kw.flat = csr(e["word_ptr"], e["word_flat"], len(kw.words))
        if kw.flat.shape[0] and int(kw.flat.max()) >= n:
            raise ValueError("lexical sidecar keyword postings past the slots")
        gptr, gwords = csr(e["gram_ptr"], e["gram_words"], len(e["grams"]))
        if gwords.shape[0] and int(gwords.max()) >= len(kw.words):
            raise ValueError("lexical sidecar grams past the words")
        kw.grams.pack([intern(g) for g in e["grams"]], gptr, (gwords,))
        # Refs and texts: the snapshot's own rows (the logical content), one per slot.
        agent_rows = rows.get(e["agent"])
        if agent_rows is None or len(agent_rows) != n:
            raise ValueError("lexical sidecar rows do not match the snapshot")
        if fmt == 1:
            _rows_by_ref(idx, e["refs"], agent_rows)
        else:
            _rows_by_slot(idx, arr(e["row_of"], np.int32, n), agent_rows)
        agents[e["agent"]] = idx
    if set(agents) != set(rows):
        raise ValueError("lexical sidecar agents do not match the snapshot")
    return agents


def _rows_by_slot(idx: AgentIndex, row_of: np.ndarray, agent_rows: SnapshotRows) -> None:
    """Refs and texts of a format-2 or -3 sidecar: slot ``i`` holds row ``row_of[i]``."""
    n = idx.n
    if n and (int(row_of.min()) < 0 or int(row_of.max()) >= n or bool(np.any(np.bincount(row_of, minlength=n) != 1))):
        raise ValueError("lexical sidecar slots do not match the snapshot's rows")
    # Slot i holds row i unless slots were reused or compacted: then no reordering is needed.
    in_order = bool(np.array_equal(row_of, np.arange(n, dtype=row_of.dtype)))
    if not np.array_equal(agent_rows.seq if in_order else agent_rows.seq[row_of], idx.seq[:n]):
        raise ValueError("lexical sidecar row out of place")
    # Not interned (shared with the versions and memories read models, they cost ~1 CPU s per
    # million strings to look up: projections/records.py).
    if in_order:
        idx.refs, idx.texts = list(agent_rows.refs), list(agent_rows.texts)
    else:
        picked = row_of.tolist()
        idx.refs = list(map(agent_rows.refs.__getitem__, picked))
        idx.texts = list(map(agent_rows.texts.__getitem__, picked))
    idx.slot_of = dict(zip(idx.refs, range(n), strict=True))
    if len(idx.slot_of) != n:
        raise ValueError("lexical sidecar refs repeat")


def _rows_by_ref(idx: AgentIndex, refs: list[str], agent_rows: SnapshotRows) -> None:
    """Refs and texts of a format-1 sidecar, which names each slot's ref."""
    n = idx.n
    if len(refs) != n:
        raise ValueError("lexical sidecar slots do not match their refs")
    idx.refs = [intern(r) for r in refs]
    idx.slot_of = {ref: i for i, ref in enumerate(idx.refs)}
    if len(idx.slot_of) != n:
        raise ValueError("lexical sidecar refs repeat")
    texts: list[str | None] = [None] * n
    for ref, seq, text in zip(agent_rows.refs, agent_rows.seq.tolist(), agent_rows.texts, strict=True):
        slot = idx.slot_of[ref]
        if int(idx.seq[slot]) != seq:
            raise ValueError("lexical sidecar row out of place")
        texts[slot] = intern(text)  # the memories read model holds the same string (records.py)
    idx.texts = texts
