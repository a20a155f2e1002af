"""A Kafka deployment's live read-model digests, asked of the workers that own each partition."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from memstream.api.kafka.router.app import Owners
from memstream.streams.log.kafka import KafkaConfig, KafkaLog


async def live_digests(cfg: KafkaConfig, timeout_s: float = 90.0) -> dict[int, dict[str, Any]]:
    """Every partition's live read-model digests from the worker owning it, once each has
    folded its partitions to the end of the events topic (workers that do not answer yet, as
    after a fault, are asked again)."""
    owners = Owners(cfg)
    await owners.start()
    kafka = KafkaLog(cfg)
    await kafka.start()
    try:
        ends = await kafka.end_offsets()
        async with asyncio.timeout(timeout_s), httpx.AsyncClient(timeout=10) as client:
            while True:
                out: dict[int, dict[str, Any]] = {}
                for url in set(owners.urls.values()):
                    try:
                        body = (await client.get(f"{url}/digests")).json()
                    except (httpx.HTTPError, ValueError):
                        continue
                    out.update({int(p): v for p, v in body.items()})
                if len(out) == cfg.partitions and all(out[p]["offset"] == ends[p] - 1 for p in out):
                    return out
                await asyncio.sleep(0.3)
    finally:
        await kafka.close()
        await owners.close()
