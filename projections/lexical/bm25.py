"""A BM25 query over one agent: exhaustive scoring, or MaxScore pruning once the postings are long."""

from __future__ import annotations

from typing import Final

import numpy as np

from memstream.projections.lexical import pruning
from memstream.projections.lexical.index import BLOCK, AgentIndex
from memstream.projections.lexical.scoring import K1, B, Term, contribution, held_share, idf_of
from memstream.projections.scope import ScopeFilter

# MaxScore pruning of BM25 (``pruning.pruned_top``) once a query's postings exceed this many.
PRUNE_MIN_POSTINGS: Final = 200_000


def bm25(idx: AgentIndex, scope: ScopeFilter, qtoks: list[str], k: int) -> list[tuple[str, float, float]]:
    """``[(ref, score, share)]`` best first. ``share``: the row's share of the query's IDF mass,
    the summed idf of the distinct query tokens it holds over that of every query token some
    live row holds (a token no row holds is evidence for no row, so it does not count).
    Unlike the score it ignores term frequency and row length, so a long memory holding the
    query's one rare term has as large a share as a short one.

    Exact top-k with MaxScore pruning (``pruning.pruned_top``) when the query's postings are long:
    the answer, scores included to the last bit, is the exhaustive one."""
    n_live = len(idx.slot_of)
    if not n_live or not idx.total_len:
        return []
    terms: list[Term] = []
    for t in qtoks:
        d = idx.df.get(t)
        if d:
            sa, ta = idx.post[t]
            # Views into the array('i'): none outlives this call (an append may resize them).
            slots, tf = np.frombuffer(sa, dtype=np.int32), np.frombuffer(ta, dtype=np.int32)
            terms.append(Term(t, slots, tf, idf_of(n_live, d), None))
    if not terms:
        return []
    slope = K1 * B / (idx.total_len / n_live)
    found = None
    if sum(t.slots.shape[0] for t in terms) > PRUNE_MIN_POSTINGS:
        terms = [t._replace(dense=pruning.dense_of(idx, t.name, t.slots, t.tf)) for t in terms]
        found = pruning.pruned_top(idx, scope, terms, k, slope)
    if found is None:
        top, values = exhaustive_top(idx, scope, terms, k, slope)
    else:
        top, values = found
    shares = held_share([t.slots for t in terms], [t.idf for t in terms], top)
    return [(idx.refs[i], v, sh) for i, v, sh in zip(top.tolist(), values.tolist(), shares.tolist(), strict=True)]


def exhaustive_top(
    idx: AgentIndex, scope: ScopeFilter, terms: list[Term], k: int, slope: float
) -> tuple[np.ndarray, np.ndarray]:
    """Score every slot any query term holds: (top slots, their scores)."""
    contribs = [contribution(idx.dlen, t.slots, t.tf, t.idf, slope) for t in terms]
    # bincount adds in input order, so each row's score is summed term by term in query order.
    size = -(-idx.n // BLOCK) * BLOCK
    scores = np.bincount(np.concatenate([t.slots for t in terms]), weights=np.concatenate(contribs), minlength=size)
    scores *= idx.valid(scope, size)
    top = idx.top(scores, k)
    return top, scores[top]
