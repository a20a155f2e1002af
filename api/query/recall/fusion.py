"""Fusing ranked lists from several retrievers into one scored candidate list (R2, R3).

Pure functions over ``(ref, score)`` lists, best first. Each candidate remembers what every
retriever said about it (its cosine from the vector list, its reciprocal-rank and relative
scores), because the quality gate and ``match_reason`` need to know which signal keyed it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

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


def rrf(
    lists: dict[str, Ranked],
    k: int = 60,
    weights: dict[str, float] | None = None,
    evidence: Mapping[str, Mapping[str, float]] | None = None,
) -> list[Candidate]:
    """Reciprocal-rank fusion. ``rrf`` is the plain sum of ``1 / (k + rank)`` (rank from 1): the
    value the gate compares and ``match_reason`` reports, on the scale the gate's thresholds
    are built for. The order is a separate sum, so it can move rows without moving the gate:

    - without ``evidence``, classic weighted RRF: ``weight / (k + rank)`` (weight 1 unless given);
    - with ``evidence`` (list name -> ref -> evidence in [0, 1]; a list it does not name votes
      with evidence 1), evidence-weighted votes ``weight * evidence / rank``: each retriever
      votes for a row as strongly as its own absolute measure of the match says, discounted by
      the rank it gave the row (see ``vector_evidence``, ``lexical_evidence``, docs/eval.md).
      A single list keeps its own order: there is nothing to weigh it against.

    The vector list's cosine rides along so the gate can key on it."""
    active = [name for name, ranked in lists.items() if ranked]
    weigh = evidence is not None and len(active) > 1
    by_ref: dict[str, Candidate] = {}
    for name, ranked in lists.items():
        w = 1.0 if weights is None else weights.get(name, 1.0)
        ev = evidence.get(name) if weigh and evidence is not None else None
        for rank, (ref, score) in enumerate(ranked, start=1):
            c = by_ref.get(ref)
            if c is None:
                c = by_ref[ref] = Candidate(ref, rrf=0.0)
            c.rrf = (c.rrf or 0.0) + 1.0 / (k + rank)
            if weigh:
                c.fused += w * (1.0 if ev is None else ev.get(ref, 0.0)) / rank
            else:
                c.fused += w / (k + rank)
            c.lists.add(name)
            if name == "vector":
                c.cosine = score
    return ordered(list(by_ref.values()))


# The lexical share is squared: a row holding half of what the query says (by IDF mass) gets a
# quarter of a full vote, since partial word overlap between unrelated texts is common, while a
# row holding nearly all of it (a quoted name or identifier) keeps nearly all of its vote.
# Chosen with the reciprocal-rank form above on the dev halves only (docs/eval.md, "Fusion").
LEXICAL_EVIDENCE_POWER: Final = 2


def vector_evidence(ranked: Ranked) -> dict[str, float]:
    """A vector list's evidence per row: its cosine, clamped to [0, 1]."""
    return {ref: min(1.0, max(0.0, score)) for ref, score in ranked}


def lexical_evidence(shares: Mapping[str, float]) -> dict[str, float]:
    """The lexical list's evidence per row, from its share of the query's IDF mass (the part of
    what the query says, weighted by term rarity, that the row holds; ``LexicalProjection``)."""
    return {ref: min(1.0, max(0.0, share)) ** LEXICAL_EVIDENCE_POWER for ref, share in shares.items()}


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
