"""The lexical snapshot's sidecar: each agent's analysed index (slots, postings, keyword words) as
binary arrays, so a restart reads the index instead of re-analysing every text."""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Sequence
from operator import itemgetter
from sys import intern
from typing import Any, Final

import numpy as np
import orjson

from memstream.projections.lexical.index import AgentIndex
from memstream.projections.lexical.packed import Packed
from memstream.streams.snapshots import SnapshotStore

# 2: no refs in the header (the snapshot's rows give them, through ``row_of``); postings and
# grams stay packed after a load (``packed.py``). 1 still loads.
FORMAT: Final = 2
READS: Final = frozenset({1, 2})

# The per-slot columns, with the dtype each is stored in.
_COLUMNS: Final = (("seq", np.int64), ("dlen", np.float64), ("proj", np.int32), ("chan", np.int32), ("alive", np.bool_))


class _Parts:
    """Arrays laid out one after another, each 64-byte aligned; the header names them [offset, bytes]."""

    def __init__(self) -> None:
        self.parts: list[Any] = []
        self.pos = 0

    def put(self, data: Any) -> list[int]:
        view = memoryview(data).cast("B")
        at, nbytes = self.pos, view.nbytes
        if nbytes:
            self.parts.append(view)
        pad = (-nbytes) % 64
        if pad:
            self.parts.append(b"\0" * pad)
        self.pos += nbytes + pad
        return [at, nbytes]


def _flat(lists: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Several int32 arrays as one CSR: (prefix sums of their lengths, their concatenation)."""
    ptr = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(np.fromiter((len(a) for a in lists), dtype=np.int64, count=len(lists)), out=ptr[1:])
    return ptr, np.frombuffer(b"".join(lists), dtype=np.int32)


def _packed_csr(table: Packed[Any], col: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """A packed mapping's keys and one column as a CSR, its base copied in bulk (never unpacked)."""
    keys = table.unpacked()
    ptr, flat = _flat([table.buffers(k)[col] for k in keys])
    if not table.base:
        return keys, ptr, flat
    rows = np.fromiter(table.base.values(), dtype=np.int64, count=len(table.base))
    starts, ends = table.ptr[rows], table.ptr[rows + 1]
    lens = ends - starts
    at = np.repeat(starts - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()))
    base_ptr = np.cumsum(lens) + ptr[-1]
    return keys + list(table.base), np.concatenate((ptr, base_ptr)), np.concatenate((flat, table.cols[col][at]))


