"""One agent's history, folded by an adapter into a view of its own and kept current.

The adapters find their records by folding the agent's events (the ``history`` tool), not by
asking the server for a lookup it does not have: the fold is read once, then each call reads
only the events appended since, so a key or a session costs one small read per call and sees
every other process's writes (docs/integrations.md).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any, Protocol

from ..client.results import Event
from .calls import AsyncCalls

PAGE = 10_000  # the most events ``history`` answers in one call


class Fold(Protocol):
    def apply(self, event: Event) -> None: ...


class Feed:
    """A fold of one agent's events from offset 0, applied once each even when several
    callers (tasks or threads) catch up at the same time."""

    def __init__(self, agent_id: str, fold: Fold, *, page: int = PAGE) -> None:
        self.agent_id = agent_id
        self.fold = fold
        self.page = page
        self.next_offset = 0
        self._lock = threading.Lock()

    async def catch_up(self, calls: AsyncCalls) -> None:
        while True:
            answer = await calls.history(agent_id=self.agent_id, since_offset=self.next_offset, limit=self.page)
            with self._lock:
                for event in answer.events:
                    if event.offset >= self.next_offset:
                        self.fold.apply(event)
                        self.next_offset = event.offset + 1
            if len(answer.events) < self.page:
                return


def event_time(event: Event) -> datetime:
    """When the event happened (its ``at``), timezone-aware."""
    if event.at is None:
        return datetime.now(UTC)
    when = datetime.fromisoformat(event.at)
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def deleted_ids(event: Event) -> list[int]:
    """The memory ids an event removes: a delete, or an agent's data deleted."""
    change: dict[str, Any] = event.change
    if event.type == "memory.deleted" and isinstance(change.get("id"), int):
        return [change["id"]]
    if event.type == "agent_data.deleted":
        return [i for i in change.get("memory_ids") or [] if isinstance(i, int)]
    return []


def marker(event: Event, name: str) -> dict[str, Any] | None:
    """The adapter's own mark in a stored memory's metadata (``{name: {...}}``), if any."""
    metadata = event.change.get("metadata")
    mark = metadata.get(name) if isinstance(metadata, dict) else None
    return mark if isinstance(mark, dict) else None
