"""Pure parts of recall: fusion arithmetic, the gate's signal chain and thresholds, autocut,
the episode prior, calibration's separation point, and chronological merging (R2–R7, R11, R13)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from memstream.api.query.recall import fusion
from memstream.api.query.recall.calibrate import sample_ids, separation_threshold
from memstream.api.query.recall.gate import (
    GateConfig,
    apply_gate,
    autocut,
    episode_factor,
    keyed_signal,
    pool_min_score,
)
from memstream.api.tools.recall import chronological, instant


def test_rrf_single_list_rank_one_scores_one_over_k_plus_one() -> None:
    [c] = fusion.rrf({"lexical": [("mem:1", 7.5)]})
    assert c.rrf == pytest.approx(1 / 61) and c.cosine is None and c.single_arm


def test_rrf_sums_votes_and_keeps_the_cosine() -> None:
    out = fusion.rrf({"vector": [("mem:1", 0.8), ("mem:2", 0.7)], "lexical": [("mem:2", 3.0)]})
    assert [c.ref for c in out] == ["mem:2", "mem:1"]
    assert out[0].rrf == pytest.approx(1 / 62 + 1 / 61) and out[0].cosine == 0.7


def test_rsf_normalises_per_list_and_divides_by_active_lists() -> None:
    out = fusion.rsf({"vector": [("mem:1", 0.9), ("mem:2", 0.5)], "lexical": [("mem:3", 2.0)], "keyword": []})
    scores = {c.ref: c.rsf for c in out}
    # Two active lists: a row one list ranks first and the other misses scores exactly 0.5.
    assert scores == {"mem:1": 0.5, "mem:3": 0.5, "mem:2": 0.0}


def test_cascade_fills_unscored_rows_after_vector_rows() -> None:
    out = fusion.cascade([("mem:1", 0.9), ("mem:2", 0.1)], [[("mem:3", 1.0), ("mem:1", 0.5)]], 0.3)
    assert [c.ref for c in out] == ["mem:1", "mem:3"]
    assert keyed_signal(out[1], GateConfig()) == (None, None)


def test_signal_priority_rsf_over_cosine_over_rrf() -> None:
    cfg = GateConfig()
    assert keyed_signal(fusion.Candidate("mem:1", cosine=0.4, rrf=0.01, rsf=0.7), cfg) == (0.7, "rsf")
    assert keyed_signal(fusion.Candidate("mem:1", cosine=0.4, rrf=0.01), cfg) == (0.4, "cosine")
    assert keyed_signal(fusion.Candidate("mem:1", rrf=0.01), cfg) == (0.01, "rrf")
    legacy = GateConfig(confidence_enabled=True, ordering="legacy")
    c = fusion.Candidate("mem:1", cosine=0.4, confidence=0.9)
    assert keyed_signal(c, legacy) == (0.9, "confidence")
    # Confidence on under the default fusion ordering keys nothing.
    assert keyed_signal(c, GateConfig(confidence_enabled=True)) == (0.4, "cosine")


def test_pool_heuristic_and_single_arm_rrf_cap() -> None:
    assert pool_min_score(0) == 0.5 and pool_min_score(499) == pytest.approx(0.2, abs=1e-3)
    cfg = GateConfig()
    first = fusion.Candidate("mem:1", rrf=1 / 61, lists={"lexical"})
    second = fusion.Candidate("mem:2", rrf=1 / 62, lists={"lexical"})
    passed, blocked = apply_gate([first, second], pool=3, cfg=cfg)
    assert [c.ref for c in passed] == ["mem:1"] and [c.ref for c in blocked] == ["mem:2"]


def test_calibrated_gate_applies_only_to_its_own_signal() -> None:
    cfg = GateConfig(calibrated=(0.9, "rsf"))
    cos = fusion.Candidate("mem:1", cosine=0.45)
    passed, _ = apply_gate([cos], pool=1000, cfg=cfg)
    assert passed == [cos]  # cosine branch uses the heuristic (0.2 at this pool), not 0.9
    passed, _ = apply_gate([fusion.Candidate("mem:2", rsf=0.8)], pool=1000, cfg=cfg)
    assert passed == []


def test_unscored_rows_pass_only_on_a_large_pool() -> None:
    fill = fusion.Candidate("mem:1", lists={"fill"})
    assert apply_gate([fill], pool=99, cfg=GateConfig())[0] == []
    assert apply_gate([fill], pool=100, cfg=GateConfig())[0] == [fill]


def test_autocut_cuts_at_the_largest_gap() -> None:
    cands = [fusion.Candidate(f"mem:{i}") for i in range(6)]
    kept = autocut(cands, [0.9, 0.88, 0.86, 0.4, 0.39, 0.38], 0.15, 3)
    assert len(kept) == 3
    assert len(autocut(cands, [0.9, 0.89, 0.88, 0.87, 0.86, 0.85], 0.15, 3)) == 6


def test_episode_factor() -> None:
    assert episode_factor(0, 0.01, 0.5) == 1.0
    assert episode_factor(10, 0.01, 0.5) == pytest.approx(math.exp(-0.1))
    assert episode_factor(1000, 0.01, 0.5) == 0.5


def test_separation_threshold_moves_with_beta() -> None:
    rng = np.random.default_rng(0)
    null, pos = rng.normal(0.2, 0.08, 400), rng.normal(0.5, 0.1, 100)
    strict, _ = separation_threshold(null, pos, 2.0, 0.0)
    balanced, j = separation_threshold(null, pos, 1.0, 0.0)
    lenient, _ = separation_threshold(null, pos, 0.5, 0.0)
    assert lenient <= balanced <= strict and j > 0.5


def test_sampling_is_seeded() -> None:
    ids = list(range(1000))
    assert sample_ids(ids, "a:10", 50) == sample_ids(list(reversed(ids)), "a:10", 50)
    assert sample_ids(ids, "a:10", 50) != sample_ids(ids, "a:11", 50)


def test_chronological_merge_by_instant() -> None:
    msgs = [
        {"c": "utc-noon", "timestamp": "2026-01-01T12:00:00+00:00"},
        {"c": "tokyo-morning", "timestamp": "2026-01-01T20:30:00+09:00"},  # 11:30 UTC
        {"c": "naive", "timestamp": "2026-01-01 11:45:00"},  # read as UTC
        {"c": "missing"},
        {"c": "garbage", "timestamp": "yesterday"},
        {"c": "z", "timestamp": "2026-01-01T11:50:00Z"},
    ]
    assert [m["c"] for m in chronological(msgs)] == ["missing", "garbage", "tokyo-morning", "naive", "z", "utc-noon"]
    assert instant(None) is None and instant("") is None


def test_rrf_weights_move_the_order_not_the_gated_score() -> None:
    lists = {"vector": [("mem:1", 0.5)], "lexical": [("mem:2", 9.0)]}
    plain = fusion.rrf(lists)
    weighted = fusion.rrf(lists, weights={"lexical": 0.5})
    assert [c.ref for c in weighted] == ["mem:1", "mem:2"]
    assert {c.ref: c.rrf for c in plain} == {c.ref: c.rrf for c in weighted}
    # A lexical-only first-ranked row still clears the single-arm gate cap.
    [only] = fusion.rrf({"lexical": [("mem:9", 1.0)]}, weights={"lexical": 0.5})
    assert apply_gate([only], pool=5000, cfg=GateConfig())[0] == [only]


# -- evidence-weighted rrf (the default order) ------------------------------------------------------


def _evidence(lists: dict[str, list[tuple[str, float]]], shares: dict[str, float]) -> dict[str, dict[str, float]]:
    return {"vector": fusion.vector_evidence(lists.get("vector", [])), "lexical": fusion.lexical_evidence(shares)}


def test_evidence_votes_are_evidence_over_rank() -> None:
    lists = {"vector": [("mem:1", 0.6), ("mem:2", 0.5)], "lexical": [("mem:3", 7.0), ("mem:2", 3.0)]}
    out = fusion.rrf(lists, evidence=_evidence(lists, {"mem:3": 0.5, "mem:2": 0.9}))
    fused = {c.ref: c.fused for c in out}
    assert fused == pytest.approx({"mem:1": 0.6 / 1, "mem:2": 0.5 / 2 + 0.81 / 2, "mem:3": 0.25 / 1})
    # mem:2 is ranked by both retrievers and nearly all of the query's terms are in it
    assert [c.ref for c in out] == ["mem:2", "mem:1", "mem:3"]


def test_a_lexical_hit_holding_the_whole_query_outranks_a_weak_dense_top() -> None:
    # The identifier case: BM25's first row holds every rare query term; dense ranks look-alikes.
    lists = {"vector": [("mem:1", 0.45), ("mem:2", 0.44)], "lexical": [("mem:9", 12.0), ("mem:1", 1.0)]}
    strong = fusion.rrf(lists, evidence=_evidence(lists, {"mem:9": 1.0, "mem:1": 0.2}))
    assert strong[0].ref == "mem:9"
    # The same ranks with a row that holds a third of what the query says: the dense rows lead.
    weak = fusion.rrf(lists, evidence=_evidence(lists, {"mem:9": 0.33, "mem:1": 0.2}))
    assert [c.ref for c in weak] == ["mem:1", "mem:2", "mem:9"]
    # Classic RRF (k = 60, lexical weight 0.5) keeps the dense row first whatever the evidence.
    assert fusion.rrf(lists, weights={"lexical": 0.5})[0].ref == "mem:1"


def test_evidence_moves_the_order_never_the_gated_score() -> None:
    lists = {"vector": [("mem:1", 0.45)], "lexical": [("mem:9", 12.0), ("mem:1", 1.0)]}
    plain = fusion.rrf(lists)
    weighted = fusion.rrf(lists, evidence=_evidence(lists, {"mem:9": 1.0, "mem:1": 0.1}))
    assert {c.ref: c.rrf for c in plain} == {c.ref: c.rrf for c in weighted}
    assert {c.ref: c.cosine for c in plain} == {c.ref: c.cosine for c in weighted} == {"mem:1": 0.45, "mem:9": None}
    # the gate still keys a row with a cosine on it, and a lexical-only row on its plain rrf
    cfg = GateConfig()
    assert {c.ref: keyed_signal(c, cfg) for c in weighted} == {
        "mem:1": (0.45, "cosine"),
        "mem:9": (pytest.approx(1 / 61), "rrf"),
    }


def test_a_single_list_keeps_its_own_order_under_evidence() -> None:
    lexical = [("mem:1", 9.0), ("mem:2", 8.0), ("mem:3", 7.0)]
    shares = {"mem:1": 0.1, "mem:2": 1.0, "mem:3": 0.5}  # not monotone in rank
    out = fusion.rrf({"lexical": lexical}, evidence={"lexical": fusion.lexical_evidence(shares)})
    assert [c.ref for c in out] == ["mem:1", "mem:2", "mem:3"]


def test_evidence_defaults_weights_and_clamps() -> None:
    assert fusion.vector_evidence([("mem:1", 1.2), ("mem:2", -0.3), ("mem:3", 0.4)]) == {
        "mem:1": 1.0,
        "mem:2": 0.0,
        "mem:3": 0.4,
    }
    assert fusion.lexical_evidence({"mem:1": 0.5, "mem:2": 1.5, "mem:3": -1.0}) == {
        "mem:1": 0.25,
        "mem:2": 1.0,
        "mem:3": 0.0,
    }
    lists = {"vector": [("mem:1", 0.8)], "far": [("mem:2", 0.7)], "lexical": [("mem:3", 5.0), ("mem:4", 4.0)]}
    # a list the evidence does not name votes with evidence 1; a row it does not cover, with 0
    out = fusion.rrf(lists, weights={"lexical": 2.0}, evidence={"lexical": {"mem:3": 0.25}})
    assert {c.ref: c.fused for c in out} == pytest.approx({"mem:1": 1.0, "mem:2": 1.0, "mem:3": 0.5, "mem:4": 0.0})
    assert [c.ref for c in out][:2] == ["mem:2", "mem:1"]  # a tie: the newer ref first
