"""The client's HTTP transports: one pooled httpx client each, sending what exchange.py decides."""

from __future__ import annotations

import asyncio
import time
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import httpx

from .exchange import Again, ToolExchange
from .retry import RetryPolicy

try:
    VERSION = version("memstream")
except PackageNotFoundError:  # run from a checkout that is not installed
    VERSION = "unknown"


def checked_url(base_url: str) -> str:
    """The server's base URL without a trailing slash; anything but http(s) is refused at once."""
    url = httpx.URL(base_url)
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"base_url must be an http:// or https:// URL with a host; got {base_url!r}")
    return base_url.rstrip("/")


def headers_for(token: str | None, client_id: str | None, session_id: str | None) -> dict[str, str]:
    """A bearer token names the caller (ACL mode); without one, ``X-Client-Id`` does."""
    out = {"user-agent": f"memstream-client/{VERSION}", "accept": "application/json"}
    if token:
        out["authorization"] = f"Bearer {token}"
    elif client_id:
        out["x-client-id"] = client_id
    if session_id:
        out["x-session-id"] = session_id
    return out


class HttpTransport:
    """Blocking calls over one ``httpx.Client`` (its pool keeps connections alive)."""

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str],
        timeout: float,
        policy: RetryPolicy,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = checked_url(base_url)
        self.policy = policy
        self.http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout, transport=transport)

    def call(self, tool: str, args: dict[str, Any], idempotent: bool) -> dict[str, Any]:
        exchange = ToolExchange(self.base_url, tool, args, idempotent, self.policy)
        while True:
            try:
                response = self.http.post(exchange.path, content=exchange.content, headers=exchange.headers)
            except httpx.TransportError as exc:
                outcome: dict[str, Any] | Again = exchange.lost(exc)
            else:
                outcome = exchange.answered(response)
            if not isinstance(outcome, Again):
                return outcome
            time.sleep(outcome.seconds)

    def close(self) -> None:
        self.http.close()


class AsyncHttpTransport:
    """The same calls over one ``httpx.AsyncClient``."""

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str],
        timeout: float,
        policy: RetryPolicy,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = checked_url(base_url)
        self.policy = policy
        self.http = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout, transport=transport)

    async def call(self, tool: str, args: dict[str, Any], idempotent: bool) -> dict[str, Any]:
        exchange = ToolExchange(self.base_url, tool, args, idempotent, self.policy)
        while True:
            try:
                response = await self.http.post(exchange.path, content=exchange.content, headers=exchange.headers)
            except httpx.TransportError as exc:
                outcome: dict[str, Any] | Again = exchange.lost(exc)
            else:
                outcome = exchange.answered(response)
            if not isinstance(outcome, Again):
                return outcome
            await asyncio.sleep(outcome.seconds)

    async def close(self) -> None:
        await self.http.aclose()
