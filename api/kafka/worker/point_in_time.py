"""Point-in-time reads (H3) on a Kafka-mode worker: a partition's read models at an offset or
an instant.

As in embedded mode (``api/services/point_in_time.py``), the state at a point is fresh read models
folded from offset 0 up to it, with the replay loop ``memstream rebuild --kafka`` uses
(``fold_partitions``), and answered through the same ``View`` (so every read tool answers
"as of" with the code that answers "now"). What differs is what a point is:

- an offset is an offset of the call's partition (the agent's), since Kafka numbers each
  partition from 0: ``as_of: n`` is the state after event ``n`` of that partition;
- an instant is mapped to the first event of the partition that occurred after it, by the
  events' ``occurred_at`` (the ``at`` that ``history`` shows), exactly as the embedded server
  maps it on its log; Kafka's record timestamps are not used (they are set when the decider
  appends, a little after ``occurred_at``, so an instant copied from ``history`` would miss
  its own event).

The last few states built are kept (as the embedded engine does), per worker, keyed by
partition and stop.
"""

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
