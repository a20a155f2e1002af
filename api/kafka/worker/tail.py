"""The worker's tail fold: what its consumer fetched of one partition, folded into the partition's
read models. A partition just gained catches up from offset 0 (or its checkpoint) in fetches of
thousands of events, seconds of fold each on a loaded machine: folded on the event loop whole,
they kept the worker from answering anything, ``/health`` included, until caught up
(bench/kafka_catchup.py, docs/benchmarks.md "Kafka catch-up"). Folded on a thread instead (wave 7),
the loop answered, but the interpreter lock changed hands thousands of times per catch-up between
the fold's thread and the loop (up to 24k voluntary switches and 0.8 s more system CPU for 40k
events, docs/benchmarks.md "Catching up at replay's rate (wave 9)"), and the worker fell short of a
replay's rate. So a large fetch folds on the loop in slices of at most ``SLICE`` records, the
loop taking a turn between two (``/health``, other partitions' calls, the next fetch's socket
reads), with the cyclic collector paused over the fetch as a replay's fold is
(streams/folding.py) and the fetch's garbage collected before its survivors are frozen (this
fold recurs). A small fetch (the steady tail, a few events) folds inline as one slice.

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
OFFLOAD_AT = PAUSE_AT  # wave 7's name of the same threshold (tests/unit/test_worker_tail_collector.py)


async def fold_fetched(
    models: FoldedModels,
    records: Sequence[ConsumerRecord[bytes, bytes]],
    opener: Opener | None,
    on_slice: Callable[[int], None] | None = None,
) -> int:
    """Fold one fetch of a partition (the caller holds its lock); how many events applied.
    ``on_slice`` is told each slice's size as it folds (``PartitionModels.tail_sliced``)."""
    if len(records) < PAUSE_AT:
        return _fold_slice(models, records, opener, on_slice)
    applied = 0
    # Collected before the freeze: large fetches recur on a busy worker, and a bare freeze would
    # keep the garbage cycles alive at that moment for good.
    with collector_paused(collect=True):
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
