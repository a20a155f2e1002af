"""The vocabulary of declarations: normalised names, record refs, bounds and relation keys."""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Final

MAX_ITEMS: Final = 64
MAX_ALIASES: Final = 32
MAX_TEXT: Final = 256

_WHITESPACE = re.compile(r"\s+")
RECORD_REF = re.compile(r"^(mem|ep):(\d+)$")

# A relation endpoint or a mention target: ("entity", id), ("mem", id) or ("ep", id).
Node = tuple[str, int]
# What makes two relation declarations the same relation (CPersona's unique key).
RelKey = tuple[str, str, str, int, str, str, int, str]


def normalize(text: str) -> str:
    """NFKC, case-folded, whitespace collapsed to one space, trimmed: what lookups compare."""
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def parse_record_ref(value: object) -> tuple[str, int] | None:
    """``mem:<id>`` / ``ep:<id>`` → (kind, id); anything else → None (``mem:007`` is ``mem:7``)."""
    if not isinstance(value, str):
        return None
    m = RECORD_REF.match(value.strip())
    if not m:
        return None
    ident = int(m.group(2))
    return (m.group(1), ident) if ident < 2**63 else None


def declared_text(value: object) -> str | None:
    """A declared string within the length bound, stripped, or None."""
    if not isinstance(value, str):
        return None
    value = value.strip()
    if not value or len(value) > MAX_TEXT:
        return None
    return value


def visible_scopes(project: str, channel: str) -> list[tuple[str, str]]:
    """The scopes whose entities a writer in (project, channel) sees, most specific first."""
    projects = [project, ""] if project else [""]
    channels = [channel, ""] if channel else [""]
    return [(p, c) for p in projects for c in channels]


def relation_key(project: str, channel: str, r: dict[str, Any]) -> RelKey:
    s_kind, s_id = r["subject"]
    o_kind, o_id = r["object"]
    return (project, channel, s_kind, s_id, r["predicate"], o_kind, o_id, r.get("anchor_ref") or "")
