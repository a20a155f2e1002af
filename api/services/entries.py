"""A log event as people and callers see it: the history entry (H1), shared by ``history``, the
CLI and the change feed (api/services/feed.py), so every place shows an event the same way."""

from __future__ import annotations

from typing import Any

from memstream.streams.events import decode
from memstream.streams.log.port import LogRecord


def _change(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload as a change description: vectors are summarised, never dumped."""
    out = dict(payload)
    emb = out.get("embedding")
    if isinstance(emb, dict):
        out["embedding"] = {"model": emb.get("model"), "dim": emb.get("dim")}
    return out


def history_entry(rec: LogRecord) -> dict[str, Any]:
    ev = decode(rec.value)
    return {
        "offset": rec.offset,
        "partition": rec.partition,
        "event_id": ev["id"],
        "type": ev["type"],
        "at": ev["occurred_at"],
        "actor": ev["actor"],
        "scope": ev["scope"],
        "command_id": ev["command_id"],
        "change": _change(ev["payload"]),
    }
