"""The worker's tail fold: what its consumer fetched of one partition, folded into the partition's
read models. A partition just gained catches up from offset 0 (or its checkpoint) in fetches of
thousands of events, seconds of fold each on a loaded machine: folded on the event loop, they
kept the worker from answering anything, ``/health`` included, until caught up (bench/kafka_catchup.py,
docs/benchmarks.md "Kafka catch-up"). So a large fetch is folded on a thread, with the cyclic
collector paused as a replay's fold is (streams/folding.py), while the loop goes on answering
and fetching the next batch (its garbage collected before its survivors are frozen: this fold
recurs); a small one (the steady tail, a few events) inline, where handing
it to a thread would cost more than the fold.

The caller holds the partition's lock throughout, as for any fold: reads of the partition wait
for it, a checkpoint captures between two batches, the decider's appends meanwhile go to the
tail (``Worker.appended``). Only one batch of a partition folds at a time, in offset order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiokafka import ConsumerRecord

from memstream.api.kafka.worker.partition_log import fold_records
from memstream.projections.runner import FoldedModels
from memstream.streams.folding import collector_paused
from memstream.streams.log.kafka import Opener

OFFLOAD_AT = 64  # records of one partition in one fetch from which they fold on a thread


def _fold_paused(models: FoldedModels, records: Sequence[ConsumerRecord[bytes, bytes]], opener: Opener | None) -> int:
    # Collected before the freeze: large fetches recur on a busy worker, and a bare freeze would
    # keep the garbage cycles alive at that moment for good.
    with collector_paused(collect=True):
        return fold_records(models, records, opener)


async def fold_fetched(
    models: FoldedModels, records: Sequence[ConsumerRecord[bytes, bytes]], opener: Opener | None
) -> int:
    """Fold one fetch of a partition (the caller holds its lock); how many events applied."""
    if len(records) < OFFLOAD_AT:
        return fold_records(models, records, opener)
    return await asyncio.to_thread(_fold_paused, models, records, opener)
