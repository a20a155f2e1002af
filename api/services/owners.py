"""Who owns a record named by id: the agent of its live row, or, once it is deleted, the agent
its first event names (deleted records keep their history). Grant checks ask it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from memstream.api.services.ports import LogReads, ReadModels
from memstream.streams.events import decode
from memstream.streams.log.port import resolved

T = TypeVar("T")


class OwnerSource(ReadModels, Protocol):
    """An engine's read models, read consistently, and its log (for deleted records)."""

    @property
    def log(self) -> LogReads: ...

    async def read(self, query: Callable[[], T]) -> T: ...


def owner_or_history(models: ReadModels, kind: str, ident: int) -> str | list[int]:
    """The agent of a live record, else the log offset of its first event, if any (the event
    names the agent). Run it inside ``read``."""
    table = models.memories.rows if kind == "mem" else models.episodes.rows
    row = table.get(ident)
    if row is not None:
        return str(row.agent_id)
    return list(models.history.of(f"{kind}:{ident}"))[:1]


async def record_owner(source: OwnerSource, kind: str, ident: int) -> str | None:
    """The agent record ``kind:ident`` belongs to, deleted records included; None if never written."""
    found = await source.read(lambda: owner_or_history(source, kind, ident))
    if isinstance(found, str):
        return found
    if not found:
        return None
    records = await resolved(source.log.read_offsets(found))
    return str(decode(records[0].value)["scope"]["agent_id"]) if records else None