def _keep(ptr: np.ndarray, flat: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The prefix sums of a CSR once only the ``keep`` entries of ``flat`` stay."""
    owner = np.repeat(np.arange(ptr.shape[0] - 1), np.diff(ptr))
    out = np.zeros(ptr.shape[0], dtype=np.int64)
    np.cumsum(np.bincount(owner[keep], minlength=ptr.shape[0] - 1), out=out[1:])
    return out


def _agent_entry(name: str, idx: AgentIndex, parts: _Parts) -> dict[str, Any]:
    """One agent's index without its dead slots, and without the keyword words and grams only
    dead slots held: what the sidecar keeps is what the live rows say (an erased or deleted
    text leaves nothing in it), renumbered in slot order so recency ties break the same."""
    kw = idx.kw
    if len(kw.dw):
        kw.merge()  # the pending keyword postings join the CSR; the answers do not change
    n = idx.n
    alive = idx.alive[:n]
    live = np.flatnonzero(alive)
    remap = np.full(n, -1, dtype=np.int32)
    remap[live] = np.arange(live.shape[0], dtype=np.int32)
    # BM25 postings: every term is held by a live row (``remove`` drops the others).
    terms, sptr, sflat = _packed_csr(idx.post, 0)
    _, _, tflat = _packed_csr(idx.post, 1)
    keep = alive[sflat]
    pptr = _keep(sptr, sflat, keep)
    # Keyword words: those some live row holds, renumbered in order; their grams likewise.
    n_words = kw.ptr.shape[0] - 1
    wkeep = alive[kw.flat]
    wptr_all = _keep(kw.ptr, kw.flat, wkeep)
    live_words = np.diff(wptr_all) > 0
    wremap = np.full(len(kw.words), -1, dtype=np.int32)
    wremap[:n_words][live_words] = np.arange(int(live_words.sum()), dtype=np.int32)
    words = [w for w, ok in zip(kw.words, live_words.tolist(), strict=False) if ok]
    wptr = np.concatenate(([0], wptr_all[1:][live_words])).astype(np.int64)
    grams, gptr_all, gflat = _packed_csr(kw.grams, 0)
    gkeep = wremap[gflat] >= 0
    gptr_kept = _keep(gptr_all, gflat, gkeep)
    live_grams = np.diff(gptr_kept) > 0
    return {
        "agent": name,
        "n": int(live.shape[0]),
        "total_len": idx.total_len,
        # Each slot's row in the snapshot's list (sorted by seq, ties in slot order: live_rows).
        "row_of": parts.put(np.argsort(np.argsort(idx.seq[live], kind="stable"), kind="stable").astype(np.int32)),
        "names": idx.names,
        "columns": {col: parts.put(np.ascontiguousarray(getattr(idx, col)[live])) for col, _ in _COLUMNS},
        "terms": terms,
        "df": parts.put(np.fromiter((idx.df[t] for t in terms), dtype=np.int32, count=len(terms))),
        "post_ptr": parts.put(pptr),
        "post_slots": parts.put(remap[sflat[keep]]),
        "post_tfs": parts.put(tflat[keep]),
        "words": words,
        "word_ptr": parts.put(wptr),
        "word_flat": parts.put(remap[kw.flat[wkeep]]),
        "grams": [g for g, ok in zip(grams, live_grams.tolist(), strict=True) if ok],
        "gram_ptr": parts.put(np.concatenate(([0], gptr_kept[1:][live_grams])).astype(np.int64)),
        "gram_words": parts.put(wremap[gflat[gkeep]]),
    }


def layout(agents: dict[str, AgentIndex], rows_hash: str) -> tuple[dict[str, Any], list[Any]]:
    """The header (JSON: strings and where each array is) and the arrays, for every agent."""
    parts = _Parts()
    entries = [_agent_entry(name, agents[name], parts) for name in sorted(agents) if agents[name].slot_of]
    return {"format": FORMAT, "rows_hash": rows_hash, "agents": entries}, parts.parts


def encode(agents: dict[str, AgentIndex], rows_hash: str) -> list[Any]:
    """The sidecar's bytes, as parts written in order: header length, header, arrays."""
    header, parts = layout(agents, rows_hash)
    head = orjson.dumps(header)
    head_len = len(head) + (-(len(head) + 8) % 64)
    return [struct.pack("<Q", head_len), head.ljust(head_len, b" "), *parts]


def write(blobs: SnapshotStore, name: str, agents: dict[str, AgentIndex], rows_hash: str) -> None:
    blobs.save_blob(name, encode(agents, rows_hash))


def read(mv: memoryview, rows_hash: str, rows: dict[str, list[list[Any]]]) -> dict[str, AgentIndex]:
    """The agents' indexes from a sidecar, their texts from the snapshot's ``rows``; raises
    ``ValueError`` (or ``KeyError``, ``TypeError``, ``IndexError``, ``struct.error``) when the
    sidecar is not the one of these rows, or is inconsistent."""
    (head_len,) = struct.unpack_from("<Q", mv, 0)
    header = orjson.loads(bytes(mv[8 : 8 + head_len]))
    fmt = header.get("format")
    if fmt not in READS or header.get("rows_hash") != rows_hash:
        raise ValueError("lexical sidecar is not this snapshot's")
    base = 8 + head_len

    def arr(spec: list[int], dtype: Any, count: int | None = None) -> np.ndarray:
        at, nbytes = spec
        size = np.dtype(dtype).itemsize
        if count is None:
            count = nbytes // size
        if nbytes != count * size or base + at + nbytes > mv.nbytes:
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
        agent_rows = rows.get(e["agent"], [])
        if len(agent_rows) != n:
            raise ValueError("lexical sidecar rows do not match the snapshot")
        if fmt == 1:
            _rows_by_ref(idx, e["refs"], agent_rows)
        else:
            _rows_by_slot(idx, arr(e["row_of"], np.int32, n), agent_rows)
        agents[e["agent"]] = idx
    if set(agents) != set(rows):
        raise ValueError("lexical sidecar agents do not match the snapshot")
    return agents


_REF, _SEQ, _TEXT = itemgetter(0), itemgetter(3), itemgetter(4)  # of a snapshot row


def _rows_by_slot(idx: AgentIndex, row_of: np.ndarray, agent_rows: list[list[Any]]) -> None:
    """Refs and texts of a format-2 sidecar: slot ``i`` holds row ``row_of[i]``."""
    n = idx.n
    if n and (int(row_of.min()) < 0 or int(row_of.max()) >= n or bool(np.any(np.bincount(row_of, minlength=n) != 1))):
        raise ValueError("lexical sidecar slots do not match the snapshot's rows")
    # Slot i holds row i unless slots were reused or compacted: then no reordering is needed.
    in_order = bool(np.array_equal(row_of, np.arange(n, dtype=row_of.dtype)))
    picked = agent_rows if in_order else list(map(agent_rows.__getitem__, row_of.tolist()))
    if not np.array_equal(np.fromiter(map(_SEQ, picked), dtype=np.int64, count=n), idx.seq[:n]):
        raise ValueError("lexical sidecar row out of place")
    # Not interned (shared with the versions and memories read models, they cost ~1 CPU s per
    # million strings to look up: projections/records.py).
    idx.refs = list(map(_REF, picked))
    idx.texts = list(map(_TEXT, picked))
    idx.slot_of = dict(zip(idx.refs, range(n), strict=True))
    if len(idx.slot_of) != n:
        raise ValueError("lexical sidecar refs repeat")


def _rows_by_ref(idx: AgentIndex, refs: list[str], agent_rows: list[list[Any]]) -> None:
    """Refs and texts of a format-1 sidecar, which names each slot's ref."""
    n = idx.n
    if len(refs) != n:
        raise ValueError("lexical sidecar slots do not match their refs")
    idx.refs = [intern(r) for r in refs]
    idx.slot_of = {ref: i for i, ref in enumerate(idx.refs)}
    if len(idx.slot_of) != n:
        raise ValueError("lexical sidecar refs repeat")
    texts: list[str | None] = [None] * n
    for ref, _, _, seq, text in agent_rows:
        slot = idx.slot_of[ref]
        if int(idx.seq[slot]) != seq:
            raise ValueError("lexical sidecar row out of place")
        texts[slot] = intern(text)  # the memories read model holds the same string (records.py)
    idx.texts = texts
