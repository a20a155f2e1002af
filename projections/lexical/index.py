"""One agent's lexical index: slots (one per indexed text version), BM25 postings, keyword words."""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from sys import intern
from typing import Any, Final

import numpy as np

from memstream.projections.lexical.packed import Postings
from memstream.projections.lexical.text import normalize, tokens_of_normalized
from memstream.projections.lexical.words import WordIndex
from memstream.projections.scope import ScopeFilter

# Compact an agent when its dead slots outnumber its live rows (and at least this many).
COMPACT_MIN_DEAD: Final = 4096
# Block size of the top-k pre-selection (``AgentIndex.top``).
BLOCK: Final = 64
# A row as ``add`` takes it: (ref, project, channel, seq, text).
Row = tuple[str, str, str, int, str]


def _grow(a: np.ndarray, cap: int) -> np.ndarray:
    out = np.zeros(cap, dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


class AgentIndex:
    """One agent's rows, BM25 postings and keyword words (docs/lexical.md: writes, compaction)."""

    REBUILD_MIN_WORDS = 1024  # compaction re-indexes from text past this many words, mostly dead

    def __init__(self) -> None:
        self.n = 0  # slots used
        self.seq = np.zeros(16, dtype=np.int64)
        self.dlen = np.zeros(16, dtype=np.float64)
        self.proj = np.zeros(16, dtype=np.int32)
        self.chan = np.zeros(16, dtype=np.int32)
        self.alive = np.zeros(16, dtype=bool)
        self.refs: list[str] = []
        self.texts: list[str | None] = []  # raw text of live slots (None once dead)
        self.slot_of: dict[str, int] = {}  # live ref -> slot
        self.codes: dict[str, int] = {}  # project/channel string -> code
        self.names: list[str] = []  # code -> string
        self.buckets: Counter[tuple[str, str]] = Counter()  # live rows per (project, channel)
        self.dead = 0
        self.total_len = 0
        self.post = Postings()  # term -> (ascending slots, term frequencies); a load leaves it packed
        self.df: dict[str, int] = {}  # term -> live rows holding it
        self.kw = WordIndex()
        self.dense: dict[str, np.ndarray] = {}  # common term -> per-slot tf (``pruning.dense_of``)
        self.peak: dict[str, tuple[int, int]] = {}  # a tabled term's (max tf, min row length)

    # -- writes -------------------------------------------------------------------------

    def _code(self, s: str) -> int:
        c = self.codes.get(s)
        if c is None:
            c = self.codes[s] = len(self.names)
            self.names.append(s)
        return c

    def add(self, ref: str, project: str, channel: str, seq: int, text: str) -> None:
        if ref in self.slot_of:
            self.remove(ref)
        slot = self.n
        if slot == self.seq.shape[0]:
            cap = slot * 2
            self.seq, self.dlen = _grow(self.seq, cap), _grow(self.dlen, cap)
            self.proj, self.chan, self.alive = _grow(self.proj, cap), _grow(self.chan, cap), _grow(self.alive, cap)
            self.dense = {t: _grow(a, cap) for t, a in self.dense.items()}
        norm = normalize(text)
        toks = tokens_of_normalized(norm)
        self.n = slot + 1
        self.seq[slot] = seq
        self.dlen[slot] = len(toks)
        self.proj[slot] = self._code(project)
        self.chan[slot] = self._code(channel)
        self.alive[slot] = True
        self.refs.append(ref)
        self.texts.append(text)
        self.slot_of[ref] = slot
        self.buckets[(project, channel)] += 1
        self.total_len += len(toks)
        post, df = self.post, self.df
        counts = Counter(toks)
        for t, c in counts.items():
            p = post.own(t)  # the dict's own get (the hot loop); a loaded term is unpacked below
            if p is None:
                p = post.unpack(t)
            if p is None:
                p = post[intern(t)] = (array("i"), array("i"))  # interned: the keyword grams share the string
                df[t] = 1
            else:
                df[t] += 1
            sa, ta = p
            sa.append(slot)
            ta.append(c)
        if self.dense:
            for t, c in counts.items():
                table = self.dense.get(t)
                if table is not None:
                    if c > np.iinfo(np.uint16).max:
                        del self.dense[t], self.peak[t]  # back to binary search for this term
                    else:
                        table[slot] = c
                        tf_max, dl_min = self.peak[t]
                        self.peak[t] = (max(tf_max, c), min(dl_min, len(toks)))
        self.kw.add(slot, dict.fromkeys(norm.split()))

    def add_many(self, rows: Sequence[Row]) -> None:
        """``add`` of each row in turn, with the same result (slots, postings, words, and every
        table's order), the postings merged per batch: a rebuild's or a load's rows are mostly
        new refs, whose postings are counted and sorted in numpy, one extend per distinct term
        instead of two appends per term and row (docs/benchmarks.md, "Rebuild at scale"). A
        row whose ref is live already (or repeated in the batch) is added alone at its place,
        and so is everything once a query made dense tables (``pruning.dense_of``)."""
        i, n = 0, len(rows)
        while i < n:
            if self.dense:
                for row in rows[i:]:
                    self.add(*row)
                return
            j, batch = i, set()
            while j < n and rows[j][0] not in self.slot_of and rows[j][0] not in batch:
                batch.add(rows[j][0])
                j += 1
            if j == i:
                self.add(*rows[i])
                i += 1
            else:
                self._add_fresh(rows[i:j])
                i = j

    def _add_fresh(self, rows: Sequence[Row]) -> None:
        """Rows of refs not live and distinct (``add_many``), in order."""
        m, slot0 = len(rows), self.n
        cap = self.seq.shape[0]
        while cap < slot0 + m:  # as ``add`` grows: doubled whenever full
            cap *= 2
        if cap != self.seq.shape[0]:
            self.seq, self.dlen = _grow(self.seq, cap), _grow(self.dlen, cap)
            self.proj, self.chan, self.alive = _grow(self.proj, cap), _grow(self.chan, cap), _grow(self.alive, cap)
        norms = [normalize(row[4]) for row in rows]
        toks_of = [tokens_of_normalized(norm) for norm in norms]
        lens = [len(toks) for toks in toks_of]
        end = slot0 + m
        self.seq[slot0:end] = [row[3] for row in rows]
        self.dlen[slot0:end] = lens
        code = self._code
        codes = [(code(row[1]), code(row[2])) for row in rows]  # in add's order: project, then channel
        self.proj[slot0:end] = [c[0] for c in codes]
        self.chan[slot0:end] = [c[1] for c in codes]
        self.alive[slot0:end] = True
        refs = [row[0] for row in rows]
        self.refs.extend(refs)
        self.texts.extend(row[4] for row in rows)
        self.slot_of.update(zip(refs, range(slot0, end), strict=True))
        self.buckets.update((row[1], row[2]) for row in rows)
        self.total_len += sum(lens)
        self.n = end
        # Each distinct term of the batch gets a local id in order of first sight, which is
        # the order ``add`` meets (and so inserts) new terms in; (term, slot) pairs sorted by
        # that id, then slot, are each term's postings in ascending slots.
        local: dict[str, int] = {}
        ids = [local.setdefault(t, len(local)) for toks in toks_of for t in toks]
        if ids:
            key = (np.array(ids, dtype=np.int64) << 32) | np.repeat(np.arange(slot0, end, dtype=np.int64), lens)
            pairs, tfs = np.unique(key, return_counts=True)
            slot_bytes = (pairs & 0xFFFFFFFF).astype(np.int32).tobytes()
            tf_bytes = tfs.astype(np.int32).tobytes()
            bounds = np.flatnonzero(np.diff(pairs >> 32)).tolist()  # each term's last pair, but the last term's
            post, df = self.post, self.df
            a = 0
            for t, b in zip(local, [*bounds, pairs.shape[0] - 1], strict=True):
                b += 1
                p = post.own(t)
                if p is None:
                    p = post.unpack(t)
                if p is None:
                    p = post[intern(t)] = (array("i"), array("i"))
                    df[t] = b - a
                else:
                    df[t] += b - a
                p[0].frombytes(slot_bytes[4 * a : 4 * b])
                p[1].frombytes(tf_bytes[4 * a : 4 * b])
                a = b
        kw = self.kw
        for slot, norm in enumerate(norms, slot0):
            kw.add(slot, dict.fromkeys(norm.split()))

    def remove(self, ref: str) -> None:
        slot = self.slot_of.pop(ref, None)
        if slot is None:
            return
        text = self.texts[slot]
        assert text is not None
        self.texts[slot] = None
        self.alive[slot] = False
        self.dead += 1
        key = (self.names[self.proj[slot]], self.names[self.chan[slot]])
        self.buckets[key] -= 1
        if not self.buckets[key]:
            del self.buckets[key]
        self.total_len -= int(self.dlen[slot])
        norm = normalize(text)
        for t in set(tokens_of_normalized(norm)):
            left = self.df[t] - 1
            if left:
                self.df[t] = left
            else:  # every posting of t is dead now: free them
                del self.df[t]
                del self.post[t]
                self.dense.pop(t, None)
                self.peak.pop(t, None)
        if self.dead >= COMPACT_MIN_DEAD and self.dead > len(self.slot_of):
            self.compact()

    def remove_many(self, refs: Iterable[str]) -> None:
        """Remove several rows at once (a deletion or erasure of many). Past half the live
        rows, the rest are re-indexed from their text instead (``rebuild``): each ``remove``
        re-tokenises the text it drops, so erasing an agent's 100k rows one by one spent
        seconds tokenising them again and compacting on the way."""
        gone = [ref for ref in dict.fromkeys(refs) if ref in self.slot_of]
        if 2 * len(gone) <= len(self.slot_of):
            for ref in gone:
                self.remove(ref)
            return
        for ref in gone:
            slot = self.slot_of.pop(ref)
            self.texts[slot] = None
            self.alive[slot] = False
        self.rebuild()

    def live_rows(self) -> list[tuple[str, str, str, int, str]]:
        """(ref, project, channel, seq, text) of every live row, oldest creation first."""
        rows = []
        for ref, slot in self.slot_of.items():
            text = self.texts[slot]
            assert text is not None
            rows.append((ref, self.names[self.proj[slot]], self.names[self.chan[slot]], int(self.seq[slot]), text))
        rows.sort(key=lambda r: r[3])
        return rows

    def snapshot_rows(self) -> list[list[Any]]:
        """``live_rows`` as a snapshot holds them (lists), in the same order."""
        rows: list[list[Any]] = []
        for part in self.snapshot_row_parts(1 << 16):
            rows.extend(part)
        return rows

    def live_slots(self) -> np.ndarray:
        """The live rows' slots in creation order (ties in ``slot_of``'s order, as ``live_rows``),
        ordered in numpy: no tuple and sort key per row."""
        slots = np.fromiter(self.slot_of.values(), dtype=np.int64, count=len(self.slot_of))
        return slots[np.argsort(self.seq[slots], kind="stable")]

    def snapshot_row_parts(self, size: int) -> Iterator[list[list[Any]]]:
        """``snapshot_rows`` ``size`` at a time, so a part at a time the rows can be hashed
        without being held (docs/benchmarks.md, "The lexical checkpoint's peak (wave 10)")."""
        slots = self.live_slots()
        refs, names, texts = self.refs, self.names, self.texts  # a live slot's ref: its slot_of key
        for a in range(0, slots.shape[0], size):
            part = slots[a : a + size]
            yield [
                [refs[s], names[p], names[c], q, texts[s]]
                for s, p, c, q in zip(
                    part.tolist(),
                    self.proj[part].tolist(),
                    self.chan[part].tolist(),
                    self.seq[part].tolist(),
                    strict=True,
                )
            ]

    def rebuild(self) -> None:
        """Re-index the live rows from their text (dead slots, postings and words all go)."""
        rows = self.live_rows()
        self.__init__()  # type: ignore[misc]
        self.add_many(rows)

    def compact(self) -> None:
        """Drop dead slots and renumber the live ones, in numpy (no text is re-tokenised).

        Words that no live row holds any more stay in the keyword vocabulary; when they are
        the majority, the agent is re-indexed from its text instead (``rebuild``)."""
        n = self.n
        live = np.flatnonzero(self.alive[:n])
        m = live.shape[0]
        kw = self.kw
        if kw.dw:
            kw.merge()
        n_words = len(kw.words)
        word_of = np.repeat(np.arange(n_words), np.diff(kw.ptr)[:n_words])
        keep = self.alive[kw.flat]
        per_word = np.bincount(word_of[keep], minlength=n_words)
        if n_words > self.REBUILD_MIN_WORDS and 2 * int(np.count_nonzero(per_word)) < n_words:
            self.rebuild()
            return
        self.dense, self.peak = {}, {}  # slots are renumbered: the tables are made again when asked
        remap = np.full(n, -1, dtype=np.int32)
        remap[live] = np.arange(m, dtype=np.int32)
        cap = max(16, m)
        for name in ("seq", "dlen", "proj", "chan", "alive"):
            col = getattr(self, name)
            out = np.zeros(cap, dtype=col.dtype)
            out[:m] = col[live]
            setattr(self, name, out)
        keep_slots = live.tolist()
        self.refs = [self.refs[i] for i in keep_slots]
        self.texts = [self.texts[i] for i in keep_slots]
        self.slot_of = {ref: i for i, ref in enumerate(self.refs)}
        self.n, self.dead = m, 0
        alive = np.zeros(n, dtype=bool)
        alive[live] = True
        self.post.unpack_all()
        for t, (sa, ta) in self.post.items():
            slots = np.frombuffer(sa, dtype=np.int32)
            keep_t = alive[slots]
            fresh_s, fresh_t = array("i"), array("i")
            fresh_s.frombytes(remap[slots[keep_t]].tobytes())  # copies: no view of ``sa`` survives
            fresh_t.frombytes(np.frombuffer(ta, dtype=np.int32)[keep_t].tobytes())
            del slots
            self.post[t] = (fresh_s, fresh_t)
        kw.flat = remap[kw.flat[keep]]
        ptr = np.zeros(n_words + 1, dtype=np.int64)
        np.cumsum(per_word, out=ptr[1:])
        kw.ptr = ptr

    # -- reads --------------------------------------------------------------------------

    def valid(self, scope: ScopeFilter, size: int) -> np.ndarray:
        """Alive and admitted by the scope, per slot (``size`` >= n; the padding is False)."""
        ok = np.zeros(size, dtype=bool)
        n = self.n
        ok[:n] = self.alive[:n]
        if scope.project_id is not None:
            p = self.proj[:n]
            ok[:n] &= (p == self.codes.get(scope.project_id, -1)) | (p == self.codes.get("", -1))
        if scope.channel:
            c = self.chan[:n]
            ok[:n] &= (c == self.codes.get(scope.channel, -1)) | (c == self.codes.get("", -1))
        return ok

    def valid_at(self, scope: ScopeFilter, slots: np.ndarray) -> np.ndarray:
        """``valid`` at the given slots only."""
        ok = self.alive[slots]
        if scope.project_id is not None:
            p = self.proj[slots]
            ok &= (p == self.codes.get(scope.project_id, -1)) | (p == self.codes.get("", -1))
        if scope.channel:
            c = self.chan[slots]
            ok &= (c == self.codes.get(scope.channel, -1)) | (c == self.codes.get("", -1))
        return ok

    def top(self, key: np.ndarray, k: int) -> np.ndarray:
        """Slots of the ``k`` largest positive ``key`` entries, best first, ties newest first.

        ``key`` is padded to a multiple of ``BLOCK``. The k-th largest block maximum is a lower
        bound of the k-th largest entry, so the entries at or above it are few and hold the
        whole answer (every tie included): the exact ordering runs on them only.
        """
        if key.shape[0] > 4 * BLOCK:
            maxima = key.reshape(-1, BLOCK).max(axis=1)
            floor = np.partition(maxima, maxima.shape[0] - k)[maxima.shape[0] - k] if maxima.shape[0] > k else 0
            cand = np.flatnonzero(key >= floor) if floor > 0 else np.flatnonzero(key > 0)
        else:
            cand = np.flatnonzero(key > 0)
        vals = key[cand]
        order = np.lexsort((-self.seq[cand], -vals))[:k]
        return cand[order]

    def count(self, scope: ScopeFilter) -> int:
        return sum(n for (p, c), n in self.buckets.items() if scope.admits(p, c))
