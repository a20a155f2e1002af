"""Reading search hits: the refs of (ref, score) pairs, in order."""

from __future__ import annotations


def refs(hits: list[tuple[str, float]]) -> list[str]:
    return [r for r, _ in hits]
