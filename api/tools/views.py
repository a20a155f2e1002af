"""How log records look to people and callers: history entries (H1, api/services/entries.py, which
the change feed shares) and audit entries (H4)."""

from __future__ import annotations

from typing import Any

from memstream.api.services.entries import history_entry
from memstream.streams.events import decode
from memstream.streams.log.port import LogRecord

__all__ = ["audit_entry", "history_entry"]


def audit_entry(rec: LogRecord) -> dict[str, Any]:
    raw = decode(rec.value)
    return {
        "audit_offset": rec.offset,
        "kind": raw["kind"],
        "tool": raw["command"],
        "at": raw["occurred_at"],
        "who": raw["actor"],
        "scope": raw["scope"],
        "command_id": raw["command_id"],
        "why": raw["outcome"].get("reason") or raw["outcome"].get("error"),
        "outcome": raw["outcome"],
        "request": raw.get("request", {}),
    }
