"""Bad input and the ISO-8601 times callers send: shared by the tools and the point-in-time reads."""

from __future__ import annotations

from datetime import UTC, datetime


class InputError(ValueError):
    """Bad input: the message is shown to the caller as the failure's reason."""


def check_utf8(value: str, what: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{what} is not valid UTF-8 (unpaired surrogate at position {exc.start})") from None


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
