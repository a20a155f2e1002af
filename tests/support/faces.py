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
        # ensure_ascii: a lone surrogate travels as a \\u escape, as a real client would send it.
        raw = json.dumps(args or {}, ensure_ascii=True).encode()
        r = await self.client.post(f"/v1/tools/{tool}", content=raw, headers={"content-type": "application/json"})
        assert r.status_code < 500, f"{tool} answered HTTP {r.status_code}: {r.text}"
        body: dict[str, Any] = r.json()
        return body

    async def close(self) -> None:
        await self.client.aclose()


class McpFace:
    """MCP over streamable HTTP through the SDK's own client. One client per call: it keeps
    every call's transport lifecycle inside the calling task, as the SDK's task groups need."""

    name = "mcp"

    def __init__(self, base_url: str) -> None:
        self.url = f"{base_url}/mcp"

    async def call(self, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async with (
            httpx2.AsyncClient(headers={"x-client-id": "tester"}, timeout=httpx2.Timeout(30.0)) as http,
            Client(streamable_http_client(self.url, http_client=http)) as client,
        ):
            result = await client.call_tool(tool, args or {})
        texts = [c.text for c in result.content if getattr(c, "type", "") == "text"]
        assert len(texts) == 1, f"{tool}: expected one text content, got {result.content!r}"
        body: dict[str, Any] = json.loads(texts[0])
        return body

    async def close(self) -> None:
        return None
