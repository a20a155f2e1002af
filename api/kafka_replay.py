"""Replay in Kafka mode: fold partitions of the events topic from offset 0 into fresh read models.

The workers' read models are folds of their partitions, started from offset 0 whenever a worker
gains a partition; there is no consumer-group offset to reset, because the read models never
resume from one. This module is the same fold run on its own (``memstream rebuild --kafka``):
it reports each read model's digest per partition, optionally only up to an offset (the state
as of that point of the partition), and how fast the topic was folded. Compared with a
worker's live digests (``GET /digests`` on the worker), it proves the workers' state is the
log's and nothing else. The fold loop (``fold_partitions``) is the one workers use for
point-in-time reads (``api/kafka_point_in_time.py``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition

from memstream.api.kafka_node import PartitionModels
from memstream.api.kafka_partition_log import Progress, fold_consumer, fold_partitions
from memstream.streams.kafka_log import KafkaConfig
from memstream.streams.runner import digest_of


async def rebuild_partitions(
    cfg: KafkaConfig,
    partitions: Sequence[int] | None = None,
    *,
    stop: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Fold ``partitions`` (default: all) from offset 0 up to ``stop`` (exclusive; default: the
    end now) into fresh read models; their digests per partition and the fold rate."""
    consumer = fold_consumer(cfg)
    await consumer.start()
    try:
        parts = sorted(set(partitions)) if partitions else list(range(cfg.partitions))
        tps = [TopicPartition(cfg.events_topic, p) for p in parts]
        ends = {tp.partition: int(end) for tp, end in (await consumer.end_offsets(tps)).items()}
        bounds = {p: ends[p] if stop is None else min(stop, ends[p]) for p in parts}
        models = {p: PartitionModels(p, 0) for p in parts}
        started = time.perf_counter()
        done = await fold_partitions(consumer, cfg.events_topic, models, bounds, progress)
        seconds = time.perf_counter() - started
        report: dict[str, Any] = {
            "partitions": {
                p: {"offset": m.offset, "digests": {proj.name: digest_of(proj) for proj in m.projections}}
                for p, m in models.items()
            },
            "events": done,
            "seconds": round(seconds, 3),
            "events_per_second": round(done / seconds) if seconds > 0 else None,
        }
        return report
    finally:
        await consumer.stop()
