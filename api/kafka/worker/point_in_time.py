"""Point-in-time reads (H3) on a worker: a partition's read models folded from offset 0 up to an
offset of that partition or an instant (by the events' ``occurred_at``, as embedded mode maps
it), answered through embedded mode's ``View``; the last few states are kept. The rules:
docs/kafka-operations.md, "History, audit and point-in-time reads"."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Sequence

from memstream.api.kafka.worker.partition_log import KafkaPartitionLog
from memstream.api.services.embedders import Embedders
from memstream.api.services.point_in_time import CACHED_STATES, View, as_of_instant, offset_stop
from memstream.api.services.settings import Settings
from memstream.projections.runner import FoldedModels
from memstream.streams.events import Embedding

FOLD_DEADLINE_S = 600.0  # one replay to a point: ~13M events at the measured ~22k events/s (docs/benchmarks.md)


class _Host:
    """What a ``View`` asks of the engine it was built by: the settings and query embeddings.
    A cached view keeps only this, not the live read models of a partition the worker may lose."""

    def __init__(self, settings: Settings, embedders: Embedders) -> None:
        self.settings = settings
        self.embedders = embedders

    async def embed(self, texts: Sequence[str], *, model: str | None = None) -> list[Embedding | None]:
        return await self.embedders.embed(texts, model)


class KafkaPointInTime:
    def __init__(
        self,
        log: KafkaPartitionLog,
        settings: Settings,
        embedders: Embedders,
        *,
        fold_deadline_s: float = FOLD_DEADLINE_S,
    ) -> None:
        self.log = log
        self.host = _Host(settings, embedders)
        self.fold_deadline_s = fold_deadline_s
        self._cache: OrderedDict[tuple[int, int], View] = OrderedDict()
        self._lock = asyncio.Lock()

    async def stop_for(self, partition: int, as_of: int | str) -> int:
        """The stop (exclusive) of the state at ``as_of`` in ``partition``. Raises
        ``InputError`` for an offset outside the partition or a bad instant."""
        if isinstance(as_of, int):
            end = await self.log.end_offset(partition)
            return offset_stop(as_of, end, f"partition {partition}'s end")
        when = as_of_instant(as_of)  # a bad instant is refused before asking the broker anything
        end = await self.log.end_offset(partition)
        return await self.log.first_after(partition, when, end)

    async def view(self, partition: int, as_of: int | str, fresh_models: Callable[[], FoldedModels]) -> View:
        """The state of ``partition`` at ``as_of``, folded into ``fresh_models()``."""
        stop = await self.stop_for(partition, as_of)
        key = (partition, stop)
        async with self._lock:  # one replay at a time; a second caller of the same point reuses it
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
            models = fresh_models()
            await self.log.fold({partition: models}, {partition: stop}, deadline_s=self.fold_deadline_s)
            view = View(self.host, models, stop)
            self._cache[key] = view
            while len(self._cache) > CACHED_STATES:
                self._cache.popitem(last=False)
            return view
