"""A worker catching up a partition it gained folds each fetch on the event loop, a bounded slice
at a time, the loop taking turns in between (api/kafka/worker/tail.py): no second thread holds
the interpreter lock against the loop (wave 9 measured thousands of hand-offs per catch-up), and
``/health`` answers between two slices of one fetch. The real broker, as the worker reads it."""

from __future__ import annotations

import asyncio
import gc
import itertools
import math
import threading
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
from aiokafka import ConsumerRecord

from memstream.api.kafka.worker import tail
from memstream.api.kafka.worker.app import Worker, worker_app
from memstream.api.services.settings import Settings
from memstream.projections.runner import FoldedModels
from memstream.streams.log.kafka import KafkaConfig, Opener, ensure_topics
from tests.kafka.test_kafka_catch_up_fold import EVENTS, fill

pytestmark = [pytest.mark.kafka]


async def test_a_catch_up_folds_on_the_loop_in_bounded_slices_and_answers_between_them(
    cfg: KafkaConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ensure_topics(cfg)
    p = await fill(cfg)
    node = Worker(cfg, Settings(data_dir=tmp_path, kafka_checkpoint_every=0), url="http://127.0.0.1:9")
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=worker_app(node)), base_url="http://worker")
    loop_thread = threading.get_ident()
    answers = 0  # /health answers so far
    # Each call of the fold: (its thread, its records, /health answers before it).
    folds: list[tuple[int, int, int]] = []
    real = tail.fold_records

    def fold(models: FoldedModels, records: Sequence[ConsumerRecord[bytes, bytes]], opener: Opener | None) -> int:
        folds.append((threading.get_ident(), len(records), answers))
        return real(models, records, opener)

    monkeypatch.setattr(tail, "fold_records", fold)
    collects: list[int] = []  # full collections meanwhile (the tail's after a fetch)
    real_collect = gc.collect

    def collect(generation: int = 2) -> int:
        collects.append(generation)
        return real_collect(generation)

    monkeypatch.setattr(gc, "collect", collect)
    try:
        async with asyncio.timeout(120):
            await node.assigned({p})
            models = node.models[p]
            while models.offset < models.target or models.folded_by_tail < EVENTS:
                await client.get("/health")
                answers += 1
                await asyncio.sleep(0.001)
            health = (await client.get("/health")).json()
    finally:
        await client.aclose()
        await node.close()

    assert models.folded_by_tail == EVENTS
    assert sum(n for _, n, _ in folds) >= EVENTS
    # Every slice on the loop's thread (the old tail folded a fetch of 64 or more on a thread),
    # none larger than the bound, as the worker's counters say too.
    assert {t for t, _, _ in folds} == {loop_thread}
    assert max(n for _, n, _ in folds) <= tail.SLICE
    assert models.largest_tail_slice == max(n for _, n, _ in folds) <= tail.SLICE
    assert models.tail_slices == len(folds) >= math.ceil(EVENTS / tail.SLICE)
    assert health["fold"][str(p)]["tail_slices"] == models.tail_slices
    # The catch-up to the end at the assignment freezes its survivors without collecting, as a
    # replay's fold does (the tail after it collects again: test_worker_tail_collector.py).
    assert collects == []
    # /health answered between two slices, more than once (the partition's lock held by the
    # fetch meanwhile, as test_kafka_catch_up_fold.py checks).
    turns = [b[2] - a[2] for a, b in itertools.pairwise(folds)]
    assert sum(1 for t in turns if t > 0) >= 2, turns
