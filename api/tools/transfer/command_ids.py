"""Command ids derived from what a transfer moves, so a re-run decides every command as a retry (W9)."""

from __future__ import annotations

import hashlib

import orjson


def command_seed(*parts: object) -> str:
    """A stable digest of ``parts`` (JSON with sorted keys), the variable part of a command id."""
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()
