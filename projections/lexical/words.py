"""The keyword channel's words: distinct whitespace words of the rows, found by substring through an n-gram index."""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from sys import intern
from typing import Final

import numpy as np

from memstream.projections.lexical.packed import GramIds
from memstream.projections.lexical.text import is_cjk

NO_IDS: Final = np.zeros(0, dtype=np.int64)
MOVE_RUN: Final = 1 << 20  # postings a merge moves per step (``_move``)


class WordIndex:
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
        self.grams = GramIds()  # gram -> ascending word ids; a load leaves it packed
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
            self.merge()

    def _index_word(self, wid: int, w: str) -> None:
        grams = grams_of_word(w)
        table = self.grams
        for g in grams:
            a = table.own(g)  # the dict's own get; a loaded gram is unpacked below
            if a is None:
                a = table.unpack(g)
            if a is None:
                a = table[intern(g)] = array("i")
            a.append(wid)

    def merge(self) -> None:
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
            _move(flat, self.flat, old_ptr, old_cnt, new_ptr[:-1] - old_ptr[:-1])
        o = np.argsort(dw, kind="stable")
        dws = dw[o]
        rank = np.arange(dws.shape[0]) - np.searchsorted(dws, dws, side="left")
        flat[new_ptr[dws] + old_cnt[dws] + rank] = ds[o]
        self.ptr, self.flat = new_ptr, flat
        self.dw, self.ds = array("i"), array("i")

    def holding(self, term: str) -> np.ndarray:
        """Ascending ids of the words that contain ``term`` (a substring without whitespace)."""
        probes = probe_grams(term)
        if probes is None:  # one non-CJK character: not indexed (keyword_terms never asks)
            return np.array([i for i, w in enumerate(self.words) if term in w], dtype=np.int64)
        postings = []
        for g in probes:
            a = self.grams.get(g)
            if a is None:
                return NO_IDS
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


def _move(dst: np.ndarray, src: np.ndarray, ptr: np.ndarray, cnt: np.ndarray, shift: np.ndarray) -> None:
    """Each word's postings in ``src`` (a CSR by ``ptr``) to ``dst``, moved by the word's
    ``shift``, a run of words holding about ``MOVE_RUN`` postings at a time: the positions are
    int64, made for all 20M postings of a 1M-memory index at once (docs/benchmarks.md, "The
    lexical checkpoint's peak (wave 10)")."""
    n = cnt.shape[0]
    w0 = 0
    while w0 < n:
        w1 = min(n, max(w0 + 1, int(np.searchsorted(ptr, ptr[w0] + MOVE_RUN, side="left"))))
        a, b = int(ptr[w0]), int(ptr[w1])
        if b > a:
            dst[np.repeat(shift[w0:w1], cnt[w0:w1]) + np.arange(a, b)] = src[a:b]
        w0 = w1


def grams_of_word(w: str) -> set[str]:
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


def probe_grams(term: str) -> list[str] | None:
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
