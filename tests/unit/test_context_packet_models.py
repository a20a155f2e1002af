"""Context packets' models and judge (CONTRACTS A7) without a server: what each miss class must
and must not carry, the judge's reasons in order, superseded refs from every provider."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from memstream.api.query.context.packet import (
    Delivery,
    Hit,
    KnowBlock,
    MissBlock,
    Packet,
    Recalled,
    judge,
    superseded_refs,
)

NOW = datetime(2026, 6, 1, tzinfo=UTC)


@pytest.mark.parametrize("reason", ["abstain", "sparse", "no_match"])
def test_escalate_class_needs_escalate_to_and_no_refresh_targets(reason: str) -> None:
    ok = MissBlock(reason=reason, escalate_to=["rag"])  # type: ignore[arg-type]
    assert ok.do_not_answer_from_memory is True and ok.refresh_targets == []
    with pytest.raises(ValidationError, match="escalate-class"):
        MissBlock(reason=reason)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="escalate-class"):
        MissBlock(reason=reason, escalate_to=["rag"], refresh_targets=["mem:1"])  # type: ignore[arg-type]


@pytest.mark.parametrize("reason", ["stale", "superseded"])
def test_refresh_class_needs_refresh_targets_and_no_escalate_to(reason: str) -> None:
    ok = MissBlock(reason=reason, refresh_targets=["mem:1"])  # type: ignore[arg-type]
    assert ok.escalate_to == []
    with pytest.raises(ValidationError, match="refresh-class"):
        MissBlock(reason=reason)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="refresh-class"):
        MissBlock(reason=reason, refresh_targets=["mem:1"], escalate_to=["web"])  # type: ignore[arg-type]


def test_miss_models_refuse_what_the_contract_forbids() -> None:
    with pytest.raises(ValidationError):
        MissBlock(reason="stale", refresh_targets=["mem:1"], do_not_answer_from_memory=False)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        MissBlock(reason="cold", refresh_targets=["mem:1"])  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        MissBlock(reason="no_match", escalate_to=["phone_a_friend"])  # type: ignore[list-item]
    delivery = Delivery(pool_size=0, delivered_count=0, delivered_refs=[])
    know = KnowBlock(top_score=1.0, score_gap=0.0, top_ref="mem:1", signal="cosine")
    miss = MissBlock(reason="no_match", escalate_to=["web"])
    common: dict[str, Any] = {
        "query": "q",
        "verified": [],
        "stale_risk": [],
        "refresh_targets": [],
        "delivery": delivery,
    }
    with pytest.raises(ValidationError, match="exactly one"):
        Packet(know=know, miss=miss, **common)
    with pytest.raises(ValidationError, match="exactly one"):
        Packet(**common)
    assert set(Packet(miss=miss, **common).wire()) == {"miss", "query", "verified", "stale_risk", "refresh_targets",
                                                        "delivery"}  # fmt: skip


def hit(ref: str, score: float, age_s: float = 0.0, **kw: Any) -> Hit:
    return Hit(ref=ref, content=ref, score=score, signal="cosine", version=1,
               last_verified_at=NOW - timedelta(seconds=age_s), **kw)  # fmt: skip


def verdict(hits: list[Hit], pool: int = 10, lexical: bool = True, min_pool: int = 3) -> dict[str, Any]:
    return judge("q", Recalled(hits, pool, lexical), now=NOW, stale_after_s=100, min_pool=min_pool).wire()


def test_judge_reasons_in_order() -> None:
    assert verdict([], pool=0)["miss"]["reason"] == "no_match"
    assert verdict([], lexical=False)["miss"]["reason"] == "no_match"
    assert verdict([], lexical=True)["miss"]["reason"] == "abstain"
    assert verdict([hit("mem:1", 0.9)], pool=2)["miss"]["reason"] == "sparse"
    assert verdict([hit("mem:1", 0.9)], pool=2, min_pool=2)["know"]["top_ref"] == "mem:1"
    sup = verdict([hit("mem:1", 0.9, age_s=500, superseded_by=("mem:7",)), hit("mem:2", 0.5, age_s=500)])
    assert sup["miss"]["reason"] == "superseded" and sup["miss"]["refresh_targets"] == ["mem:7"]
    stale = verdict([hit("mem:1", 0.9, age_s=101), hit("mem:2", 0.8), hit("mem:3", 0.4, age_s=200)])
    assert stale["miss"]["reason"] == "stale" and stale["miss"]["refresh_targets"] == ["mem:1", "mem:3"]
    # Only the best match decides: a stale runner-up leaves a know, flagged in stale_risk.
    know = verdict([hit("mem:1", 0.9), hit("mem:2", 0.6, age_s=101)])
    assert "miss" not in know and know["know"] == {
        "found": True, "top_score": 0.9, "score_gap": 0.3, "top_ref": "mem:1", "signal": "cosine"}  # fmt: skip
    assert [i["ref"] for i in know["verified"]] == ["mem:1"]
    assert [(i["ref"], i["status"]) for i in know["stale_risk"]] == [("mem:2", "stale_risk")]
    last = (NOW - timedelta(seconds=101)).isoformat()
    assert know["refresh_targets"] == [
        {
            "target_kind": "memory",
            "source_id": "mem:2",
            "priority": round(0.6 / 0.9, 4),
            "reason": f"fresh verification required: last verified {last}",
        }
    ]


def test_every_miss_says_do_not_answer_and_every_packet_has_exactly_one_branch() -> None:
    cases = [([], 0, False), ([], 5, True), ([hit("mem:1", 1.0)], 1, True),
             ([hit("mem:1", 1.0, superseded_by=("mem:2",))], 5, True), ([hit("mem:1", 1.0, age_s=1e6)], 5, True),
             ([hit("mem:1", 1.0)], 5, True)]  # fmt: skip
    for hits, pool, lexical in cases:
        body = verdict(hits, pool, lexical)
        assert ("know" in body) != ("miss" in body), body
        if "miss" in body:
            assert body["miss"]["do_not_answer_from_memory"] is True


def test_superseded_refs_merges_every_provider() -> None:
    a = {"mem:1": ["mem:5"]}
    b = {"mem:1": ["mem:5", "mem:9"], "mem:2": ["mem:3"]}
    providers = [lambda agent, refs: a, lambda agent, refs: {r: v for r, v in b.items() if r in refs}]
    assert superseded_refs(providers, "x", ["mem:1", "mem:2"]) == {"mem:1": ["mem:5", "mem:9"], "mem:2": ["mem:3"]}
    assert superseded_refs(providers, "x", ["mem:4"]) == {"mem:1": ["mem:5"]}
