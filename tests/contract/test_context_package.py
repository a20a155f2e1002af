"""Token-budgeted context packages (CONTRACTS A6, seed 001): the budget's invariants, refill of
exactly one anchor, the token counter, through both faces and POST /context/package."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from memstream.api.query.context.package import build_package, expand, source_of
from memstream.api.services.embedding.onnx_backend import bert_uncased_tokenizer
from memstream.api.services.tokens import WORDPIECE, count_tokens, head_within
from tests.support.corpora import corpus
from tests.support.servers import ServerThread

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


# -- the token counter ---------------------------------------------------------------------------


def test_count_tokens_is_the_wordpiece_count() -> None:
    tok = bert_uncased_tokenizer()
    for text in ("", "hello", "Tokenization of unbelievably long words", "0xEF0101 — 東京 ✓", "a  b\n\tc"):
        assert count_tokens(text) == (len(tok.encode(text)) - 2 if text else 0)
    assert count_tokens("unbelievably") > 1  # sub-words, not words


@pytest.mark.parametrize("limit", [0, 1, 3, 7, 20, 1000])
def test_head_within_is_a_word_prefix_within_the_limit(limit: int) -> None:
    text = "The quarterly report deadlines for finance moved, again, to the first Friday of each month."
    head, n = head_within(text, limit)
    assert n == count_tokens(head) <= limit
    assert text.startswith(head)
    assert head == text or not head or text[len(head)] == " "
    words = text.split()
    if head != text:  # maximal: the next word would not have fit
        nxt = " ".join(words[: len(head.split()) + 1])
        assert count_tokens(nxt) > limit


# -- the package (pure) --------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [16, 24, 40, 75, 200, 5000])
def test_package_stays_within_budget(budget: int) -> None:
    sources = [source_of(f"mem:{i}", t) for i, t in enumerate(corpus(12))] + [source_of("ep:99", "an episode")]
    body = build_package(sources, budget, line_tokens=12, tokens=WORDPIECE)
    check_budget(body, budget)
    assert len(body["summary"]) == len(body["anchors"])
    for line, anchor in zip(body["summary"], body["anchors"], strict=True):
        assert line.startswith(f"[{anchor['id']}] ")
    assert [a["id"] for a in body["anchors"]] == [s.ref for s in sources][: len(body["anchors"])]  # best first
    assert body["truncated"] == (len(body["anchors"]) < len(sources))
    assert body["tokenBudget"]["estimatedRawTokens"] == sum(count_tokens(s.text) for s in sources)


def test_layers_and_types() -> None:
    body = build_package([source_of("mem:1", "a memory"), source_of("ep:2", "an episode")], 500, 48, WORDPIECE)
    assert body["anchors"] == [{"id": "mem:1", "type": "memory", "layer": "L1"},
                               {"id": "ep:2", "type": "episode", "layer": "L3"}]  # fmt: skip


def test_expand_is_exactly_one_anchor_whole_or_cut_at_the_budget() -> None:
    text = " ".join(corpus(8))
    src = source_of("mem:5", text)
    whole = expand(src, 5000, WORDPIECE)
    assert whole["anchors"] == [{"id": "mem:5", "type": "memory", "layer": "L1"}]
    assert whole["summary"] == [text] and whole["truncated"] is False
    check_budget(whole, 5000)
    assert whole["tokenBudget"]["estimatedRawTokens"] == count_tokens(text)
    cut = expand(src, 30, WORDPIECE)
    check_budget(cut, 30)
    assert cut["truncated"] is True and text.startswith(cut["summary"][0])


# -- through the faces ---------------------------------------------------------------------------


async def _fill(face: Any, agent: str) -> list[str]:
    refs = []
    for t in corpus(36):
        r = await face.call("store", {"agent_id": agent, "content": t})
        refs.append(f"mem:{r['id']}")
    return refs


async def test_a6_package_preview_and_refill(face: Any) -> None:
    await _fill(face, "pk")
    query = "printer jams third floor glossy paper"
    recalled = await face.call("recall", {"agent_id": "pk", "query": query, "limit": 10})
    best_first = [m["ref"] for m in reversed(recalled["messages"])]
    for budget in (20, 60, 400):
        body = await face.call("context_package", {"agent_id": "pk", "query": query, "maxContextTokens": budget})
        check_budget(body, budget)
        ids = [a["id"] for a in body["anchors"]]
        assert ids and ids == best_first[: len(ids)]  # built on recall, best first
    default = await face.call("context_package", {"agent_id": "pk", "query": query})
    assert default["tokenBudget"]["maxContextTokens"] == 2000 and default["tokenizer"]

    target = best_first[1]
    refill = await face.call("context_package", {"agent_id": "pk", "anchorId": target})
    content = (await face.call("get_contents", {"agent_id": "pk", "refs": [target]}))["items"][0]["content"]
    assert refill["anchorId"] == target and [a["id"] for a in refill["anchors"]] == [target]
    assert refill["summary"] == [content] and refill["truncated"] is False
    check_budget(refill, 2000)


async def test_a6_bad_calls_are_refused(face: Any) -> None:
    ref = (await face.call("store", {"agent_id": "pkb", "content": "one memory"}))["id"]
    cases = [
        ({"agent_id": "pkb"}, "query"),
        ({"agent_id": "pkb", "query": "  "}, "query is empty"),
        ({"agent_id": "pkb", "query": "one", "anchorId": f"mem:{ref}"}, "not both"),
        ({"agent_id": "pkb", "anchorId": "mem:123456"}, "not found"),
        ({"agent_id": "other", "anchorId": f"mem:{ref}"}, "not found"),
        ({"agent_id": "pkb", "anchorId": "file:x"}, "not a ref"),
        ({"agent_id": "pkb", "query": "one", "maxContextTokens": 3}, "maxContextTokens"),
    ]
    for args, words in cases:
        r = await face.call("context_package", args)
        assert r["ok"] is False and words in r["error"], (args, r)


async def test_package_route(http_server: ServerThread) -> None:
    async with httpx.AsyncClient(base_url=http_server.url) as client:
        await client.post("/v1/tools/store", json={"agent_id": "rt", "content": "the vpn certificate expires soon"})
        args = {"agent_id": "rt", "query": "vpn certificate", "maxContextTokens": 64}
        via_route = await client.post("/context/package", json=args)
        via_tool = await client.post("/v1/tools/context_package", json=args)
        assert via_route.status_code == 200 and via_route.json() == via_tool.json()
        check_budget(via_route.json(), 64)
        bad = await client.post("/context/package", json={"agent_id": "rt", "query": " "})
        assert bad.status_code == 400
        missing = await client.post("/context/package", json={"agent_id": "rt", "anchorId": "mem:424242"})
        assert missing.status_code == 404
