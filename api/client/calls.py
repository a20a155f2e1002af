"""What every call does before it is sent, whatever carries it: defaults left out, a command id
for every write that takes one (so a retry cannot apply it twice), and whether it may be retried."""

from __future__ import annotations

import uuid
from typing import Any

from .methods import COMMAND_ID, DEFAULTS, WRITES


def _is_default(value: Any, default: Any) -> bool:
    return value is default or (type(value) is type(default) and value == default)


def prepare(tool: str, args: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The arguments to send, and whether sending them twice is harmless (a read, or a write
    under a command id the server remembers: W9). A tool this client does not know (one newer
    than it, through ``call``) counts as a write: retried only under a command id of the caller's."""
    defaults = DEFAULTS.get(tool, {})
    missing = object()
    out = {k: v for k, v in args.items() if not _is_default(v, defaults.get(k, missing))}
    if tool in COMMAND_ID and out.get("command_id") is None:
        out["command_id"] = uuid.uuid4().hex
    known_read = tool in DEFAULTS and tool not in WRITES
    return out, known_read or "command_id" in out
