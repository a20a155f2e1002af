"""The token-budget check every context package must pass (CONTRACTS A6): the seed's fields, the
budget kept, and compressedTokens recounted from the payload itself."""

from __future__ import annotations

from typing import Any

from memstream.api.services.tokens import count_tokens

SEED_FIELDS = {"maxContextTokens", "estimatedRawTokens", "compressedTokens", "estimatedSavingsPercent",
               "budgetUsedPercent"}  # fmt: skip


def recount(body: dict[str, Any]) -> int:
    """compressedTokens from the payload itself: every summary line plus every anchor's fields."""
    lines = sum(count_tokens(line) for line in body["summary"])
    return lines + sum(count_tokens(f"{a['id']} {a['type']} {a['layer']}") for a in body["anchors"])


def check_budget(body: dict[str, Any], budget: int) -> None:
    tb = body["tokenBudget"]
    assert set(tb) == SEED_FIELDS
    assert tb["maxContextTokens"] == budget
    assert tb["compressedTokens"] <= budget
    assert tb["compressedTokens"] == recount(body)
    raw, compressed = tb["estimatedRawTokens"], tb["compressedTokens"]
    assert tb["estimatedSavingsPercent"] == (round((raw - compressed) / raw * 100, 1) if raw else 0.0)
    assert tb["budgetUsedPercent"] == round(compressed / budget * 100, 1)
