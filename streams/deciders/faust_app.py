"""The Kafka worker's write side: the faust app of a ``memstream worker``, running the decider as
a faust agent on the deciders' consumer group (at-least-once; idempotence comes from command ids
in the decision state), with the hooks the read side (``api/kafka/worker/app.py``) follows its
partitions and folds appends by. A failure the decider cannot recover from stops the process, so
its partitions move to a healthy worker: docs/kafka-operations.md, section 0."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import faust

from memstream.streams.deciders.kafka import AppendedHook, Incoming, KafkaDecider
from memstream.streams.deciders.sealing import KafkaSealing
from memstream.streams.decision.limits import Limits
from memstream.streams.log.kafka import KafkaConfig, KafkaLog

log = logging.getLogger(__name__)

BATCH = 256  # commands per round of acks
# How long a batch waits to fill: bounds the latency group commit adds. faust's take_events
# wakes up this often even when idle (2 ms cost an idle worker about 7% of a core; 5 ms ~3%).
BATCH_WAIT_S = 0.005


# Called with the partition numbers a worker gains or loses (the same numbers of every topic:
# commands, events and audit are co-partitioned by agent).
PartitionsHook = Callable[[set[int]], Awaitable[None]]


def create_app(
    cfg: KafkaConfig,
    *,
    limits: Limits | None = None,
    session_timeout_s: float = 10.0,
    heartbeat_s: float = 1.0,
    on_assigned: PartitionsHook | None = None,
    on_revoked: PartitionsHook | None = None,
    on_appended: AppendedHook | None = None,
    tasks: Sequence[Callable[[], Awaitable[None]]] = (),
    sealing: KafkaSealing | None = None,
) -> tuple[faust.App, KafkaDecider]:
    """The faust app of a worker and the decider it drives. ``on_assigned`` / ``on_revoked``
    let the worker's read side follow the partitions the group gives it, ``on_appended`` lets
    the agent fold its read models as it appends; ``tasks`` run for the worker's lifetime (its
    query server); ``sealing`` seals what the decider appends and opens what it folds."""
    faust_dir = Path(tempfile.gettempdir()) / "memstream-faust"
    faust_dir.mkdir(exist_ok=True)
    app = faust.App(
        f"{cfg.prefix}-deciders",
        broker=f"kafka://{cfg.bootstrap}",
        store="memory://",
        # faust creates its data directory even with in-memory tables; keep it out of the cwd.
        datadir=str(faust_dir / "{conf.id}-data"),
        web_enabled=False,
        topic_replication_factor=cfg.replication,
        topic_partitions=cfg.partitions,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=session_timeout_s,
        broker_heartbeat_interval=heartbeat_s,
        processing_guarantee="at_least_once",
    )
    kafka = KafkaLog(cfg, sealing)
    decider = KafkaDecider(kafka, limits, sealing)
    decider.on_appended = on_appended
    commands = app.topic(
        cfg.commands_topic, key_serializer="raw", value_serializer="raw", partitions=cfg.partitions, internal=False
    )

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]  # faust's stubs want a keyword-only signal
    async def revoked(_app: Any, revoked: Any, **_: Any) -> None:
        parts = {tp.partition for tp in revoked if tp.topic == cfg.commands_topic}
        decider.owned -= parts
        decider.forget(parts)
        if on_revoked is not None and parts:
            await on_revoked(parts)

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]  # as above
    async def assigned(_app: Any, assigned: Any, **_: Any) -> None:
        parts = {tp.partition for tp in assigned if tp.topic == cfg.commands_topic}
        decider.forget(parts)
        decider.owned = set(parts)
        if on_assigned is not None:
            await on_assigned(parts)

    for task in tasks:
        app.task(task)

    def stop_worker(exc: BaseException | None = None) -> None:
        # The decider's state is ahead of the log (a failed append): no later decision may
        # build on it. Stop now; the group moves the partitions to a healthy worker.
        log.critical("the decider cannot go on; the worker stops", exc_info=exc or True)
        logging.shutdown()
        os._exit(70)

    decider.on_failure = stop_worker  # a failed local decision's append, too

    @app.agent(commands)
    async def decide(stream: Any) -> None:
        async for batch in stream.take_events(BATCH, within=BATCH_WAIT_S):
            try:
                await decider.handle(
                    [Incoming(e.message.partition, e.message.offset, e.message.value, e.message.headers) for e in batch]
                )
            except Exception:
                stop_worker()

    return app, decider
