"""The two faces contract tests run through: the HTTP JSON API and MCP (streamable HTTP),
both against a real server on loopback. A test written against ``Face`` runs unchanged on
either, which is how "same operations, same answers" is checked."""

from __future__ import annotations

import json
from typing import Any

import httpx


class HttpFace:
    name = "http"

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.client = httpx.AsyncClient(base_url=base_url, timeout=30, headers={"x-client-id": "tester"})

    async def call(self, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        r = await self.client.post(f"/v1/tools/{tool}", json=args or {})
        assert r.status_code < 500, f"{tool} answered HTTP {r.status_code}: {r.text}"
        body: dict[str, Any] = r.json()
        return body

    async def close(self) -> None:
        await self.client.aclose()


class McpFace:
    """One MCP session per call: slower than a shared one, but it keeps every call's transport
    lifecycle inside the calling task, which is what the SDK's task groups require."""

    name = "mcp"

    def __init__(self, base_url: str) -> None:
        self.url = f"{base_url}/mcp/"

    async def call(self, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        from mcp.client.session import ClientSession
        from mcp.client.streamable_http import streamablehttp_client

        async with streamablehttp_client(self.url, headers={"x-client-id": "tester"}) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool(tool, args or {})
        texts = [c.text for c in result.content if getattr(c, "type", "") == "text"]
        assert len(texts) == 1, f"{tool}: expected one text content, got {result.content!r}"
        body: dict[str, Any] = json.loads(texts[0])
        return body

    async def close(self) -> None:
        return None
