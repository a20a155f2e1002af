"""Input normalisation shared by the write tools, matching CPersona 2.6 where callers can see it.

Content is stripped and ``[Memory from …]`` annotations (which recall injects and agents echo
back) are removed before dedup, so an echoed memory is recognised as the same text. Overlong
content is cut to the cap and reported (``truncated: true``), as CPersona does; invalid UTF-8
and unparseable timestamps are refused with a clear reason instead of being stored.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

_ANNOTATION = re.compile(r"\[Memory from [^\]]*\]")

SOURCE_TYPES = {
    "user": "User",
    "agent": "Agent",
    "system": "System",
    "ai": "Agent",
    "assistant": "Agent",
    "session": "System",
}


class InputError(ValueError):
    """Bad input: the message is shown to the caller as the failure's reason."""


def check_utf8(value: str, what: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{what} is not valid UTF-8 (unpaired surrogate at position {exc.start})") from None


def check_size(value: str, what: str, limit: int) -> None:
    if len(value) > limit:
        raise InputError(f"{what} too large ({len(value)} chars, max {limit})")


def clean_text(text: str) -> str:
    """Strip annotations and surrounding whitespace."""
    return _ANNOTATION.sub("", text).strip()


def cap(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit], True)


def parse_timestamp(raw: str | None, what: str = "timestamp") -> datetime | None:
    """ISO-8601; a naive stamp is UTC; anything else is refused rather than stored as-is."""
    if raw is None or raw == "":
        return None
    check_utf8(raw, what)
    try:
        t = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"{what} {raw[:64]!r} is not an ISO-8601 time (e.g. 2026-07-22T12:00:00+00:00)") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def normalize_source(raw: Any, agent_id: str) -> dict[str, Any]:
    """``{type, id, name}``; default is the writing agent; a bare word or null is accepted too."""
    if raw is None:
        return {"type": "Agent", "id": agent_id, "name": ""}
    if isinstance(raw, str):
        kind = SOURCE_TYPES.get(raw.strip().lower())
        if kind is None:
            raise InputError(f"source {raw[:40]!r} is not one of User, Agent, System")
        return {"type": kind, "id": agent_id if kind == "Agent" else "", "name": ""}
    if not isinstance(raw, dict):
        raise InputError("source must be an object {type, id, name}")
    if not raw:
        return {}
    out: dict[str, Any] = {}
    kind = raw.get("type")
    if kind is not None:
        if not isinstance(kind, str) or kind.strip().lower() not in SOURCE_TYPES:
            raise InputError(f"source.type {kind!r} is not one of User, Agent, System")
        out["type"] = SOURCE_TYPES[kind.strip().lower()]
    for key in ("id", "name"):
        value = raw.get(key, "")
        if not isinstance(value, str):
            raise InputError(f"source.{key} must be a string")
        check_utf8(value, f"source.{key}")
        out[key] = value
    extra = set(raw) - {"type", "id", "name"}
    if extra:
        raise InputError(f"source has unknown fields: {', '.join(sorted(extra))}")
    return out
