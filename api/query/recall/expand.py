"""The second stage's pool widened: each candidate's neighbours join it, with cosines read by id.

Agents store a conversation turn by turn, and the turn that holds the answer is often next to
the one worded like the question, where neither retriever ranks it. With the neighbours of the
first ``rerank.EXPAND`` candidates in the pool, the second stage can rank them; each joins with
what a listed row carries: its exact cosine (read by memory id, ``VectorProjection.cosines``,
which the gate keys on as on a vector row's), its share of the query's words from the postings,
and its own neighbours' signals. What it gains and costs: docs/eval.md, "Sixth pass".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from memstream.api.query.recall.fusion import Candidate
from memstream.api.query.recall.models import RecallModels

Adjacency = dict[str, tuple[str | None, str | None]]


@dataclass(slots=True)
class Pool:
    cands: list[Candidate]  # the candidates, then the rows that joined (in the order they joined)
    adjacency: Adjacency  # previous / next memory of every row of ``cands``
    content: dict[str, str | None]  # every row's text
    near: set[str]  # the admitted neighbours of every row (their words and cosines are read)
    read: dict[str, float] | None  # cosines read by id for rows the vector list did not hold


def widen(
    engine: RecallModels,
    agent_id: str,
    cands: list[Candidate],
    window: Sequence[tuple[str, float]],
    adjacency: Adjacency,
    content: dict[str, str | None],
    admit: Callable[[str], bool],
    text_of: Callable[[str], str | None],
    adjacent: Callable[[list[str]], Adjacency],
    query_vec: np.ndarray | None,
    model: str | None,
    read: bool,
    top: int | None,
) -> Pool:
    """With ``read``, cosines are read for every row the vector list did not hold, and the
    neighbours of the first ``top`` candidates (every one: None; none: 0) that are not
    candidates and that ``admit`` lets in join (``adjacent``: the rows before and after each of
    some refs). Without ``read`` or a query vector nothing is read and nothing joins (a joined
    row would have no score for the gate): the fifth pass."""
    if query_vec is None or not read:
        near = {n for pair in adjacency.values() for n in pair if n is not None and (n in content or admit(n))}
        return Pool(cands, adjacency, content, near, None)
    adjacency = dict(adjacency)
    have = {c.ref for c in cands}
    wanted = [n for c in cands[:top] for n in adjacency.get(c.ref, (None, None)) if n is not None and n not in have]
    wanted = [n for n in dict.fromkeys(wanted) if admit(n)]
    adjacency.update(adjacent(wanted))
    near = {n for pair in adjacency.values() for n in pair if n is not None and (n in have or admit(n))}
    listed = {r for r, _ in window}
    unread = ({*have, *wanted, *near}) - listed
    cos = engine.vectors.cosines(agent_id, query_vec, unread, model) if unread else {}
    joined = [Candidate(n, cosine=cos[n]) for n in wanted if n in cos]
    content = dict(content)
    for c in joined:
        content[c.ref] = text_of(c.ref)
    for n in wanted:
        if n not in cos:
            adjacency.pop(n, None)
    return Pool(cands + joined, adjacency, content, near, cos)
