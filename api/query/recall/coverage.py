"""How much of the question a turn holds with the turn before or after it: query-time context.

A reply ("Yes, I did!", "A sunrise, last year") holds little of the question that its answer
is; the turn before it holds the rest. The lexical list scores each row alone, so the second
stage reads the union of a turn's words and its neighbour's, weighted by the agent's IDF as
BM25 weighs them. Nothing is stored for it: which rows hold which query word is read from the
lexical index's postings at query time (a binary search per word, no text is tokenised again).
Why and what it gains: docs/eval.md, "Fifth pass".
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from memstream.projections.lexical import LexicalProjection
from memstream.projections.lexical.scoring import idf_of
from memstream.projections.lexical.text import query_tokens


class Coverage:
    """The shares of one question's IDF mass that rows hold, alone or two together: each row's
    held query words as a bit mask, each word's IDF by bit."""

    def __init__(self, idf: list[float], held: dict[str, int], present: int = -1) -> None:
        self.idf = idf
        self.total = sum(idf)
        self.held = held  # ref -> bit i set when the row holds query word i; rows not read: 0
        # bit i set when some live row holds query word i (every bit when not given)
        self.present_total = sum(v for i, v in enumerate(idf) if present >> i & 1)

    def share(self, *refs: str | None) -> float:
        """The summed IDF of the query words any of ``refs`` holds, over the question's."""
        mask = 0
        for ref in refs:
            if ref is not None:
                mask |= self.held.get(ref, 0)
        if not mask or self.total <= 0:
            return 0.0
        return sum(v for i, v in enumerate(self.idf) if mask >> i & 1) / self.total

    def lexical_share(self, ref: str) -> float:
        """The row's share as BM25 reports it for the rows it ranks (``bm25.bm25``): over the
        IDF mass of the query words some row holds, so a row the lexical list did not reach
        gets the signal on the scale of one it did."""
        mask = self.held.get(ref, 0)
        if not mask or self.present_total <= 0:
            return 0.0
        return sum(v for i, v in enumerate(self.idf) if mask >> i & 1) / self.present_total

    def signals(self, ref: str, previous: str | None, following: str | None) -> tuple[float, float]:
        """(with the row before, with the row after); a missing neighbour adds nothing."""
        return self.share(ref, previous), self.share(ref, following)


def coverage_of(lexical: LexicalProjection, agent_id: str, query: str, refs: Iterable[str]) -> Coverage:
    """Which of the query's distinct words each of ``refs`` holds, from the agent's postings,
    and each word's IDF over the agent's live rows (a word no row holds still counts in the
    question's mass, with the IDF of df 0)."""
    words = query_tokens(query)
    idx = lexical.agents.get(agent_id)
    if idx is None:
        return Coverage([idf_of(0, 0)] * len(words), {})
    n = len(idx.slot_of)
    wanted = [r for r in dict.fromkeys(refs) if r in idx.slot_of]
    slots = np.array([idx.slot_of[r] for r in wanted], dtype=np.int64)
    masks = [0] * len(wanted)
    idf = []
    present = 0
    for i, word in enumerate(words):
        df = idx.df.get(word, 0)
        idf.append(idf_of(n, df))
        present |= (1 << i) if df else 0
        post = idx.post.get(word)
        if post is None or not wanted:
            continue
        # A view into the array('i'): it does not outlive this call (an append may resize it).
        held = np.frombuffer(post[0], dtype=np.int32)
        if not held.shape[0]:
            continue
        at = np.minimum(np.searchsorted(held, slots), held.shape[0] - 1)
        for j in np.flatnonzero(held[at] == slots).tolist():
            masks[j] |= 1 << i
    return Coverage(idf, dict(zip(wanted, masks, strict=True)), present)
