"""The worker's tail fold: what its consumer fetched of one partition, folded into the partition's
read models. A partition just gained catches up from offset 0 (or its checkpoint) in fetches of
thousands of events, seconds of fold each on a loaded machine: folded on the event loop whole,
they kept the worker from answering anything, ``/health`` included, until caught up
(bench/kafka_catchup.py, docs/benchmarks.md "Kafka catch-up"). Folded on a thread instead (wave 7),
the loop answered, but the interpreter lock changed hands between the fold's thread and the loop
all along (38-39k voluntary switches per 40k-event catch-up against 20-23k in slices; 0.48-0.53 s
system CPU against 0.32-0.40: docs/benchmarks.md "Catching up at replay's rate (wave 10)"). So a
large fetch folds on the loop in slices of at most ``SLICE`` records, the
loop taking a turn between two (``/health``, other partitions' calls, the next fetch's socket
reads), with the cyclic collector paused over the fetch as a replay's fold is
(streams/folding.py) and the fetch's survivors frozen after it (its garbage collected first,
except in the catch-up to the end at the assignment: ``fold_fetched``). A small fetch (the
steady tail, a few events) folds inline as one slice.

The caller holds the partition's lock throughout, as for any fold: reads of the partition wait
for it, a checkpoint captures between two fetches, the decider's appends meanwhile go to the
tail (``Worker.appended``). Only one fetch of a partition folds at a time, in offset order."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from aiokafka import ConsumerRecord

from memstream.api.kafka.worker.partition_log import fold_records
from memstream.projections.runner import FoldedModels
from memstream.streams.folding import collector_paused
from memstream.streams.log.kafka import Opener

# Records of one slice: ~15-25 ms of fold at 0.06-0.1 ms per event on this machine, the longest
# the loop waits for its turn during a catch-up. A turn costs a poll of the loop's sockets, so
# the 160 slices of a 40k-event catch-up cost nothing measurable.
SLICE = 256
# Turns the loop takes between two slices. One turn runs only what was ready at that moment, and
# a request or a produce takes a few (a callback that wakes a task, then the task's step): with
# one turn per slice, each of those steps waited a slice. An idle turn is a poll of the
# sockets, microseconds.
TURNS = 8
# Records of one partition in one fetch from which it folds with the collector paused (and
# collects after): a catch-up's fetch, not the steady tail's few events.
PAUSE_AT = 64


async def fold_fetched(
    models: FoldedModels,
    records: Sequence[ConsumerRecord[bytes, bytes]],
    opener: Opener | None,
    on_slice: Callable[[int], None] | None = None,
    *,
    collect: bool = True,
) -> int:
    """Fold one fetch of a partition (the caller holds its lock); how many events applied.
    ``on_slice`` is told each slice's size as it folds (``PartitionModels.tail_sliced``).

    ``collect``: the garbage is collected before the survivors are frozen, as large fetches
    recur on a busy worker and a bare freeze would keep the garbage cycles alive at that moment
    for good. A catch-up to the end at the assignment passes False and only freezes, as a
    replay's fold does (``bulk_fold``): its collects found no cyclic garbage (0 objects in each
    of 13 collects of a 40k-event catch-up) and cost ~5% of it, the first one (every object
    since the process started) 60 ms of the loop at once."""
    if len(records) < PAUSE_AT:
        return _fold_slice(models, records, opener, on_slice)
    applied = 0
    with collector_paused(collect=collect):
        for start in range(0, len(records), SLICE):
            if start:
                for _ in range(TURNS):  # the loop's turns between two slices
                    await asyncio.sleep(0)
            applied += _fold_slice(models, records[start : start + SLICE], opener, on_slice)
    return applied


def _fold_slice(
    models: FoldedModels,
    records: Sequence[ConsumerRecord[bytes, bytes]],
    opener: Opener | None,
    on_slice: Callable[[int], None] | None,
) -> int:
    if on_slice is not None:
        on_slice(len(records))
    return fold_records(models, records, opener)
