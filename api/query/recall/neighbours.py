"""Adjacent-memory evidence: a row's score raised by its neighbours' in the order it was written.

Agents store conversations turn by turn, and the turn that answers a question is often not the
one worded like it: "What did you paint?" is followed by "A sunrise, last year". Smoothing each
retriever's scores over the adjacent rows lets the question's match vote for its answer (and
the other way round) inside the ranking, without a second embedding per memory. Measured on the
LoCoMo development split: docs/eval.md, "LoCoMo".
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import TypeVar

from memstream.projections.records import MemoriesProjection

K = TypeVar("K", bound=Hashable)

# Each list is reordered over twice the rows it contributes (then cut back): deep enough for an
# answer just below the cut to rise, shallow enough to stay cheap (docs/eval.md, "LoCoMo").
DEPTH_FACTOR = 2


def neighbour_scores(
    scores: Mapping[K, float], adjacent: Callable[[K], Iterable[K | None]], weight: float, *, spread: bool = False
) -> dict[K, float]:
    """Every scored row (and, with ``spread``, every row adjacent to one) scored
    ``own + weight * best neighbour``, a missing score counting 0. ``weight`` 0 returns the
    scores unchanged."""
    if weight <= 0:
        return dict(scores)
    keys: dict[K, None] = dict.fromkeys(scores)
    if spread:
        for key in scores:
            keys.update(dict.fromkeys(n for n in adjacent(key) if n is not None))
    out: dict[K, float] = {}
    for key in keys:
        best = max((scores.get(n, 0.0) for n in adjacent(key) if n is not None), default=0.0)
        out[key] = scores.get(key, 0.0) + weight * best
    return out


Ranked = list[tuple[str, float]]


def memory_adjacency(
    memories: MemoriesProjection, refs: Iterable[str], order: dict[str, list[int]] | None = None
) -> dict[str, tuple[str | None, str | None]]:
    """Each memory ref's previous and next memory of the same agent in write order, when that
    memory is live and in the same project and channel (a conversation continues in its own
    scope); None where there is none. Other refs (episodes) have no neighbours. ``order``: each
    agent's live memory ids, ascending, as a caller's earlier call under the same read left them
    (sorting them is most of the cost)."""
    out: dict[str, tuple[str | None, str | None]] = {}
    order = {} if order is None else order  # agent -> its live memory ids, ascending
    for ref in refs:
        kind, _, ident = ref.partition(":")
        row = memories.rows.get(int(ident)) if kind == "mem" and ident.isdigit() else None
        if row is None:
            out[ref] = (None, None)
            continue
        ids = order.get(row.agent_id)
        if ids is None:
            ids = order[row.agent_id] = sorted(memories.by_agent.get(row.agent_id, {}))
        at = bisect_left(ids, row.id)
        near = (ids[at - 1] if at > 0 else None, ids[at + 1] if at + 1 < len(ids) else None)
        pair: list[str | None] = []
        for mid in near:
            other = memories.rows.get(mid) if mid is not None else None
            same = other is not None and (other.project_id, other.channel) == (row.project_id, row.channel)
            pair.append(f"mem:{mid}" if same else None)
        out[ref] = (pair[0], pair[1])
    return out


def reorder(
    ranked: Ranked, evidence: Mapping[str, float], adjacency: Mapping[str, tuple[str | None, str | None]], weight: float
) -> tuple[Ranked, dict[str, float]]:
    """One retriever's list with rows its neighbours support moved up, and each row's evidence
    plus ``weight`` times its best neighbour's in the same list (``neighbour_scores``).

    A row's place is keyed on its evidence capped by every row the retriever ranked above it
    (so without neighbour support the retriever's own order stands, even where its evidence
    disagrees with it, as BM25's order and a row's IDF share can), plus the neighbour share.
    Rows and scores are kept (a cosine stays the row's own); ties keep the retriever's order."""
    own = {ref: evidence.get(ref, 0.0) for ref, _ in ranked}
    smoothed = neighbour_scores(own, lambda ref: adjacency.get(ref, (None, None)), weight)
    key: list[float] = []
    cap = float("inf")
    for ref, _ in ranked:
        cap = min(cap, own[ref])
        key.append(cap + (smoothed[ref] - own[ref]))
    order = sorted(range(len(ranked)), key=lambda i: -key[i])
    out = [ranked[i] for i in order]
    return out, {ref: smoothed[ref] for ref, _ in out}
