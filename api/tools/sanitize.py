"""Input normalisation shared by the write tools, matching CPersona 2.6 where callers can see it.

Content is stripped and ``[Memory from …]`` annotations (which recall injects and agents echo
back) are removed before dedup, so an echoed memory is recognised as the same text. Overlong
content is cut to the cap and reported (``truncated: true``), as CPersona does; invalid UTF-8
and unparseable timestamps are refused with a clear reason instead of being stored.
"""

from __future__ import annotations

import re
from typing import Any

# The tools' input errors and time parsing live with the services (point-in-time reads use
# them too); the tools take them from here, with the rest of their input rules.
from memstream.api.services.inputs import InputError, check_utf8, parse_timestamp

__all__ = [
    "SOURCE_TYPES",
    "InputError",
    "cap",
    "check_size",
    "check_utf8",
    "clean_text",
    "normalize_source",
    "parse_timestamp",
]

_ANNOTATION = re.compile(r"\[Memory from [^\]]*\]")

SOURCE_TYPES = {
    "user": "User",
    "agent": "Agent",
    "system": "System",
    "ai": "Agent",
    "assistant": "Agent",
    "session": "System",
}


def check_size(value: str, what: str, limit: int) -> None:
    if len(value) > limit:
        raise InputError(f"{what} too large ({len(value)} chars, max {limit})")


def clean_text(text: str) -> str:
    """Strip annotations and surrounding whitespace."""
    return _ANNOTATION.sub("", text).strip()


def cap(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit], True)


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
