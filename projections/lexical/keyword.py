"""The keyword channel over one agent: rows holding query terms as substrings, most terms first."""

from __future__ import annotations

import numpy as np

from memstream.projections.lexical.index import BLOCK, AgentIndex
from memstream.projections.lexical.scoring import idf_of
from memstream.projections.scope import ScopeFilter


def keyword(idx: AgentIndex, scope: ScopeFilter, terms: list[str], k: int) -> list[tuple[str, float, float]]:
    """``[(ref, matched term count, share)]``: ``share`` is the summed idf (from each term's
    row count) of the terms the row holds over that of every term some row holds, the
    keyword channel's counterpart of the BM25 share (``bm25.bm25``)."""
    n_live = len(idx.slot_of)
    if not n_live:
        return []
    size = -(-idx.n // BLOCK) * BLOCK
    alive = idx.alive[: idx.n]
    hits: list[tuple[np.ndarray, int]] = []
    for term in terms:
        slots = idx.kw.slots(idx.kw.holding(term))
        if not slots.shape[0]:
            continue
        m = np.zeros(size, dtype=bool)
        m[slots] = True
        m[: idx.n] &= alive
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
    small *= idx.valid(scope, size)
    counts = small.astype(np.int64)
    # count first, then newest creation, as one int64 key (seq < 2**43, counts < 2**20):
    # no ties, so the top-k pre-selection stays small even when thousands share a count.
    key = counts << 43
    key[: idx.n] |= idx.seq[: idx.n]
    key *= counts > 0
    top = idx.top(key, k)
    matched = np.zeros(top.shape[0], dtype=np.float64)
    total = 0.0
    for m, df in hits:
        idf = idf_of(n_live, df)
        total += idf
        matched += idf * m[top]
    shares = matched / total
    return [
        (idx.refs[i], float(c), sh)
        for i, c, sh in zip(top.tolist(), counts[top].tolist(), shares.tolist(), strict=True)
    ]
