"""The lexical projection: BM25 over memories and episodes, plus CPersona's keyword channel.

A fold of ``memory.stored/updated/deleted``, ``episode.archived/deleted`` and
``agent_data.deleted`` into one in-memory inverted index per agent (every read names its agent,
so an agent's index is all a query touches). Why this engine and not tantivy, SQLite FTS5 or
bm25s, with figures: ``docs/lexical.md``.

Layout of one agent's index:

- *slots*: one per indexed text version. A store appends a slot; an update kills the old slot and
  appends a new one; a delete kills a slot. Per-slot columns (numpy, grown by doubling) hold the
  token count, the creation offset (``seq``: the recency order), the project and channel codes
  and an alive flag; dead slots stay in postings until a compaction renumbers the agent.
- *BM25 postings*: term -> two ``array('i')``, ascending slots and their term frequencies,
  appended in C on every add and read in place by numpy at query time. ``df``, the live row
  count and the live token total are kept exactly, so scores are those of the live rows alone,
  whatever dead slots linger.
- *keyword words*: every distinct whitespace-separated word of the normalised text, with an
  ``array('i')`` of slots, and all words joined in one string; a query term is found by
  ``str`` search over that string (the distinct words, ~1 MB at 100k rows), never over the rows.

Determinism (H2): the snapshot is the logical content only -- per agent, each live row's ref,
project, channel, creation offset and raw text, in offset order -- so equal states give equal
snapshots however they were reached (slot numbering, dead slots and compactions are invisible).
Answers are a function of that content too: scores use live statistics, a row's score is summed
term by term in query order, and ties break by recency (``seq``), never by slot.

Not thread-safe: fold and read from one thread (the API folds just before each read).
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable
from sys import intern
from typing import Any, Final, NamedTuple

import numpy as np

from memstream.projections.lexical_text import is_cjk, keyword_terms, normalize, query_tokens, tokens_of_normalized
from memstream.projections.scope import ScopeFilter

K1: Final = 1.2
B: Final = 0.75
SNAPSHOT_VERSION: Final = 2  # 2: English stemming of BM25 tokens
# Compact an agent when its dead slots outnumber its live rows (and at least this many).
COMPACT_MIN_DEAD: Final = 4096
# Block size of the top-k pre-selection (``_AgentIndex._top``).
BLOCK: Final = 64

_NO_IDS: Final = np.zeros(0, dtype=np.int64)
# MaxScore pruning of BM25 (``_AgentIndex._pruned_top``) once a query's postings exceed this many.
PRUNE_MIN_POSTINGS: Final = 200_000
# Its first guess of the essential terms: the rarest ones, holding at most this many postings.
PRUNE_FIRST_CANDIDATES: Final = 2_048
# It gives up (scores everything) when the essential terms hold more postings than this.
PRUNE_MAX_CANDIDATES: Final = 32_768
# A term held by at least 1/DENSE_FRACTION of an agent's slots (once it has DENSE_MIN_ROWS)
# also gets a per-slot tf table, so pruning reads it at the candidates without a search.
DENSE_FRACTION: Final = 32
DENSE_MIN_ROWS: Final = 50_000
DENSE_MAX_TERMS: Final = 64


class _Term(NamedTuple):
    """One query token that some row holds: its postings (views) and its idf."""

    name: str
    slots: np.ndarray  # ascending
    tf: np.ndarray
    idf: float
    dense: np.ndarray | None  # per-slot tf, for a common term (``_AgentIndex._dense_of``)


def _below(bound: float, kth: float) -> bool:
    """``bound < kth`` with room for the rounding of a float sum of up to a few dozen terms."""
    return bound * (1.0 + 1e-9) < kth


def _idf(n_live: int, df: int) -> float:
    """Lucene's BM25 idf: positive for any df up to the row count."""
    return math.log(1.0 + (n_live - df + 0.5) / (df + 0.5))


