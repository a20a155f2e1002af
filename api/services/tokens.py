"""Token counts for budgets (seed 001's ``tokenBudget``), from the offline WordPiece tokenizer
the default embedder uses, so budgets are counted, not estimated. Shared by every budgeted
answer. See docs/context-packets.md, "Tokens".
"""

from __future__ import annotations

from typing import Final

from memstream.api.services.embedding.onnx_backend import bert_uncased_tokenizer

TOKENIZER: Final = "wordpiece-bert-base-uncased"


def count_tokens(text: str) -> int:
    """WordPiece tokens in ``text``, without the [CLS]/[SEP] a model input would add."""
    if not text:
        return 0
    return len(bert_uncased_tokenizer().encode(text)) - 2


def head_within(text: str, max_tokens: int) -> tuple[str, int]:
    """The longest prefix of whole whitespace-separated words of ``text`` that fits in
    ``max_tokens``, and its count. Cutting at words keeps the caller's spelling and casing
    (the tokenizer lowercases), and a word is never split into a dangling sub-word."""
    if max_tokens <= 0 or not text:
        return "", 0
    whole = count_tokens(text)
    if whole <= max_tokens:
        return text, whole
    words = text.split()
    kept: list[str] = []
    used = 0
    for word in words:
        cost = count_tokens(word)
        if used + cost > max_tokens:
            break
        kept.append(word)
        used += cost
    head = " ".join(kept)
    # Word-by-word counts add up to the whole's count (WordPiece splits at whitespace first),
    # but recount the joined text so the figure reported is exactly the text's.
    return head, count_tokens(head)


class WordPieceTokens:
    """The token counter budgets take (``TokenCounter`` of api/query/context/package.py)."""

    name: Final = TOKENIZER

    def count(self, text: str) -> int:
        return count_tokens(text)

    def head_within(self, text: str, max_tokens: int) -> tuple[str, int]:
        return head_within(text, max_tokens)


WORDPIECE: Final = WordPieceTokens()
