"""Command ids derived from what a transfer moves, so a re-run decides every command as a retry (W9)."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import TypedDict

import orjson

from memstream.streams.events import Actor, Scope


class Envelope(TypedDict):
    """The fields every command carries besides its own: its id, scope, actor and arrival."""

    command_id: str
    scope: Scope
    actor: Actor
    received_at: datetime


def command_seed(*parts: object) -> str:
    """A stable digest of ``parts`` (JSON with sorted keys), the variable part of a command id."""
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()
