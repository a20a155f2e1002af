"""How log records look to people and callers: history entries (H1) and audit entries (H4)."""

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
