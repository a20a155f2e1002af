"""The items of one agent, folded from its events: (namespace, key) to memory and value."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...client.results import Event
from ..codec import decode
from ..feed import deleted_ids, event_time, marker

MARK = "langgraph"  # metadata key that makes a memory a LangGraph item: {"namespace", "key"}


@dataclass
class Entry:
    memory_id: int
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    content: str
    created_at: datetime
    updated_at: datetime

    def copy_value(self) -> dict[str, Any]:
        """The value, deep-copied so a caller's edits never reach the index."""
        return copy.deepcopy(self.value)


def _value(content: Any) -> dict[str, Any] | None:
    if not isinstance(content, str):
        return None
    try:
        value = decode(content)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class ItemIndex:
    """Live items only. Memories without the mark, or whose content is not a JSON object,
    are someone else's and are left out."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[tuple[str, ...], str], Entry] = {}
        self.by_id: dict[int, Entry] = {}

    def apply(self, event: Event) -> None:
        change = event.change
        if event.type == "memory.stored":
            mark = marker(event, MARK)
            ns, key, mid = (mark or {}).get("namespace"), (mark or {}).get("key"), change.get("id")
            value = _value(change.get("content"))
            if not (isinstance(ns, list) and all(isinstance(x, str) for x in ns) and isinstance(key, str)):
                return
            if value is None or not isinstance(mid, int):
                return
            when = event_time(event)
            entry = Entry(mid, tuple(ns), key, value, change["content"], when, when)
            old = self.by_key.get((entry.namespace, key))
            if old is not None:
                self.by_id.pop(old.memory_id, None)
            self.by_key[(entry.namespace, key)] = entry
            self.by_id[mid] = entry
        elif event.type == "memory.updated":
            found = self.by_id.get(change.get("id", -1))
            value = _value(change.get("content"))
            if found is not None and value is not None:
                found.value, found.content, found.updated_at = value, change["content"], event_time(event)
        for mid in deleted_ids(event):
            gone = self.by_id.pop(mid, None)
            if gone is not None and self.by_key.get((gone.namespace, gone.key)) is gone:
                del self.by_key[(gone.namespace, gone.key)]

    def get(self, namespace: tuple[str, ...], key: str) -> Entry | None:
        return self.by_key.get((namespace, key))

    def under(self, prefix: tuple[str, ...]) -> list[Entry]:
        return [e for e in self.by_key.values() if e.namespace[: len(prefix)] == prefix]
