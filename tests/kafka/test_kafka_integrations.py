"""The framework adapters against a Kafka deployment (a router in front of a worker): their
folds read each agent's history by its partition's offsets, so the same calls work there."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.deployment import Deployment
from tests.support.integrations import require_extra

require_extra("langgraph", "langgraph")
require_extra("agents", "openai-agents")

from memstream.client import AsyncClient  # noqa: E402
from memstream.integrations.langgraph import MemstreamStore  # noqa: E402
from memstream.integrations.openai_agents import MemstreamSession  # noqa: E402

pytestmark = [pytest.mark.kafka]
PARTITIONS = 3


async def test_store_and_session_through_a_kafka_router(deployment: Deployment) -> None:
    deployment.worker()
    deployment.router()
    await deployment.ready()
    async with asyncio.timeout(240), AsyncClient(deployment.url) as client:
        store = MemstreamStore(client)
        # Agents on different partitions, each with items in two projects.
        for agent in ("ada", "bo", "cy", "dee"):
            await store.aput((agent, "notes"), "k1", {"text": f"{agent} grows tomatoes"})
            await store.aput((agent, "notes", "old"), "k2", {"text": f"{agent} once kept goats"})
            await store.aput((agent, "notes"), "k1", {"text": f"{agent} grows chillies now"})
        for agent in ("ada", "bo", "cy", "dee"):
            item = await store.aget((agent, "notes"), "k1")
            assert item is not None and item.value == {"text": f"{agent} grows chillies now"}
            assert sorted(i.key for i in await store.asearch((agent,))) == ["k1", "k2"]
        hits = await store.asearch(("cy", "notes"), query="grows chillies")
        assert hits and hits[0].key == "k1"
        await store.adelete(("bo", "notes"), "k1")
        assert await store.aget(("bo", "notes"), "k1") is None
        assert await store.alist_namespaces(prefix=("bo",)) == [("bo", "notes", "old")]
        # A second store, as another process would be, folds the same items from the log.
        other = MemstreamStore(client)
        assert (await other.aget(("dee", "notes", "old"), "k2")) is not None
        assert await other.aget(("bo", "notes"), "k1") is None

        session = MemstreamSession("chat-7", client)
        said = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
        await session.add_items([*said, {"role": "user", "content": "hi"}])
        assert await session.get_items(limit=2) == [said[1], {"role": "user", "content": "hi"}]
        assert await session.pop_item() == {"role": "user", "content": "hi"}
        assert await MemstreamSession("chat-7", client).get_items() == said
