"""Context packages without a server (CONTRACTS A6): the token counter, word-prefix heads, the
budget's invariants, layers and types, and refill of exactly one anchor."""

from __future__ import annotations

import pytest

from memstream.api.query.context.package import build_package, expand, source_of
from memstream.api.services.embedding.onnx_backend import bert_uncased_tokenizer
from memstream.api.services.tokens import WORDPIECE, count_tokens, head_within
from tests.support.budgets import check_budget
from tests.support.corpora import corpus


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
