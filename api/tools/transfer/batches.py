"""The sizes transfers work in: one embedding call and one burst of commands per ``CHUNK`` records."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

CHUNK = 64  # records per embedding call and per burst of commands (the bus batches them)

Item = TypeVar("Item")


def chunks(items: list[Item], n: int) -> Iterator[list[Item]]:
    """``items`` in consecutive lists of ``n`` (the last one shorter)."""
    for i in range(0, len(items), n):
        yield items[i : i + n]
