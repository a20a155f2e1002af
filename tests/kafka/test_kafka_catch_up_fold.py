"""A worker catching up a partition it gained, on the real broker (api/kafka/worker/tail.py): the
event loop keeps running while a fetched batch folds (so ``/health`` and reads of other
partitions answer during the catch-up), and the read models it ends with, folded batch by
batch in offset order, equal a replay of the topic."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import numpy as np
import pytest

from memstream.api.kafka.worker.app import Worker, worker_app
from memstream.api.kafka.worker.replay import rebuild_partitions
from memstream.api.services.settings import Settings
from memstream.projections.runner import digest_of
from memstream.streams import commands as c
from memstream.streams.deciders.step import NewAudit, NewEvent, decide_and_fold
from memstream.streams.decision.limits import Limits
from memstream.streams.decision.state import DecisionState
from memstream.streams.events import Embedding
from memstream.streams.log.kafka import KafkaConfig, KafkaLog, ensure_topics
from memstream.streams.log.port import partition_for
from tests.support.kafka_commands import env, store

pytestmark = [pytest.mark.kafka]

PARTITIONS = 2
EVENTS = 3_000  # several fetches of thousands of records, each folding for long enough to see


async def fill(cfg: KafkaConfig) -> int:
    """Stores of a few agents of one partition, every fifth command an update of an earlier
    store (so a fold out of order would end elsewhere); the partition they are in."""
    agents = [a for a in (f"ag-catch-{i}" for i in range(64)) if partition_for(a, cfg.partitions) == 0][:4]
    state = DecisionState(cfg.partitions)
    events: list[NewEvent] = []
    audits: list[NewAudit] = []
    stored: list[tuple[str, int]] = []
    for i in range(EVENTS):
        agent = agents[i % len(agents)]
        if i % 5 == 4:
            owner, memory = stored[-3]
            vec = Embedding.from_vector("m", np.array([2.0, float(i)], np.float32))
            cmd: c.Command = c.UpdateMemory(memory_id=memory, content=f"revised {i}", embedding=vec, **env(owner))
        else:
            cmd = store(agent, f"note {i} about the deploy key of service {i % 97}")
        committed = decide_and_fold(state, cmd, Limits(), events, audits)
        assert committed.outcome.result == "applied", committed
        if isinstance(cmd, c.StoreMemory):
            assert committed.outcome.id is not None
            stored.append((agent, committed.outcome.id))
    kafka = KafkaLog(cfg)
    await kafka.start()
    try:
        await kafka.append([(e.agent, e.type, e.value, e.vector) for e in events])
    finally:
        await kafka.close()
    return partition_for(agents[0], cfg.partitions)


async def test_a_worker_answers_while_it_catches_up_and_ends_equal_to_a_replay(
    cfg: KafkaConfig, tmp_path: Path
) -> None:
    await ensure_topics(cfg)
    p = await fill(cfg)
    node = Worker(cfg, Settings(data_dir=tmp_path, kafka_checkpoint_every=0), url="http://127.0.0.1:9")
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=worker_app(node)), base_url="http://worker")
    # What the loop saw while the tail held the partition's lock, i.e. in the middle of folding
    # a fetched batch: /health answers, and the models' offset moving between two of them.
    answers_while_folding: list[int] = []
    try:
        async with asyncio.timeout(120):
            await node.assigned({p})
            models = node.models[p]
            end = models.target
            assert end == EVENTS - 1
            # The tail counts a fetch once its fold returned and the lock is released: wait for
            # that too, not only for the offset the fold set on its thread.
            while models.offset < end or models.folded_by_tail < EVENTS:
                folding = models.lock.locked()
                body = (await client.get("/health")).json()
                if folding and models.lock.locked():
                    answers_while_folding.append(body["partitions"][str(p)])
                await asyncio.sleep(0.001)  # the poll's step; the timeout bounds the wait
            assert models.folded_by_tail == EVENTS
            # The event loop ran (and /health answered) while batches were folding, more than once
            # and at different points: on the old tail, which folded each fetch on the loop, never.
            assert len(set(answers_while_folding)) >= 2, answers_while_folding
            assert all(-1 <= o <= end for o in answers_while_folding)

            rebuilt = await rebuild_partitions(cfg, [p], jobs=1)
            async with models.lock:
                live = {m.name: digest_of(m) for m in models.projections}
            assert rebuilt["partitions"][p]["offset"] == end
            assert live == rebuilt["partitions"][p]["digests"]
    finally:
        await client.aclose()
        await node.close()
