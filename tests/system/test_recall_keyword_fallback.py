"""The keyword channel runs only when the lexical vote needs it (its cost grows with the
agent's rows; BM25 alone fills the vote for most queries), and then it still fills the vote."""

from __future__ import annotations

from typing import Any

import pytest

from memstream.api.query.recall.pipeline import RecallRequest, run_recall
from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import Settings
from memstream.projections.scope import ScopeFilter
from tests.support.calls import call
from tests.support.embedders import HashEmbedder


def _spy(engine: EmbeddedEngine, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    asked: list[str] = []
    real = engine.lexical.keyword_shares

    def spy(scope: Any, query: str, k: int) -> Any:
        asked.append(query)
        return real(scope, query, k)

    monkeypatch.setattr(engine.lexical, "keyword_shares", spy)
    return asked


async def test_keyword_channel_runs_only_when_bm25_leaves_the_vote_short(
    engine: EmbeddedEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(120):  # a pool large enough for a lexical-only row to pass the gate
        await call(engine, "store", agent_id="a", content=f"the harbour crane number {i} lifts containers")
    ident = await call(engine, "store", agent_id="a", content="rotate the token tok_9f3ab2c7 before friday")
    asked = _spy(engine, monkeypatch)

    full = await call(engine, "recall", agent_id="a", query="harbour crane containers", limit=5)
    assert len(full["messages"]) == 5
    assert asked == []  # BM25 filled the vote: no substring scan

    # Only a substring of the identifier: BM25 has no token for it, the keyword channel does,
    # and its row fills the lexical vote.
    await call(engine, "recall", agent_id="a", query="9f3ab2", limit=5)
    assert asked == ["9f3ab2"]
    got = run_recall(engine, engine.settings, RecallRequest(ScopeFilter("a"), "9f3ab2", 5), None, None)
    assert got.lists["lexical"] == [(f"mem:{ident['id']}", 1.0)]
    assert [c.ref for c in got.candidates] == [f"mem:{ident['id']}"]


async def test_cascade_always_consults_the_keyword_channel(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = EmbeddedEngine(settings.model_copy(update={"recall_mode": "cascade"}), embedder=HashEmbedder())
    await engine.start()
    try:
        for i in range(12):
            await call(engine, "store", agent_id="a", content=f"the harbour crane number {i} lifts containers")
        asked = _spy(engine, monkeypatch)
        await call(engine, "recall", agent_id="a", query="harbour crane containers", limit=5)
        assert asked == ["harbour crane containers"]
    finally:
        await engine.close()
