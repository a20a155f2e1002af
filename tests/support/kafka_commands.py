"""Commands and events for the Kafka command-path tests: a store command of a given agent, and
every event of a deployment's topics."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np

from memstream.streams import commands as c
from memstream.streams.deciders.sealing import LazySealing
from memstream.streams.events import Actor, Embedding, Scope, decode, new_id
from memstream.streams.log.kafka import KafkaConfig, KafkaLog

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def env(agent: str, command_id: str | None = None) -> dict[str, Any]:
    return {
        "command_id": command_id or new_id(),
        "scope": Scope(agent_id=agent),
        "actor": Actor(client_id="it"),
        "received_at": T0,
    }


def store(agent: str, content: str, msg_id: str | None = None, command_id: str | None = None) -> c.StoreMemory:
    vec = Embedding.from_vector("m", np.array([1.0, float(len(content))], np.float32))
    return c.StoreMemory(content=content, msg_id=msg_id, embedding=vec, **env(agent, command_id))


async def all_events(cfg: KafkaConfig) -> list[dict[str, Any]]:
    opener = LazySealing(cfg)  # the events topic is sealed: opened with the deployment's master key
    kafka = KafkaLog(cfg, opener)
    await kafka.start()
    try:
        out = []
        for p in range(cfg.partitions):
            out.extend(decode(r.value) for r in await kafka.read(p, 0, limit=1_000_000, vectors=False))
        return out
    finally:
        await kafka.close()
        opener.close()
