"""Replay in Kafka mode: fold partitions of the events topic from offset 0 into fresh read models.

The workers' read models are folds of their partitions, started from offset 0 whenever a worker
gains a partition; there is no consumer-group offset to reset, because the read models never
resume from one. This module is the same fold run on its own (``memstream rebuild --kafka``):
it reports each read model's digest per partition, optionally only up to an offset (the state
as of that point of the partition), and how fast the topic was folded. Compared with a
worker's live digests (``GET /digests`` on the worker), it proves the workers' state is the
log's and nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from memstream.api.kafka_node import PartitionModels
from memstream.streams.kafka_log import KafkaConfig, KafkaLog
from memstream.streams.runner import bulk_fold, digest_of

Progress = Callable[[int, int], None]
CHUNK = 5_000


async def rebuild_partitions(
    cfg: KafkaConfig,
    partitions: Sequence[int] | None = None,
    *,
    stop: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Fold ``partitions`` (default: all) from offset 0 up to ``stop`` (exclusive; default: the
    end now) into fresh read models; their digests per partition and the fold rate."""
    kafka = KafkaLog(cfg)
    await kafka.start()
    try:
        parts = sorted(set(partitions)) if partitions else list(range(cfg.partitions))
        ends = await kafka.end_offsets()
        bounds = {p: ends[p] if stop is None else min(stop, ends[p]) for p in parts}
        total = sum(bounds.values())
        done = 0
        started = time.perf_counter()
        report: dict[str, Any] = {"partitions": {}}
        with bulk_fold(total):
            for p in parts:
                models = PartitionModels(p, 0)
                pos = 0
                while pos < bounds[p]:
                    records = await kafka.read_records(cfg.events_topic, p, pos, bounds[p], limit=CHUNK)
                    if not records:
                        break
                    for rec in records:
                        models.apply(rec.offset, rec.value or b"", dict(rec.headers).get("vector"))
                    pos = records[-1].offset + 1
                    done += len(records)
                    if progress is not None:
                        progress(done, total)
                report["partitions"][p] = {
                    "offset": models.offset,
                    "digests": {proj.name: digest_of(proj) for proj in models.projections},
                }
        seconds = time.perf_counter() - started
        report.update(
            events=done, seconds=round(seconds, 3), events_per_second=round(done / seconds) if seconds > 0 else None
        )
        return report
    finally:
        await kafka.close()
