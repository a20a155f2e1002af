"""Point-in-time reads (H3): the read models as they were at a log offset or an instant.

The state at a point is built the only honest way: fresh read models folded from offset 0 up
to that point. It costs a replay, so the last few states asked for are kept. A view offers
what read tools use of the engine (the read models, ``read``, ``embed``, ``settings``), so a
tool answers "as of" with the same code that answers "now".
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol, TypeVar

from memstream.api.services.inputs import InputError, parse_timestamp
from memstream.api.services.named_models import NamedModels
from memstream.api.services.ports import Reads
from memstream.api.services.settings import Settings
from memstream.projections.runner import FoldedModels, Projection, ProjectionRunner
from memstream.streams.events import Embedding, decode, parse_time
from memstream.streams.log.port import EventLog

T = TypeVar("T")
CACHED_STATES = 2


class ViewHost(Protocol):
    """What a view asks of the engine that built it: the settings, and query embeddings."""

    @property
    def settings(self) -> Settings: ...

    async def embed(self, texts: Sequence[str], *, model: str | None = None) -> list[Embedding | None]: ...


class Replays(ViewHost, Protocol):
    """What building a view needs of the embedded engine: its log, and a fold with progress."""

    @property
    def log(self) -> EventLog: ...

    def fold(self, kind: str, runner: ProjectionRunner, stop: int | None = None) -> int: ...


def offset_stop(as_of: int, end: int, where: str = "the log's end") -> int:
    """The stop (exclusive) of the state that includes offset ``as_of`` of a log (or partition)
    whose next offset is ``end``; raises ``InputError`` for an offset outside it."""
    if as_of < 0:
        raise InputError(f"as_of offset {as_of} is negative")
    if as_of >= end:
        raise InputError(f"as_of offset {as_of} is beyond {where} ({end - 1})")
    return as_of + 1


def as_of_instant(as_of: str) -> datetime:
    """The instant an ``as_of`` string names; raises ``InputError`` for a bad or empty one."""
    when = parse_timestamp(as_of, "as_of")
    if when is None:
        raise InputError("as_of is empty: give a log offset or an ISO-8601 time")
    return when


class View(NamedModels):
    """The read models at one point of the log: the ``Reads`` of api/services/ports.py."""

    def __init__(self, host: ViewHost, models: FoldedModels, stop: int) -> None:
        super().__init__(models.projections)
        self.host = host
        self.settings = host.settings
        self.stop = stop

    async def read(self, query: Callable[[], T]) -> T:
        return query()

    async def embed(
        self, texts: Sequence[str], *, agent_id: str | None = None, model: str | None = None
    ) -> list[Embedding | None]:
        """Embedded with ``model``, else the model the agent's vectors had at this point in time."""
        if model is None and agent_id is not None:
            model = self.vectors.model_of(agent_id)
        return await self.host.embed(texts, model=model)


class PointInTime:
    def __init__(self, engine: Replays, read_models: Callable[[], list[Projection]]) -> None:
        self.engine = engine
        self.read_models = read_models
        self._cache: OrderedDict[int, View] = OrderedDict()
        self._lock = asyncio.Lock()

    async def view(self, as_of: int | str) -> View:
        """The state including every event before ``stop`` (an offset ``n`` means events
        0..n; an instant means every event that occurred at or before it)."""
        stop = await asyncio.get_running_loop().run_in_executor(None, self.stop_for, as_of)
        async with self._lock:
            cached = self._cache.get(stop)
            if cached is not None:
                self._cache.move_to_end(stop)
                return cached
            view = await asyncio.get_running_loop().run_in_executor(None, self._build, stop)
            self._cache[stop] = view
            while len(self._cache) > CACHED_STATES:
                self._cache.popitem(last=False)
            return view

    def _build(self, stop: int) -> View:
        runner = ProjectionRunner.over(self.engine.log, self.read_models())
        self.engine.fold("point-in-time", runner, stop)
        return View(self.engine, runner, stop)

    def stop_for(self, as_of: int | str) -> int:
        """Raises ``InputError`` (a ValueError) for an offset outside the log or a bad time."""
        end = self.engine.log.end_offset()
        if isinstance(as_of, int):
            return offset_stop(as_of, end)
        return self._first_after(as_of_instant(as_of), end)

    def _first_after(self, when: datetime, end: int) -> int:
        """The first offset whose event occurred after ``when`` (binary search: the log is in
        time order, up to clock differences between processes sharing it)."""
        lo, hi = 0, end
        while lo < hi:
            mid = (lo + hi) // 2
            [rec] = self.engine.log.read_offsets([mid])
            if parse_time(decode(rec.value)["occurred_at"]) <= when:
                lo = mid + 1
            else:
                hi = mid
        return lo


def _offers_the_surface(view: View, runner: ProjectionRunner) -> tuple[Reads, FoldedModels]:
    """Never called: mypy checks here that a view offers what a read asks, and that a runner's
    read models are folded models (as a Kafka worker's are)."""
    return view, runner
