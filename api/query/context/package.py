"""Token-budgeted context packages (CONTRACTS A6, seed 001): pure functions that pack recalled
sources into summary lines and expandable anchors within a token budget.
See docs/context-packets.md, "A6".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

# A summary line with room for fewer content tokens than this is not worth its anchor.
MIN_LINE_TOKENS: Final = 4

Layer = Literal["L1", "L2", "L3"]


class TokenCounter(Protocol):
    """How a budget is counted: the caller's tokenizer (api/services/tokens.py)."""

    def count(self, text: str) -> int:
        """Tokens in ``text``."""
        ...

    def head_within(self, text: str, max_tokens: int) -> tuple[str, int]:
        """The longest prefix of whole words of ``text`` within ``max_tokens``, and its count."""
        ...


@dataclass(frozen=True, slots=True)
class Source:
    """One recalled record, as the package sees it."""

    ref: str
    type: Literal["memory", "episode"]
    layer: Layer
    text: str


def source_of(ref: str, text: str) -> Source:
    """Memories are L1, episodes L3 (see the module docstring)."""
    if ref.startswith("ep:"):
        return Source(ref, "episode", "L3", text)
    return Source(ref, "memory", "L1", text)


def anchor(src: Source) -> dict[str, str]:
    return {"id": src.ref, "type": src.type, "layer": src.layer}


def anchor_tokens(src: Source, tokens: TokenCounter) -> int:
    """What an anchor costs in the payload: its three fields as text."""
    return tokens.count(f"{src.ref} {src.type} {src.layer}")


def line_prefix(src: Source) -> str:
    return f"[{src.ref}] "


def token_budget(max_tokens: int, raw: int, compressed: int) -> dict[str, Any]:
    """Seed 001's ``tokenBudget``: savings are (raw - compressed) / raw, used is compressed / max."""
    return {
        "maxContextTokens": max_tokens,
        "estimatedRawTokens": raw,
        "compressedTokens": compressed,
        "estimatedSavingsPercent": round((raw - compressed) / raw * 100, 1) if raw > 0 else 0.0,
        "budgetUsedPercent": round(compressed / max_tokens * 100, 1),
    }


def build_package(sources: Sequence[Source], max_tokens: int, line_tokens: int, tokens: TokenCounter) -> dict[str, Any]:
    """Pack ``sources`` (best first) under ``max_tokens``: each gets a summary line of at most
    ``line_tokens`` content tokens and an anchor, until the next would not fit. Raw is what
    reading every source in full would cost."""
    raw = sum(tokens.count(s.text) for s in sources)
    summary: list[str] = []
    anchors: list[dict[str, str]] = []
    used = 0
    cut = False
    for src in sources:
        prefix = line_prefix(src)
        overhead = anchor_tokens(src, tokens) + tokens.count(prefix)
        room = min(line_tokens, max_tokens - used - overhead)
        if room < MIN_LINE_TOKENS:
            cut = True
            break
        head, _ = tokens.head_within(src.text, room)
        if not head:
            continue  # a first word longer than the room: skip it, a later source may fit
        line = prefix + head
        cost = tokens.count(line) + anchor_tokens(src, tokens)
        summary.append(line)
        anchors.append(anchor(src))
        used += cost
    return {
        "summary": summary,
        "anchors": anchors,
        "tokenBudget": token_budget(max_tokens, raw, used),
        "candidates": len(sources),
        "truncated": cut or len(anchors) < len(sources),
    }


def expand(src: Source, max_tokens: int, tokens: TokenCounter) -> dict[str, Any]:
    """Refill: exactly this anchor, its whole content (cut at a word only past the budget)."""
    overhead = anchor_tokens(src, tokens)
    head, n = tokens.head_within(src.text, max_tokens - overhead)
    return {
        "anchorId": src.ref,
        "summary": [head],
        "anchors": [anchor(src)],
        "tokenBudget": token_budget(max_tokens, tokens.count(src.text), n + overhead),
        "truncated": head != src.text,
    }
