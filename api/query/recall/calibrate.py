"""Calibrating an agent's quality gate for a precision level (R13), deterministically so that
the same log always gives the same gate. See docs/eval.md, "Calibrating the gate".
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

import numpy as np

from memstream.api.query.recall.gate import GateConfig, keyed_signal
from memstream.api.query.recall.models import CalibrationSource, CopyableSettings
from memstream.api.query.recall.pipeline import RecallRequest, row_of, row_time, run_recall
from memstream.projections.scope import ScopeFilter

MIN_EMBEDDED = 10


def sample_ids(ids: list[int], seed: str, n: int) -> list[int]:
    """A deterministic sample: order by a keyed hash, take the first ``n``."""
    return sorted(ids, key=lambda i: hashlib.blake2b(f"{seed}:{i}".encode(), digest_size=8).digest())[:n]


def separation_threshold(null: np.ndarray, pos: np.ndarray, beta: float, floor: float) -> tuple[float, float]:
    """(threshold, youden_j): argmax of TPR + beta * (1 - FPR) over a grid of candidate points."""
    lo, hi = float(min(null.min(), pos.min())), float(max(null.max(), pos.max()))
    if hi <= lo:
        return max(lo, floor), 0.0
    grid = np.linspace(lo, hi, 256)
    null_s, pos_s = np.sort(null), np.sort(pos)
    tpr = 1.0 - np.searchsorted(pos_s, grid, side="left") / len(pos_s)
    fpr = 1.0 - np.searchsorted(null_s, grid, side="left") / len(null_s)
    objective = tpr + beta * (1.0 - fpr)
    i = int(np.argmax(objective))
    return max(float(grid[i]), floor), float(tpr[i] - fpr[i])


def calibrate(
    engine: CalibrationSource,
    agent_id: str,
    beta: float,
    seed: str,
    vectors_by_id: dict[int, np.ndarray],
    *,
    sample: int = 100,
    window_minutes: float = 30.0,
    floor: float = 0.0,
) -> dict[str, Any]:
    """The gate for ``agent_id`` at ``beta``; ``{"ok": False, "error": ...}`` when the data
    cannot support one. ``vectors_by_id`` holds the sampled memories' query vectors."""
    settings = engine.settings
    rows = [r for r in engine.memories.of_agent(agent_id) if r.id in vectors_by_id]
    if len(rows) < MIN_EMBEDDED:
        return {"ok": False, "error": f"Need at least {MIN_EMBEDDED} embeddings, found {len(rows)}"}
    picked = set(sample_ids([r.id for r in rows], seed, sample))
    settings_free = replace_settings(settings)
    cfg = GateConfig(settings.rrf_k, None, settings.confidence_enabled, settings.confidence_ordering)
    scored: list[tuple[str, float, bool]] = []
    for row in rows:
        if row.id not in picked:
            continue
        q_time = row_time(row)
        req = RecallRequest(ScopeFilter(agent_id), row.content, 20)
        # Ungated: the gate being measured must not filter its own curve.
        result = run_recall(engine, settings_free, req, vectors_by_id[row.id], row.embedding_model, gate=False)
        for c in result.candidates:
            if c.ref == f"mem:{row.id}":
                continue
            score, signal = keyed_signal(c, cfg)
            if score is None or signal is None:
                continue
            other = row_of(engine, c.ref)
            t = row_time(other) if other is not None else None
            near = t is not None and q_time is not None and abs((t - q_time).total_seconds()) <= window_minutes * 60
            scored.append((signal, float(score), near))
    if not scored:
        return {"ok": False, "error": "calibration found no scored rows"}
    keyed_on = Counter(s for s, _, _ in scored).most_common(1)[0][0]
    null = np.array([v for s, v, near in scored if s == keyed_on and not near])
    pos = np.array([v for s, v, near in scored if s == keyed_on and near])
    if len(null) < 10 or len(pos) < 5:
        return {
            "ok": False,
            "error": f"too little separation data (null {len(null)}, related {len(pos)}); the heuristic gate stays",
        }
    threshold, youden = separation_threshold(null, pos, beta, floor)
    return {
        "ok": True,
        "scope": "per_agent",
        "new_threshold": round(threshold, 4),
        "signal": keyed_on,
        "youden_j": round(youden, 4),
        "n_null": len(null),
        "n_pos": len(pos),
        "queries_run": len(picked),
    }


def replace_settings(settings: CopyableSettings) -> CopyableSettings:
    """The settings a calibration recalls under: no autocut (it would truncate the curve)."""
    return settings.model_copy(update={"autocut_enabled": False})
