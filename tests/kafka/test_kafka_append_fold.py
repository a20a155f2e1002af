"""Fold-on-append on the real broker: a worker's faust agent folds its read models as it
appends (api/kafka/worker/append_fold.py), before it replies; the node's tail consumer leaves a partition
the agent feeds paused, and takes it back, from the models' own offset, whenever the agent
cannot feed it (a checkpoint holding the models, a batch it was not handed, a fold that failed). Whichever folded
what, the models equal a replay of the topic."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from memstream.api.kafka.worker.app import Worker
from memstream.api.kafka.worker.replay import rebuild_partitions
from memstream.api.services.settings import Settings
from memstream.projections.runner import digest_of
from memstream.streams.deciders.kafka import KafkaDecider
from memstream.streams.log.kafka import KafkaConfig, KafkaLog, ensure_topics
from memstream.streams.log.port import Committed, partition_for
from tests.support.kafka_commands import store

pytestmark = [pytest.mark.kafka]

PARTITIONS = 2
AGENT = "ag-fold"


async def test_the_agent_folds_what_it_appends_and_the_tail_repairs_the_rest(
    cfg: KafkaConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ensure_topics(cfg)
    p = partition_for(AGENT, cfg.partitions)
    decider = KafkaDecider(KafkaLog(cfg))
    decider.owned = {p}
    node = Worker(cfg, Settings(data_dir=tmp_path, kafka_checkpoint_every=0), url="http://127.0.0.1:9")
    node.decider = decider
    decider.on_appended = node.appended
    n = 0

    async def write() -> Committed:
        nonlocal n
        n += 1
        out = await decider.submit_local(p, store(AGENT, f"note {n}"))
        assert out.outcome.result == "applied" and out.offset is not None
        return out

    try:
        async with asyncio.timeout(90):
            await node.assigned({p})
            models = node.models[p]

            # Fed by the agent: every write is in the models when its submitter hears back.
            for _ in range(12):
                out = await write()
                assert models.offset == out.offset
            assert p in node.fed  # so the tail no longer reads the partition
            assert models.folded_by_agent + models.folded_by_tail == 12
            assert models.folded_by_agent >= 11  # the tail may fold the very first one first

            # A checkpoint holds the models: the agent does not wait for it, the tail takes over.
            await models.lock.acquire()
            try:
                held = await write()
                assert models.offset < held.offset and p not in node.fed
            finally:
                models.lock.release()
            by_tail = models.folded_by_tail
            await models.caught_up(held.offset)
            assert models.folded_by_tail == by_tail + 1
            out = await write()  # contiguous again: the agent feeds it, the tail pauses
            assert models.offset == out.offset and p in node.fed

            # A batch the agent was not handed leaves a hole: the next one is not folded over it.
            decider.on_appended = None
            missed = await write()
            decider.on_appended = node.appended
            after = await write()
            assert p not in node.fed and models.offset < missed.offset
            await models.caught_up(after.offset)  # the tail reads both from the topic
            out = await write()
            assert models.offset == out.offset and p in node.fed

            # A fold that fails in the agent (a projection's bug) costs the write nothing, and
            # the tail folds it again from the topic.
            def failing(offset: int, value: bytes, vector: bytes | None) -> None:
                raise RuntimeError("a projection's bug")

            monkeypatch.setattr(models, "apply", failing)
            broken = await write()
            monkeypatch.undo()
            assert p not in node.fed and models.offset < broken.offset
            await models.caught_up(broken.offset)
            out = await write()
            assert models.offset == out.offset and p in node.fed

        live = {m.name: digest_of(m) for m in models.projections}
        rebuilt = await rebuild_partitions(cfg, [p], jobs=1)
        assert rebuilt["partitions"][p]["offset"] == models.offset
        assert rebuilt["partitions"][p]["digests"] == live
        assert models.folded_by_agent + models.folded_by_tail == models.offset + 1 == n
    finally:
        await node.close()
        await decider.kafka.close()
