"""Pieces every tool module shares: argument types, scope/actor construction, submitting."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StrictBool, StrictInt, StrictStr

from memstream.api.tools.registry import Caller, ToolArgs
from memstream.streams.events import Actor, Scope, new_id, utcnow

# Every integer a tool takes fits a signed 64-bit integer (the log's columns hold no more;
# dispatch refuses any other number in the arguments by name).
MAX_INT = 2**63 - 1
Id = Annotated[StrictInt, Field(ge=0, le=MAX_INT)]
Name = Annotated[StrictStr, Field(max_length=256)]
SessionKey = Annotated[StrictStr, Field(max_length=256)]
CommandId = Annotated[StrictStr, Field(min_length=1, max_length=200)]
Flag = StrictBool

# Recall precision levels and their specificity weights (``set_recall_precision``,
# ``get_recall_precision``); an agent without one reads as the global level.
BETAS = {"strict": 2.0, "balanced": 1.0, "lenient": 0.5}
GLOBAL_PRECISION = "balanced"


class WriteArgs(ToolArgs):
    """Every write accepts ``command_id`` (memstream's addition): a retry with the same id gets
    the first answer back and writes nothing (W9). ``session_key`` is CPersona's session hint."""

    session_key: SessionKey = ""
    command_id: CommandId | None = None


def scope(agent_id: str, project_id: str | None = None, channel: str | None = None) -> Scope:
    return Scope(agent_id=agent_id, project_id=project_id or "", channel=channel or "")


def actor(caller: Caller, agent_id: str, session_key: str = "") -> Actor:
    return Actor(client_id=caller.client_id, agent_id=agent_id, session_id=session_key or caller.session_id)


def envelope(
    caller: Caller, args: WriteArgs, agent_id: str, project_id: str | None = None, channel: str | None = None
) -> dict[str, Any]:
    """The fields every command carries."""
    return {
        "command_id": args.command_id or new_id(),
        "scope": scope(agent_id, project_id, channel),
        "actor": actor(caller, agent_id, args.session_key),
        "received_at": utcnow(),
    }


def sql_time(iso: str | None) -> str | None:
    """CPersona shows ``created_at`` as SQLite's ``YYYY-MM-DD HH:MM:SS`` (UTC)."""
    if not iso:
        return None
    return iso[:19].replace("T", " ")
