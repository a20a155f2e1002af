"""Logging: plain text or JSON lines, and the one line per tool call that says who called what
and how it went, never what was sent. See docs/operations.md, "Logs".
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import UTC, datetime
from typing import IO, Any

import orjson

CALLS = logging.getLogger("memstream.calls")

# Attributes every LogRecord has; anything else was passed in ``extra`` and goes out as a field.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the record's extra fields, and the
    exception (type and text) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc_type"] = record.exc_info[0].__name__ if record.exc_info[0] else None
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def configure(level: str = "INFO", fmt: str | None = None, stream: IO[str] | None = None) -> None:
    """Set up the root logger once for a process (the CLI calls this)."""
    fmt = (fmt or os.environ.get("MEMSTREAM_LOG_FORMAT") or "text").lower()
    if fmt not in ("text", "json"):
        raise ValueError(f"MEMSTREAM_LOG_FORMAT must be text or json, not {fmt!r}")
    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, "_memstream", False)]
    if len(ours) == len(root.handlers):  # as logging.basicConfig: leave a host's own set-up alone
        for old in ours:
            root.removeHandler(old)
        handler = logging.StreamHandler(stream or sys.stderr)
        handler._memstream = True  # type: ignore[attr-defined]
        if fmt == "json":
            handler.setFormatter(JsonFormatter())
        else:
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(level.upper())
    calls = os.environ.get("MEMSTREAM_LOG_CALLS", "1" if fmt == "json" else "0")
    CALLS.setLevel(logging.INFO if calls not in ("0", "false", "no", "") else logging.WARNING)


def log_call(
    tool: str, face: str, client_id: str, agent: str | None, seconds: float, code: str | None, writes: bool
) -> None:
    """The line for one finished call (cheap when call lines are off: one level check)."""
    if not CALLS.isEnabledFor(logging.INFO):
        return
    CALLS.info(
        "%s %s",
        tool,
        "ok" if code is None else code,
        extra={
            "tool": tool,
            "face": face,
            "client_id": client_id,
            "agent": agent,
            "duration_ms": round(seconds * 1000, 3),
            "outcome": "ok" if code is None else "error",
            "error_code": code,
            "writes": writes,
        },
    )
