"""Fusing ranked lists from several retrievers into one scored candidate list (R2, R3).

Pure functions over ``(ref, score)`` lists, best first. Each candidate remembers what every
retriever said about it (its cosine from the vector list, its reciprocal-rank and relative
scores), because the quality gate and ``match_reason`` need to know which signal keyed it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

Ranked = Sequence[tuple[str, float]]


@dataclass(slots=True)
class Candidate:
    ref: str
    cosine: float | None = None  # from the vector window list (absolute similarity)
    rrf: float | None = None
    rsf: float | None = None
    lists: set[str] = field(default_factory=set)  # which retrievers ranked it
    fused: float = 0.0  # the value the candidates are ordered by
    confidence: float | None = None
    prior: float | None = None  # episode-boundary factor applied, when the penalty is on

    @property
    def single_arm(self) -> bool:
        return len(self.lists) == 1


def rrf(lists: dict[str, Ranked], k: int = 60, weights: dict[str, float] | None = None) -> list[Candidate]:
    """Reciprocal-rank fusion. ``rrf`` is the plain sum of ``1 / (k + rank)`` (rank from 1): the
    value the gate compares and ``match_reason`` reports, on the scale the gate's thresholds
    are built for. The order uses the weighted sum (``weight / (k + rank)``, weight 1 unless
    given), so a weight moves rows without moving the gate. The vector list's cosine rides
    along so the gate can key on it."""
    by_ref: dict[str, Candidate] = {}
    for name, ranked in lists.items():
        w = 1.0 if weights is None else weights.get(name, 1.0)
        for rank, (ref, score) in enumerate(ranked, start=1):
            c = by_ref.get(ref)
            if c is None:
                c = by_ref[ref] = Candidate(ref, rrf=0.0)
            c.rrf = (c.rrf or 0.0) + 1.0 / (k + rank)
            c.fused += w / (k + rank)
            c.lists.add(name)
            if name == "vector":
                c.cosine = score
    return ordered(list(by_ref.values()))


def rsf(lists: dict[str, Ranked]) -> list[Candidate]:
    """Relative-score fusion: each list's scores min-max normalised within the query, summed,
    divided by the number of lists that returned anything. Relative to the query by
    construction (a lone list's top row scores 1.0 however weak it is)."""
    active = {name: ranked for name, ranked in lists.items() if ranked}
    by_ref: dict[str, Candidate] = {}
    for name, ranked in active.items():
        scores = [s for _, s in ranked]
        lo, hi = min(scores), max(scores)
        for ref, score in ranked:
            norm = 1.0 if hi == lo else (score - lo) / (hi - lo)
            c = by_ref.get(ref)
            if c is None:
                c = by_ref[ref] = Candidate(ref, rsf=0.0)
            c.rsf = (c.rsf or 0.0) + norm
            c.lists.add(name)
            if name == "vector":
                c.cosine = score
    n = len(active) or 1
    out = list(by_ref.values())
    for c in out:
        c.rsf = (c.rsf or 0.0) / n
        c.fused = c.rsf
    return ordered(out)


def cascade(vector: Ranked, fill: Sequence[Ranked], min_cosine: float) -> list[Candidate]:
    """Vector rows at or above ``min_cosine`` first (scored by cosine), then rows from the
    lexical lists in order, unscored, to fill. No fusion: stages are concatenated."""
    out: list[Candidate] = []
    seen: set[str] = set()
    for ref, score in vector:
        if score >= min_cosine:
            out.append(Candidate(ref, cosine=score, lists={"vector"}, fused=score))
            seen.add(ref)
    for ranked in fill:
        for ref, _ in ranked:
            if ref not in seen:
                seen.add(ref)
                out.append(Candidate(ref, lists={"fill"}, fused=float("-inf")))
    return out


def ordered(cands: list[Candidate]) -> list[Candidate]:
    """Best first; ties broken by the ref's id, newest (highest) first, so answers are stable."""
    return sorted(cands, key=lambda c: (-c.fused, -_ref_id(c.ref), c.ref))


def _ref_id(ref: str) -> int:
    _, _, ident = ref.partition(":")
    return int(ident) if ident.isdigit() else 0
