"""The points in time read tools take: ``as_of`` (the state a read answers from) and the
``time_cue`` bounds of a recall."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import Field, StrictInt, StrictStr

from memstream.api.services.failures import mark_failure
from memstream.api.services.inputs import InputError, parse_timestamp
from memstream.api.services.ports import Engine, Reads

AsOf = Annotated[StrictInt, Field(ge=0, le=2**63 - 1)] | Annotated[StrictStr, Field(max_length=64)]
AS_OF_HELP = "memstream: answer from the state at this log offset (int) or instant (ISO-8601)."


async def state_at(engine: Engine, as_of: int | str | None) -> Reads | dict[str, Any]:
    """The engine, or a point-in-time view of it (H3); a failure dict for a bad ``as_of``."""
    try:
        return await engine.at(as_of)
    except InputError as exc:
        mark_failure("invalid")
        return {"ok": False, "error": str(exc)}


def time_bounds(cue: dict[str, Any] | None) -> tuple[datetime | None, datetime | None]:
    """(after, before) of a ``time_cue``; raises ``InputError`` for a malformed one."""
    if not cue:
        return None, None
    unknown = set(cue) - {"after", "before", "confidence"}
    if unknown:
        raise InputError(f"time_cue has unsupported fields: {', '.join(sorted(unknown))} (use after / before)")
    bounds: list[datetime | None] = []
    for key in ("after", "before"):
        raw = cue.get(key)
        if raw is None:
            bounds.append(None)
            continue
        if not isinstance(raw, str):
            raise InputError(f"time_cue.{key} is not a date or timestamp: {raw!r}")
        try:
            bounds.append(parse_timestamp(raw, f"time_cue.{key}"))
        except InputError:
            raise InputError(f"time_cue.{key} is not a date or timestamp: {raw!r}") from None
    return bounds[0], bounds[1]
