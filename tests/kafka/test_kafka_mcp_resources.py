"""MCP resources in Kafka mode: the router serves them, each read forwarded to the worker owning
the agent like the tool it runs, and announces changes read from the events topic (the feed
behind its GET /v1/events), on a handshake session and on subscriptions/listen (docs/mcp.md,
"Resources and subscriptions")."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
import warnings
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import TypeVar

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from memstream.api.faces.mcp_resources import memories_uri, memory_uri
from tests.support.deployment import Deployment, shared_deployment

PARTITIONS = 4
T = TypeVar("T")
pytestmark = [pytest.mark.kafka, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


@pytest.fixture(scope="module")
def router_url() -> Iterator[str]:
    with shared_deployment() as url:
        yield url


async def _within(seconds: float, what: str, waited: Awaitable[T]) -> T:
    """``waited``'s result; at the deadline a failure naming ``what`` (not a bare TimeoutError
    in an ExceptionGroup, which does not say which of a test's waits it was)."""
    try:
        async with asyncio.timeout(seconds):
            return await waited
    except TimeoutError:
        raise AssertionError(f"no {what} within {seconds:.0f} s") from None


def _text(result: types.CallToolResult | types.ReadResourceResult) -> dict[str, object]:
    if isinstance(result, types.ReadResourceResult):
        block = result.contents[0]
        assert isinstance(block, types.TextResourceContents)
        return dict(json.loads(block.text))
    content = result.content[0]
    assert isinstance(content, types.TextContent)
    return dict(json.loads(content.text))


async def test_router_serves_resources(router_url: str) -> None:
    agents = [f"kres-{uuid.uuid4().hex[:8]}" for _ in range(3)]  # on different partitions, likely
    async with (
        asyncio.timeout(120),
        httpx2.AsyncClient(headers={"X-Client-Id": "kres"}, timeout=httpx2.Timeout(60.0)) as http,
        Client(streamable_http_client(f"{router_url}/mcp", http_client=http), mode="legacy") as client,
    ):
        caps = client.server_capabilities.resources
        assert caps is not None and caps.subscribe
        ids = {}
        for agent in agents:
            stored = _text(await client.call_tool("store", {"agent_id": agent, "content": f"{agent} was here"}))
            assert stored.get("result") == "stored", stored
            ids[agent] = int(str(stored["id"]))
        edited = {"agent_id": agents[0], "memory_id": ids[agents[0]], "content": "edited on its worker"}
        assert _text(await client.call_tool("update_memory", edited)).get("ok") is True

        listed = {r.uri for r in (await client.list_resources()).resources}
        assert {memories_uri(a) for a in agents} <= listed
        for agent in agents:
            page = _text(await client.read_resource(memories_uri(agent)))
            contents = [m["content"] for m in page["memories"]]  # type: ignore[attr-defined]
            assert contents == (["edited on its worker"] if agent == agents[0] else [f"{agent} was here"])
        one = _text(await client.read_resource(memory_uri(agents[0], ids[agents[0]])))
        versions = [v["content"] for v in one["versions"]]  # type: ignore[attr-defined]
        assert versions == [f"{agents[0]} was here", "edited on its worker"]


async def test_router_announces_changes_from_the_events_topic(router_url: str) -> None:
    agent, other = (f"knot-{uuid.uuid4().hex[:8]}" for _ in range(2))
    arrived: asyncio.Queue[str] = asyncio.Queue()

    async def handler(message: object) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            arrived.put_nowait(message.params.uri)

    async with (
        asyncio.timeout(180),
        httpx2.AsyncClient(headers={"X-Client-Id": "knot"}, timeout=httpx2.Timeout(60.0)) as http,
        Client(streamable_http_client(f"{router_url}/mcp", http_client=http), mode="auto") as writer,
        httpx2.AsyncClient(headers={"X-Client-Id": "knot-w"}, timeout=httpx2.Timeout(60.0)) as whttp,
        Client(
            streamable_http_client(f"{router_url}/mcp", http_client=whttp), mode="legacy", message_handler=handler
        ) as watcher,
    ):
        stored = _text(await writer.call_tool("store", {"agent_id": agent, "content": "watched on a worker"}))
        mid = int(str(stored["id"]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await watcher.subscribe_resource(memory_uri(agent, mid))
            with pytest.raises(MCPError, match="unknown resource"):
                await watcher.subscribe_resource("memstream://agents/")
        # The session's GET stream opens on its own: edit until one update is announced.
        for attempt in range(30):
            await writer.call_tool("update_memory", {"agent_id": agent, "memory_id": mid, "content": f"edit {attempt}"})
            try:
                async with asyncio.timeout(2):
                    assert await arrived.get() == memory_uri(agent, mid)
                break
            except TimeoutError:
                continue
        else:
            raise AssertionError("no update was announced through the router")
        while not arrived.empty():
            arrived.get_nowait()
        await writer.call_tool("store", {"agent_id": other, "content": "not watched"})
        await writer.call_tool("store", {"agent_id": agent, "content": "another memory, not watched"})
        await writer.call_tool("update_memory", {"agent_id": agent, "memory_id": mid, "content": "last edit"})
        assert await _within(30, "announcement of the last edit", arrived.get()) == memory_uri(agent, mid)
        late = [arrived.get_nowait() for _ in range(arrived.qsize())]  # a warm-up edit's, if any
        assert set(late) <= {memory_uri(agent, mid)}, late

        # 2026-07-28: subscriptions/listen on the router.
        async with writer.listen(resource_subscriptions=[memories_uri(agent)]) as sub:
            await writer.call_tool("store", {"agent_id": agent, "content": "listened to"})
            event = await _within(30, "event on the listen stream", anext(sub))
            assert event.uri == memories_uri(agent)  # type: ignore[union-attr]


async def test_stdio_router_announces_changes(deployment: Deployment, tmp_path: Path) -> None:
    """``memstream mcp --kafka``: a stdio host's subscription follows the events topic; the
    stores come from another client, through the deployment's HTTP router."""
    deployment.worker()
    deployment.router()
    await deployment.ready()
    arrived: asyncio.Queue[str] = asyncio.Queue()

    async def handler(message: object) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            arrived.put_nowait(message.params.uri)

    args = ["-m", "memstream.api.cli", "mcp", *deployment.kafka_args]
    # Its environment, not the MCP client's default one: it carries the deployment's master key.
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(tmp_path), env=dict(os.environ))
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with (
            asyncio.timeout(180),
            Client(stdio_client(params, errlog=errlog), mode="legacy", message_handler=handler) as host,
            httpx2.AsyncClient(headers={"X-Client-Id": "kst"}, timeout=httpx2.Timeout(60.0)) as http,
            Client(streamable_http_client(f"{deployment.url}/mcp", http_client=http), mode="auto") as writer,
        ):
            stored = _text(await writer.call_tool("store", {"agent_id": "ada", "content": "seen from stdio"}))
            mid = int(str(stored["id"]))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                await host.subscribe_resource(memories_uri("ada"))
            # The subscribe was answered with its consumer in place: this store is announced.
            await writer.call_tool("store", {"agent_id": "bob", "content": "not watched"})
            await writer.call_tool("update_memory", {"agent_id": "ada", "memory_id": mid, "content": "edited"})
            assert await _within(60, "announcement through the stdio host", arrived.get()) == memories_uri("ada")
            page = _text(await host.read_resource(memories_uri("ada")))
            assert [m["content"] for m in page["memories"]] == ["edited"]  # type: ignore[attr-defined]