def _held_share(held: list[np.ndarray], idfs: list[float], slots: np.ndarray) -> np.ndarray:
    """Per slot of ``slots``, the summed ``idfs`` of the terms whose ascending slot arrays
    (``held``) contain it, over the sum of all ``idfs``: a binary search per term, no pass over
    the postings. Postings hold each slot at most once per term, in ascending order: slots are
    appended in order and compaction renumbers them monotonically."""
    out = np.zeros(slots.shape[0], dtype=np.float64)
    total = sum(idfs)
    if total <= 0 or not slots.shape[0]:
        return out
    for s, idf in zip(held, idfs, strict=True):
        pos = np.minimum(np.searchsorted(s, slots), s.shape[0] - 1)
        out += idf * (s[pos] == slots)
    return out / total


def _grow(a: np.ndarray, cap: int) -> np.ndarray:
    out = np.zeros(cap, dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


class _AgentIndex:
    """One agent's rows, BM25 postings and keyword words (see the module docstring)."""

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
        self.post: dict[str, tuple[array, array]] = {}  # term -> (ascending slots, term frequencies)
        self.df: dict[str, int] = {}  # term -> live rows holding it
        self.kw = _WordIndex()
        self.dense: dict[str, np.ndarray] = {}  # common term -> per-slot tf (``_dense_of``)
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
            p = post.get(t)
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

    def live_rows(self) -> list[tuple[str, str, str, int, str]]:
        """(ref, project, channel, seq, text) of every live row, oldest creation first."""
        rows = []
        for ref, slot in self.slot_of.items():
            text = self.texts[slot]
            assert text is not None
            rows.append((ref, self.names[self.proj[slot]], self.names[self.chan[slot]], int(self.seq[slot]), text))
        rows.sort(key=lambda r: r[3])
        return rows

    def rebuild(self) -> None:
        """Re-index the live rows from their text (dead slots, postings and words all go)."""
        rows = self.live_rows()
        self.__init__()  # type: ignore[misc]
        for row in rows:
            self.add(*row)

    def compact(self) -> None:
        """Drop dead slots and renumber the live ones, in numpy (no text is re-tokenised).

        Words that no live row holds any more stay in the keyword vocabulary; when they are
        the majority, the agent is re-indexed from its text instead (``rebuild``)."""
        n = self.n
        live = np.flatnonzero(self.alive[:n])
        m = live.shape[0]
        kw = self.kw
        if kw.dw:
            kw._merge()
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

    def _valid(self, scope: ScopeFilter, size: int) -> np.ndarray:
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

    def _valid_at(self, scope: ScopeFilter, slots: np.ndarray) -> np.ndarray:
        """``_valid`` at the given slots only."""
        ok = self.alive[slots]
        if scope.project_id is not None:
            p = self.proj[slots]
            ok &= (p == self.codes.get(scope.project_id, -1)) | (p == self.codes.get("", -1))
        if scope.channel:
            c = self.chan[slots]
            ok &= (c == self.codes.get(scope.channel, -1)) | (c == self.codes.get("", -1))
        return ok

    def _top(self, key: np.ndarray, k: int) -> np.ndarray:
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

    def bm25(self, scope: ScopeFilter, qtoks: list[str], k: int) -> list[tuple[str, float, float]]:
        """``[(ref, score, share)]`` best first. ``share``: the row's share of the query's IDF mass,
        the summed idf of the distinct query tokens it holds over that of every query token some
        live row holds (a token no row holds is evidence for no row, so it does not count).
        Unlike the score it ignores term frequency and row length, so a long memory holding the
        query's one rare term has as large a share as a short one.

        Exact top-k with MaxScore pruning (``_pruned_top``) when the query's postings are long:
        the answer, scores included to the last bit, is the exhaustive one."""
        n_live = len(self.slot_of)
        if not n_live or not self.total_len:
            return []
        terms: list[_Term] = []
        for t in qtoks:
            d = self.df.get(t)
            if d:
                sa, ta = self.post[t]
                # Views into the array('i'): none outlives this call (an append may resize them).
                slots, tf = np.frombuffer(sa, dtype=np.int32), np.frombuffer(ta, dtype=np.int32)
                terms.append(_Term(t, slots, tf, _idf(n_live, d), None))
        if not terms:
            return []
        slope = K1 * B / (self.total_len / n_live)
        found = None
        if sum(t.slots.shape[0] for t in terms) > PRUNE_MIN_POSTINGS:
            terms = [t._replace(dense=self._dense_of(t.name, t.slots, t.tf)) for t in terms]
            found = self._pruned_top(scope, terms, k, slope)
        if found is None:
            top, values = self._exhaustive_top(scope, terms, k, slope)
        else:
            top, values = found
        shares = _held_share([t.slots for t in terms], [t.idf for t in terms], top)
        return [(self.refs[i], v, sh) for i, v, sh in zip(top.tolist(), values.tolist(), shares.tolist(), strict=True)]

    def _contribution(self, slots: np.ndarray, tf: np.ndarray, idf: float, slope: float) -> np.ndarray:
        """idf * (k1 + 1) * tf / (tf + k1 * (1 - b + b * dl / avgdl)) per slot, in place. Both
        top-k paths compute every term's contribution here, with the same operations in the
        same order, so their scores are equal to the last bit."""
        tf64 = tf.astype(np.float64)
        den = self.dlen[slots]
        den *= slope
        den += K1 * (1.0 - B)
        den += tf64
        np.divide(tf64, den, out=den)
        den *= idf * (K1 + 1.0)
        return den

    def _exhaustive_top(
        self, scope: ScopeFilter, terms: list[_Term], k: int, slope: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Score every slot any query term holds: (top slots, their scores)."""
        contribs = [self._contribution(t.slots, t.tf, t.idf, slope) for t in terms]
        # bincount adds in input order, so each row's score is summed term by term in query order.
        size = -(-self.n // BLOCK) * BLOCK
        scores = np.bincount(np.concatenate([t.slots for t in terms]), weights=np.concatenate(contribs), minlength=size)
        scores *= self._valid(scope, size)
        top = self._top(scores, k)
        return top, scores[top]

    def _pruned_top(
        self, scope: ScopeFilter, terms: list[_Term], k: int, slope: float
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """MaxScore (Turtle & Flood): the exact top-k while scoring only the rows that hold one
        of the query's rarer terms, or None when that cannot be shown (then score everything).

        Each term adds at most ``_bound`` to a row's score. Split the terms, rarest first, into
        the *essential* ones and the rest: a row holding none of the essential terms scores at
        most the sum of the rest's bounds. Once ``k`` rows holding an essential term score above
        that sum, no other row can enter the top ``k``, so only those candidates are scored
        (each by every term, summed in query order as the exhaustive path sums). A first pass
        with the rarest terms gives a k-th score; the second, if needed, takes as many terms as
        that score requires, and succeeds by construction (more candidates, higher k-th score).

        Measured on the 1M-row recall benchmark corpus (docs/recall-latency.md): BM25's p50
        halves; long queries of mid-frequency words (many terms with large bounds) still fall
        back to scoring everything, so the tail does not move. Below ``PRUNE_MIN_POSTINGS`` the
        exhaustive pass is already cheap and is what runs."""
        if len(terms) < 2:
            return None
        order = sorted(range(len(terms)), key=lambda i: terms[i].slots.shape[0])
        bounds = [self._bound(terms[i], slope) for i in order]
        # rest[j]: the bound on what terms order[j:] can add to a row holding none of order[:j]
        rest = [0.0] * (len(order) + 1)
        for j in range(len(order) - 1, -1, -1):
            rest[j] = rest[j + 1] + bounds[j]
        # First guess: the rarest terms, up to a modest candidate count.
        essential, held = 0, 0
        while essential < len(order) - 1 and (
            essential == 0 or held + terms[order[essential]].slots.shape[0] <= PRUNE_FIRST_CANDIDATES
        ):
            held += terms[order[essential]].slots.shape[0]
            essential += 1
        for _ in range(2):
            cand, values = self._score_candidates(scope, terms, [order[j] for j in range(essential)], slope)
            positive = np.flatnonzero(values > 0)
            if positive.shape[0] < k:
                return None
            kth = float(np.partition(values[positive], positive.shape[0] - k)[positive.shape[0] - k])
            if _below(rest[essential], kth):
                top = positive[np.lexsort((-self.seq[cand[positive]], -values[positive]))[:k]]
                return cand[top], values[top]
            # The k-th best only grows as candidates are added: with this many essential terms
            # the condition holds at the next pass by construction.
            essential = next(j for j in range(len(order) + 1) if _below(rest[j], kth))
            if essential >= len(order) or sum(terms[order[j]].slots.shape[0] for j in range(essential)) > (
                PRUNE_MAX_CANDIDATES
            ):
                return None  # about as costly as scoring everything
        return None

    def _bound(self, t: _Term, slope: float) -> float:
        """Above the most ``t`` adds to any row's score: its contribution grows with tf and
        shrinks with row length, so it is at most that of (max tf, min row length) over its
        postings (dead ones included, which only loosens it). Kept for a tabled term; read off
        the postings for another (a pass over at most 1/DENSE_FRACTION of the slots)."""
        peak = self.peak.get(t.name) if t.dense is not None else None
        tf_max, dl_min = peak if peak is not None else (int(t.tf.max()), int(self.dlen[t.slots].min()))
        return t.idf * (K1 + 1.0) * tf_max / (tf_max + K1 * (1.0 - B) + slope * dl_min)

    def _score_candidates(
        self, scope: ScopeFilter, terms: list[_Term], essential: list[int], slope: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """(ascending candidate slots, their scores with invalid rows at 0): the candidates are
        the slots of the ``essential`` terms; every term's contribution to them is summed in
        query order. A common term is read at the candidates from its per-slot table (one
        gather per candidate); another term by binary search of the candidates in its postings."""
        chosen = set(essential)
        cand = np.concatenate([terms[i].slots for i in essential])
        cand.sort()
        if cand.shape[0] > 1:
            cand = cand[np.concatenate(([True], cand[1:] != cand[:-1]))]
        at, weights = [], []
        for i, t in enumerate(terms):
            if i in chosen:
                pos = np.searchsorted(cand, t.slots)
                slots, tf = t.slots, t.tf
            elif t.dense is not None:
                tf_at = t.dense[cand]
                pos = np.flatnonzero(tf_at)
                slots, tf = cand[pos], tf_at[pos]
            else:
                where = np.minimum(np.searchsorted(t.slots, cand), t.slots.shape[0] - 1)
                hit = t.slots[where] == cand
                pos = np.flatnonzero(hit)
                slots, tf = cand[hit], t.tf[where[hit]]
            at.append(pos)
            weights.append(self._contribution(slots, tf, t.idf, slope))
        values = np.bincount(np.concatenate(at), weights=np.concatenate(weights), minlength=cand.shape[0])
        values *= self._valid_at(scope, cand)
        return cand, values

    def _dense_of(self, term: str, slots: np.ndarray, tf: np.ndarray) -> np.ndarray | None:
        """The term's per-slot term frequencies (0 where absent), kept up to date by ``add``
        once made; made here for a term that many rows hold, in a large agent, and at most
        ``DENSE_MAX_TERMS`` per agent (~2 bytes per slot each)."""
        table = self.dense.get(term)
        if table is not None:
            return table
        if self.n < DENSE_MIN_ROWS or slots.shape[0] * DENSE_FRACTION < self.n or len(self.dense) >= DENSE_MAX_TERMS:
            return None
        if int(tf.max()) > np.iinfo(np.uint16).max:
            return None
        table = np.zeros(self.seq.shape[0], dtype=np.uint16)
        table[slots] = tf
        self.dense[term] = table
        self.peak[term] = (int(tf.max()), int(self.dlen[slots].min()))
        return table

    def keyword(self, scope: ScopeFilter, terms: list[str], k: int) -> list[tuple[str, float, float]]:
        """``[(ref, matched term count, share)]``: ``share`` is the summed idf (from each term's
        row count) of the terms the row holds over that of every term some row holds, the
        keyword channel's counterpart of the BM25 share (``bm25``)."""
        n_live = len(self.slot_of)
        if not n_live:
            return []
        size = -(-self.n // BLOCK) * BLOCK
        alive = self.alive[: self.n]
        hits: list[tuple[np.ndarray, int]] = []
        for term in terms:
            slots = self.kw.slots(self.kw.holding(term))
            if not slots.shape[0]:
                continue
            m = np.zeros(size, dtype=bool)
            m[slots] = True
            m[: self.n] &= alive
            df = int(np.count_nonzero(m))
            if df:
                hits.append((m, df))
        if not hits:
            return []
        # A term most rows hold says nothing about which row is meant; like FTS5's bm25, which
        # weighs such a phrase ~0 (CPersona's keyword arm then ranks without it), it does not
        # count, unless every term is that common.
        telling = [m for m, df in hits if 2 * df <= n_live] or [m for m, _ in hits]
        small = np.zeros(size, dtype=np.uint8)  # at most KEYWORD_MAX_TERMS terms
        for m in telling:
            small += m.view(np.uint8)
        small *= self._valid(scope, size)
        counts = small.astype(np.int64)
        # count first, then newest creation, as one int64 key (seq < 2**43, counts < 2**20):
        # no ties, so the top-k pre-selection stays small even when thousands share a count.
        key = counts << 43
        key[: self.n] |= self.seq[: self.n]
        key *= counts > 0
        top = self._top(key, k)
        matched = np.zeros(top.shape[0], dtype=np.float64)
        total = 0.0
        for m, df in hits:
            idf = _idf(n_live, df)
            total += idf
            matched += idf * m[top]
        shares = matched / total
        return [
            (self.refs[i], float(c), sh)
            for i, c, sh in zip(top.tolist(), counts[top].tolist(), shares.tolist(), strict=True)
        ]


class _WordIndex:
    """Distinct whitespace words -> slots, for the keyword channel's substring search.

    Words get ids in order of first sight and keep them until the agent is compacted. Which
    words contain a term is answered by an n-gram index over the distinct words (never over
    the rows): every bigram of a word, every trigram without a CJK character and every CJK
    character maps to the ids of the words holding it (``_grams_of_word``). A term that is one
    such gram is one lookup, exact; a longer term intersects the three rarest of its grams and
    checks the few words left with ``in``.
    Postings are a CSR (``ptr``/``flat``) over the words up to the last merge, plus the
    (word, slot) pairs appended since (``dw``/``ds``), merged in when they reach 1/32 of it.
    Postings of dead slots stay until compaction; reads mask them out.
    """

    MERGE_MIN = 4096

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.words: list[str] = []
        self.grams: dict[str, array] = {}  # gram -> ascending word ids
        self.ptr = np.zeros(1, dtype=np.int64)
        self.flat = np.zeros(0, dtype=np.int32)
        self.dw = array("i")
        self.ds = array("i")

    def add(self, slot: int, words: Iterable[str]) -> None:
        ids, dw, ds = self.ids, self.dw, self.ds
        for w in words:
            wid = ids.get(w)
            if wid is None:
                wid = ids[w] = len(self.words)
                self.words.append(w)
                self._index_word(wid, w)
            dw.append(wid)
            ds.append(slot)
        if len(dw) >= max(self.MERGE_MIN, self.flat.shape[0] // 32):
            self._merge()

    def _index_word(self, wid: int, w: str) -> None:
        grams = _grams_of_word(w)
        table = self.grams
        for g in grams:
            a = table.get(g)
            if a is None:
                a = table[intern(g)] = array("i")
            a.append(wid)

    def _merge(self) -> None:
        """Fold the appended pairs into the CSR, vectorised: O(postings) numpy, no Python loop."""
        dw = np.frombuffer(self.dw, dtype=np.int32).astype(np.int64)
        ds = np.frombuffer(self.ds, dtype=np.int32).copy()
        n_words = len(self.words)
        old_ptr = np.concatenate((self.ptr, np.full(n_words + 1 - self.ptr.shape[0], self.ptr[-1])))
        old_cnt = np.diff(old_ptr)
        new_cnt = old_cnt + np.bincount(dw, minlength=n_words)
        new_ptr = np.zeros(n_words + 1, dtype=np.int64)
        np.cumsum(new_cnt, out=new_ptr[1:])
        flat = np.empty(int(new_ptr[-1]), dtype=np.int32)
        if self.flat.shape[0]:
            shift = new_ptr[:-1] - old_ptr[:-1]
            flat[np.repeat(shift, old_cnt) + np.arange(self.flat.shape[0])] = self.flat
        o = np.argsort(dw, kind="stable")
        dws = dw[o]
        rank = np.arange(dws.shape[0]) - np.searchsorted(dws, dws, side="left")
        flat[new_ptr[dws] + old_cnt[dws] + rank] = ds[o]
        self.ptr, self.flat = new_ptr, flat
        self.dw, self.ds = array("i"), array("i")

    def holding(self, term: str) -> np.ndarray:
        """Ascending ids of the words that contain ``term`` (a substring without whitespace)."""
        probes = _probe_grams(term)
        if probes is None:  # one non-CJK character: not indexed (keyword_terms never asks)
            return np.array([i for i, w in enumerate(self.words) if term in w], dtype=np.int64)
        postings = []
        for g in probes:
            a = self.grams.get(g)
            if a is None:
                return _NO_IDS
            postings.append(a)
        postings.sort(key=len)
        cand = np.frombuffer(postings[0], dtype=np.int32).astype(np.int64)
        if len(probes) == 1 and probes[0] == term:
            return cand  # the term is itself an indexed gram: exact
        for a in postings[1:3]:
            cand = np.intersect1d(cand, np.frombuffer(a, dtype=np.int32).astype(np.int64), assume_unique=True)
        words = self.words
        return np.array([i for i in cand.tolist() if term in words[i]], dtype=np.int64)

    def slots(self, wids: np.ndarray) -> np.ndarray:
        """Slots holding any of the words (with repeats; dead slots included)."""
        parts = []
        fw = wids[: np.searchsorted(wids, self.ptr.shape[0] - 1)]
        if fw.shape[0]:
            first = self.ptr[fw]
            cnt = self.ptr[fw + 1] - first
            total = int(cnt.sum())
            if total:
                parts.append(self.flat[np.repeat(first - (np.cumsum(cnt) - cnt), cnt) + np.arange(total)])
        if len(self.dw) and wids.shape[0]:
            sel = np.zeros(len(self.words), dtype=bool)
            sel[wids] = True
            parts.append(np.frombuffer(self.ds, dtype=np.int32)[sel[np.frombuffer(self.dw, dtype=np.int32)]])
        if not parts:
            return np.zeros(0, dtype=np.int32)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _grams_of_word(w: str) -> set[str]:
    """What a keyword word is indexed under: its bigrams, its trigrams without CJK characters,
    and its CJK characters. CJK trigrams are left out: in running CJK text nearly every
    trigram is new, and indexing them would grow the table with the text, not the language."""
    grams = {w[i : i + 2] for i in range(len(w) - 1)}
    if w.isascii():
        grams.update(w[i : i + 3] for i in range(len(w) - 2))
        return grams
    cjk = [is_cjk(c) for c in w]
    grams.update(w[i : i + 3] for i in range(len(w) - 2) if not (cjk[i] or cjk[i + 1] or cjk[i + 2]))
    grams.update(c for c, flag in zip(w, cjk, strict=True) if flag)
    return grams


def _probe_grams(term: str) -> list[str] | None:
    """Indexed grams every word containing ``term`` holds (None: a lone non-CJK character)."""
    n = len(term)
    if n == 1:
        return [term] if is_cjk(term) else None
    cjk = [is_cjk(c) for c in term] if not term.isascii() else [False] * n
    out = []
    for i in range(n - 1):
        if i + 3 <= n and not (cjk[i] or cjk[i + 1] or cjk[i + 2]):
            out.append(term[i : i + 3])
        elif i + 3 > n and n >= 3 and not (cjk[i - 1] or cjk[i] or cjk[i + 1]):
            continue  # this bigram is inside the trigram just taken
        else:
            out.append(term[i : i + 2])
    return list(dict.fromkeys(out))


def _text_of_episode(p: dict[str, Any]) -> str:
    kw = p.get("keywords") or ""
    return f"{p['summary']}\n{kw}" if kw else p["summary"]


class LexicalProjection:
    """BM25 (``search``) and keyword (``keyword``) retrieval over memories and episodes."""

    name = "lexical"

    def __init__(self) -> None:
        self.offset: int = -1
        self.agents: dict[str, _AgentIndex] = {}

    def _agent(self, agent_id: str) -> _AgentIndex:
        idx = self.agents.get(agent_id)
        if idx is None:
            idx = self.agents[agent_id] = _AgentIndex()
        return idx

    # -- the fold -----------------------------------------------------------------------

    def apply(self, offset: int, ev: dict[str, Any]) -> None:
        t = ev["type"]
        idx: _AgentIndex | None
        if t == "memory.stored" or t == "episode.archived":
            s = ev["scope"]
            p = ev["payload"]
            idx = self._agent(s["agent_id"])
            if t == "memory.stored":
                ref, text = f"mem:{p['id']}", p["content"]
            else:
                ref, text = f"ep:{p['id']}", _text_of_episode(p)
            old = idx.slot_of.get(ref)
            seq = int(idx.seq[old]) if old is not None else offset  # a re-applied create keeps its place
            idx.add(ref, s.get("project_id", ""), s.get("channel", ""), seq, text)
        elif t == "memory.updated":
            p = ev["payload"]
            if p.get("kind", "mem") != "mem":
                return
            idx = self.agents.get(ev["scope"]["agent_id"])
            ref = f"mem:{p['id']}"
            if idx is None or ref not in idx.slot_of:
                return
            slot = idx.slot_of[ref]
            # The row keeps its bucket and its place in recency; only its text changes.
            idx.add(ref, idx.names[idx.proj[slot]], idx.names[idx.chan[slot]], int(idx.seq[slot]), p["content"])
        elif t == "memory.deleted" or t == "episode.deleted":
            p = ev["payload"]
            idx = self.agents.get(ev["scope"]["agent_id"])
            if idx is not None:
                kind = "ep" if t == "episode.deleted" else p.get("kind", "mem")
                idx.remove(f"{kind}:{p['id']}")
        elif t == "agent_data.deleted":
            p = ev["payload"]
            idx = self.agents.get(ev["scope"]["agent_id"])
            if idx is not None:
                for mid in p.get("memory_ids", ()):
                    idx.remove(f"mem:{mid}")
                for eid in p.get("episode_ids", ()):
                    idx.remove(f"ep:{eid}")

    # -- reads --------------------------------------------------------------------------

    def search(self, scope: ScopeFilter, query: str, k: int) -> list[tuple[str, float]]:
        """BM25 (k1 1.2, b 0.75, Lucene's idf), best first: ``[(ref, score)]``."""
        return [(ref, score) for ref, score, _ in self.search_shares(scope, query, k)]

    def search_shares(self, scope: ScopeFilter, query: str, k: int) -> list[tuple[str, float, float]]:
        """``search`` plus each row's share of the query's IDF mass, in [0, 1]: how much of
        what the query says (by term rarity) the row holds. Recall fusion weighs the lexical
        vote by it (``api/query/recall/fusion.py``)."""
        idx = self.agents.get(scope.agent_id)
        if idx is None or k <= 0:
            return []
        qtoks = query_tokens(query)
        return idx.bm25(scope, qtoks, k) if qtoks else []

    def keyword(self, scope: ScopeFilter, query: str, k: int) -> list[tuple[str, float]]:
        """Rows holding query terms as case-insensitive substrings of their normalised text.

        Terms are the query's whitespace-separated words (edge punctuation stripped; one-letter
        non-CJK terms dropped). Ranked by how many terms a row holds, then newest creation
        first; the score is that count. A term that more than half the agent's rows hold does
        not count unless all terms are that common."""
        return [(ref, score) for ref, score, _ in self.keyword_shares(scope, query, k)]

    def keyword_shares(self, scope: ScopeFilter, query: str, k: int) -> list[tuple[str, float, float]]:
        """``keyword`` plus each row's share of the terms' IDF mass (idf from how many rows
        hold each term as a substring), in [0, 1]."""
        idx = self.agents.get(scope.agent_id)
        if idx is None or k <= 0:
            return []
        terms = keyword_terms(query)
        return idx.keyword(scope, terms, k) if terms else []

    def count(self, scope: ScopeFilter) -> int:
        idx = self.agents.get(scope.agent_id)
        return idx.count(scope) if idx is not None else 0

    # -- snapshot -----------------------------------------------------------------------

    def to_snapshot(self) -> dict[str, Any]:
        agents = {}
        for agent in sorted(self.agents):
            rows = self.agents[agent].live_rows()
            if rows:
                agents[agent] = [list(r) for r in rows]
        return {"version": SNAPSHOT_VERSION, "agents": agents}

    def load_snapshot(self, body: dict[str, Any]) -> None:
        if body.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"lexical snapshot version {body.get('version')!r}, expected {SNAPSHOT_VERSION}")
        self.agents = {}
        for agent, rows in body["agents"].items():
            idx = self._agent(agent)
            for ref, project, channel, seq, text in rows:
                idx.add(ref, project, channel, int(seq), text)
