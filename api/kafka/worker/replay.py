"""Replay in Kafka mode (``memstream rebuild --kafka``): partitions of the events topic folded from
offset 0 into fresh read models, reporting each read model's digest per partition (optionally
as of an offset), to compare with a worker's live ``GET /digests``. Its fold loop is the one
point-in-time reads use."""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import time
from collections.abc import Callable, Sequence
from multiprocessing.synchronize import Barrier
from typing import Any

from aiokafka import TopicPartition

from memstream.api.kafka.worker.models import PartitionModels
from memstream.api.kafka.worker.partition_log import Progress, fold_consumer, fold_partitions
from memstream.projections.catalog import ReadModelOptions
from memstream.projections.runner import digest_of
from memstream.streams.deciders.sealing import KafkaSealing
from memstream.streams.log.kafka import KafkaConfig, events_end_offsets


async def rebuild_partitions(
    cfg: KafkaConfig,
    partitions: Sequence[int] | None = None,
    *,
    stop: int | None = None,
    progress: Progress | None = None,
    jobs: int = 1,
) -> dict[str, Any]:
    """Fold ``partitions`` (default: all) from offset 0 up to ``stop`` (exclusive; default: the
    end now) into fresh read models, in ``jobs`` processes; their digests per partition and
    the fold rate (timed from when every process is connected and ready to fetch)."""
    parts = sorted(set(partitions)) if partitions else list(range(cfg.partitions))
    jobs = max(1, min(jobs, len(parts)))
    if jobs == 1:
        return await _rebuild(cfg, parts, stop, progress)
    return await _rebuild_in_processes(cfg, parts, stop, progress, jobs)


async def _rebuild(
    cfg: KafkaConfig,
    parts: list[int],
    stop: int | None,
    progress: Progress | None,
    ready: Callable[[], object] | None = None,
) -> dict[str, Any]:
    # Sealed events open through the keys topic (the master key is required, as in a worker).
    sealing = await asyncio.to_thread(KafkaSealing.from_env, cfg)
    consumer = fold_consumer(cfg)
    await consumer.start()
    try:
        tps = [TopicPartition(cfg.events_topic, p) for p in parts]
        ends = {tp.partition: int(end) for tp, end in (await consumer.end_offsets(tps)).items()}
        bounds = {p: ends[p] if stop is None else min(stop, ends[p]) for p in parts}
        # Digests leave vector graphs out (derived data), so a replay builds none.
        models = {p: PartitionModels(p, 0, None, ReadModelOptions(vector_graphs=False)) for p in parts}
        if ready is not None:
            ready()
        started, cpu = time.perf_counter(), time.process_time()
        done = await fold_partitions(consumer, cfg.events_topic, models, bounds, progress, opener=sealing)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        report: dict[str, Any] = {
            "partitions": {
                p: {"offset": m.offset, "digests": {proj.name: digest_of(proj) for proj in m.projections}}
                for p, m in models.items()
            },
            "events": done,
            "seconds": round(seconds, 3),
            "events_per_second": round(done / seconds) if seconds > 0 else None,
            # The fold's CPU (every thread of the process) and the cores it got: on a shared
            # machine, what tells a split that costs more from one that gets fewer cores.
            "cpu_seconds": round(cpu, 3),
            "cores_used": round(cpu / seconds, 2) if seconds > 0 else None,
        }
        return report
    finally:
        await consumer.stop()
        await asyncio.to_thread(sealing.close)


def _child(
    cfg: KafkaConfig,
    parts: list[int],
    stop: int | None,
    counter: Any,
    barrier: Barrier,
    results: Any,
) -> None:
    """One rebuild process: fold its partitions, count progress in shared memory, send back
    the report (or the error, so the parent fails with the reason)."""

    def count(done: int, _total: int) -> None:
        counter.value = done

    try:
        report = asyncio.run(_rebuild(cfg, parts, stop, count, ready=lambda: barrier.wait(120)))
        results.put(report)
    except BaseException as exc:  # reported to the parent, which raises
        barrier.abort()
        results.put({"error": f"{type(exc).__name__}: {exc}", "partitions_of_job": parts})


async def _rebuild_in_processes(
    cfg: KafkaConfig, parts: list[int], stop: int | None, progress: Progress | None, jobs: int
) -> dict[str, Any]:
    ends = await events_end_offsets(cfg)
    total = sum(ends[p] if stop is None else min(stop, ends[p]) for p in parts)
    ctx = multiprocessing.get_context("spawn")  # no fork of a process with a running event loop
    groups = [parts[i::jobs] for i in range(jobs)]
    counters = [ctx.Value("q", 0, lock=False) for _ in groups]
    barrier = ctx.Barrier(len(groups) + 1)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_child, args=(cfg, g, stop, c, barrier, results), daemon=True)
        for g, c in zip(groups, counters, strict=True)
    ]
    setup = time.perf_counter()
    for proc in procs:
        proc.start()
    try:
        await asyncio.to_thread(barrier.wait, 300)
        started = time.perf_counter()
        reports: list[dict[str, Any]] = []
        while len(reports) < len(procs):
            try:
                reports.append(await asyncio.to_thread(results.get, True, 0.2))
            except queue.Empty:  # report progress, check the children are alive
                if not any(p.is_alive() for p in procs) and results.empty():
                    raise RuntimeError("a rebuild process died without a report") from None
            if progress is not None:
                progress(sum(c.value for c in counters), total)
        wall = time.perf_counter() - started
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    failed = [r for r in reports if "error" in r]
    if failed:
        raise RuntimeError(f"rebuild of partitions {failed[0]['partitions_of_job']} failed: {failed[0]['error']}")
    merged: dict[int, Any] = {}
    for r in reports:
        merged.update(r["partitions"])
    events = sum(r["events"] for r in reports)
    if progress is not None:
        progress(events, total)
    # Every process starts folding at the barrier, so the fold took as long as the slowest one;
    # measured that way, as the one-process rate is (without the digests computed after it).
    seconds = max(float(r["seconds"]) for r in reports)
    cpu = sum(float(r["cpu_seconds"]) for r in reports)
    return {
        "partitions": dict(sorted(merged.items())),
        "events": events,
        "seconds": round(seconds, 3),
        "events_per_second": round(events / seconds) if seconds > 0 else None,
        "jobs": jobs,
        "cpu_seconds": round(cpu, 3),
        "cores_used": round(cpu / seconds, 2) if seconds > 0 else None,
        "cpu_seconds_by_job": [r["cpu_seconds"] for r in reports],
        "setup_seconds": round(started - setup, 3),
        "wall_seconds": round(wall, 3),  # barrier to the last report: the fold plus the digests
    }
