"""The quality gate and what surrounds it: which signal keys a row, thresholds, confidence,
the episode-boundary prior and autocut (R3–R7). Pure functions over fusion candidates.

The gate's signal priority is rsf > cosine > rrf (confidence first only under legacy
ordering with confidence on). Each branch compares its own scale: a calibrated operating point
when one was calibrated for that very signal, else a pool-size heuristic, so scales never mix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from memstream.api.query.recall.fusion import Candidate

Signal = Literal["confidence", "rsf", "cosine", "rrf"]


@dataclass(frozen=True, slots=True)
class GateConfig:
    rrf_k: int = 60
    # The agent's calibrated operating point and the signal it was calibrated on (R13).
    calibrated: tuple[float, str] | None = None
    confidence_enabled: bool = False
    ordering: Literal["fusion", "legacy"] = "fusion"

    @property
    def legacy_confidence(self) -> bool:
        return self.confidence_enabled and self.ordering == "legacy"

    @property
    def rrf_ceiling(self) -> float:
        """The rrf scale the cosine-scale heuristic is mapped onto: three first-place votes
        (vector, far, lexical), the most an rrf score can reach."""
        return 3.0 / (self.rrf_k + 1)


def pool_min_score(pool: int) -> float:
    """The heuristic threshold when nothing is calibrated: strict (0.5) for a tiny pool,
    relaxing logarithmically to 0.2 at 500 rows and beyond. On a small pool every candidate is
    the best of very few, so only a strong match should pass; a large pool ranks well enough
    that a lower bar costs little precision."""
    if pool <= 0:
        return 0.5
    t = min(1.0, math.log(pool + 1) / math.log(500))
    return round(0.5 - 0.3 * t, 4)


def keyed_signal(c: Candidate, cfg: GateConfig) -> tuple[float | None, Signal | None]:
    """(score, signal) the gate compares for this row; (None, None) for an unscored row."""
    if cfg.legacy_confidence and c.confidence is not None:
        return c.confidence, "confidence"
    if c.rsf is not None:
        return c.rsf, "rsf"
    if c.cosine is not None:
        return c.cosine, "cosine"
    if c.rrf is not None:
        return c.rrf, "rrf"
    return None, None


def threshold_for(signal: Signal, c: Candidate, min_score: float, cfg: GateConfig) -> float:
    if cfg.calibrated is not None and cfg.calibrated[1] == signal:
        return cfg.calibrated[0]
    if signal != "rrf":
        return min_score
    t = min_score * cfg.rrf_ceiling
    if c.single_arm:
        # A row only one retriever could rank tops out at one vote: cap the heuristic there
        # so that retriever's first-ranked row can pass, and its lower ranks still cannot.
        t = min(t, 1.0 / (cfg.rrf_k + 1))
    return t


def apply_gate(
    cands: Sequence[Candidate], pool: int, cfg: GateConfig, *, pure_recency: bool = False
) -> tuple[list[Candidate], list[Candidate]]:
    """(passed, blocked). Unscored rows (cascade fill) pass only on a pool of 100 or more, or
    for a pure-recency listing."""
    min_score = pool_min_score(pool)
    passed: list[Candidate] = []
    blocked: list[Candidate] = []
    for c in cands:
        score, signal = keyed_signal(c, cfg)
        if signal is None:
            ok = pure_recency or pool >= 100
        else:
            assert score is not None
            ok = score >= threshold_for(signal, c, min_score, cfg)
        (passed if ok else blocked).append(c)
    return passed, blocked


def episode_factor(hours_before_boundary: float, rate: float, floor: float) -> float:
    """The episode-boundary prior (R7): 1.0 at or after the boundary, decaying to the floor."""
    if hours_before_boundary <= 0:
        return 1.0
    return max(math.exp(-rate * hours_before_boundary), floor)


def confidence_of(c: Candidate, age_hours: float, resolved: bool | None, cfg: GateConfig) -> float:
    """A blend returned beside each row (R5): similarity, recency and resolved status. It is
    not match strength, and under ``fusion`` ordering it neither orders nor gates."""
    if c.cosine is not None:
        similarity = max(0.0, min(1.0, c.cosine))
    elif c.rsf is not None:
        similarity = c.rsf
    elif c.rrf is not None:
        similarity = min(1.0, c.rrf / cfg.rrf_ceiling)
    else:
        similarity = 0.0
    recency = math.exp(-max(age_hours, 0.0) / (24 * 30))
    bonus = 0.0 if resolved is None else (0.1 if resolved else -0.05)
    return round(max(0.0, min(1.0, 0.7 * similarity + 0.2 * recency + bonus)), 4)


def autocut(cands: list[Candidate], values: list[float], min_gap_ratio: float, min_results: int) -> list[Candidate]:
    """Cut at the largest score gap, when it is large enough and leaves ``min_results`` rows.

    Only for similarity-scale values (R6): the caller decides when it applies."""
    if len(cands) <= min_results:
        return cands
    top = values[0] if values else 0.0
    if top <= 0:
        return cands
    best_i, best_gap = None, 0.0
    for i in range(min_results - 1, len(values) - 1):
        gap = values[i] - values[i + 1]
        if gap > best_gap:
            best_i, best_gap = i, gap
    if best_i is None or best_gap / top < min_gap_ratio:
        return cands
    return cands[: best_i + 1]
