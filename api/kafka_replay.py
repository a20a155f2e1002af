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

from aiokafka import AIOKafkaConsumer, TopicPartition

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
    consumer = AIOKafkaConsumer(
        bootstrap_servers=cfg.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=10,
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )
    await consumer.start()
    try:
        parts = sorted(set(partitions)) if partitions else list(range(cfg.partitions))
        ends = await kafka.end_offsets()
        bounds = {p: ends[p] if stop is None else min(stop, ends[p]) for p in parts}
        total = sum(bounds.values())
        models = {p: PartitionModels(p, 0) for p in parts}
        pending = {TopicPartition(cfg.events_topic, p) for p in parts if bounds[p] > 0}
        done = 0
        started = time.perf_counter()
        if pending:
            consumer.assign(sorted(pending, key=lambda tp: tp.partition))
            await consumer.seek_to_beginning(*pending)
        # One consumer over every partition: the broker streams them all at once, and the fold
        # (not the round trips) sets the pace.
        with bulk_fold(total):
            while pending:
                batch = await consumer.getmany(*pending, timeout_ms=1000, max_records=CHUNK)
                for tp, records in batch.items():
                    m, bound = models[tp.partition], bounds[tp.partition]
                    for rec in records:
                        if rec.offset >= bound:
                            break
                        m.apply(rec.offset, rec.value or b"", dict(rec.headers).get("vector"))
                        done += 1
                    if m.offset >= bound - 1:
                        pending.discard(tp)
                        consumer.pause(tp)
                if progress is not None:
                    progress(done, total)
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
        await kafka.close()
