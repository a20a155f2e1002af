"""Exact MaxScore pruning of BM25: the top k while scoring only the rows holding the rarer query terms."""

from __future__ import annotations

from typing import Final

import numpy as np

from memstream.projections.lexical.index import AgentIndex
from memstream.projections.lexical.scoring import K1, B, Term, contribution
from memstream.projections.scope import ScopeFilter

# Its first guess of the essential terms: the rarest ones, holding at most this many postings.
PRUNE_FIRST_CANDIDATES: Final = 2_048
# It gives up (scores everything) when the essential terms hold more postings than this.
PRUNE_MAX_CANDIDATES: Final = 32_768
# A term held by at least 1/DENSE_FRACTION of an agent's slots (once it has DENSE_MIN_ROWS)
# also gets a per-slot tf table, so pruning reads it at the candidates without a search.
DENSE_FRACTION: Final = 32
DENSE_MIN_ROWS: Final = 50_000
DENSE_MAX_TERMS: Final = 64


def below(bound: float, kth: float) -> bool:
    """``bound < kth`` with room for the rounding of a float sum of up to a few dozen terms."""
    return bound * (1.0 + 1e-9) < kth


def pruned_top(
    idx: AgentIndex, scope: ScopeFilter, terms: list[Term], k: int, slope: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """MaxScore (Turtle & Flood): the exact top-k while scoring only the rows that hold one
    of the query's rarer terms, or None when that cannot be shown (then score everything).

    Each term adds at most ``bound`` to a row's score. Split the terms, rarest first, into
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
    bounds = [bound(idx, terms[i], slope) for i in order]
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
        cand, values = score_candidates(idx, scope, terms, [order[j] for j in range(essential)], slope)
        positive = np.flatnonzero(values > 0)
        if positive.shape[0] < k:
            return None
        kth = float(np.partition(values[positive], positive.shape[0] - k)[positive.shape[0] - k])
        if below(rest[essential], kth):
            top = positive[np.lexsort((-idx.seq[cand[positive]], -values[positive]))[:k]]
            return cand[top], values[top]
        # The k-th best only grows as candidates are added: with this many essential terms
        # the condition holds at the next pass by construction.
        essential = next(j for j in range(len(order) + 1) if below(rest[j], kth))
        if essential >= len(order) or sum(terms[order[j]].slots.shape[0] for j in range(essential)) > (
            PRUNE_MAX_CANDIDATES
        ):
            return None  # about as costly as scoring everything
    return None


def bound(idx: AgentIndex, t: Term, slope: float) -> float:
    """Above the most ``t`` adds to any row's score: its contribution grows with tf and
    shrinks with row length, so it is at most that of (max tf, min row length) over its
    postings (dead ones included, which only loosens it). Kept for a tabled term; read off
    the postings for another (a pass over at most 1/DENSE_FRACTION of the slots)."""
    peak = idx.peak.get(t.name) if t.dense is not None else None
    tf_max, dl_min = peak if peak is not None else (int(t.tf.max()), int(idx.dlen[t.slots].min()))
    return t.idf * (K1 + 1.0) * tf_max / (tf_max + K1 * (1.0 - B) + slope * dl_min)


def score_candidates(
    idx: AgentIndex, scope: ScopeFilter, terms: list[Term], essential: list[int], slope: float
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
        weights.append(contribution(idx.dlen, slots, tf, t.idf, slope))
    values = np.bincount(np.concatenate(at), weights=np.concatenate(weights), minlength=cand.shape[0])
    values *= idx.valid_at(scope, cand)
    return cand, values


def dense_of(idx: AgentIndex, term: str, slots: np.ndarray, tf: np.ndarray) -> np.ndarray | None:
    """The term's per-slot term frequencies (0 where absent), kept up to date by ``add``
    once made; made here for a term that many rows hold, in a large agent, and at most
    ``DENSE_MAX_TERMS`` per agent (~2 bytes per slot each)."""
    table = idx.dense.get(term)
    if table is not None:
        return table
    if idx.n < DENSE_MIN_ROWS or slots.shape[0] * DENSE_FRACTION < idx.n or len(idx.dense) >= DENSE_MAX_TERMS:
        return None
    if int(tf.max()) > np.iinfo(np.uint16).max:
        return None
    table = np.zeros(idx.seq.shape[0], dtype=np.uint16)
    table[slots] = tf
    idx.dense[term] = table
    idx.peak[term] = (int(tf.max()), int(idx.dlen[slots].min()))
    return table
