"""The client's HTTP transport: one pooled httpx client, JSON tool calls, retries, errors."""

from __future__ import annotations

import asyncio
import json
import time
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import httpx
import orjson

from .errors import MemstreamError, Unavailable, code_of_answer, error_for
from .retry import RETRY_STATUSES, RetryPolicy

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


def encode(args: dict[str, Any]) -> bytes:
    """The arguments as JSON, numbers as given: an integer past 64 bits or a NaN reaches the
    server, which refuses it by name (orjson would refuse the first and null the second)."""
    return json.dumps(args, ensure_ascii=True).encode()


def decode(response: httpx.Response) -> Any:
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return {"ok": False, "error": response.text[:500] or response.reason_phrase}


def answer(response: httpx.Response) -> dict[str, Any]:
    """The body of a 2xx answer; else the failure as its exception."""
    body = decode(response)
    status = response.status_code
    if 200 <= status < 300 and isinstance(body, dict):
        return body
    if 200 <= status < 300:
        raise MemstreamError("the server answered something that is not a JSON object", status=status, body=body)
    raise error_for(code_of_answer(status, body), body, status)


def unreachable(exc: httpx.TransportError, url: str) -> Unavailable:
    return Unavailable(f"could not reach memstream at {url}: {type(exc).__name__}: {exc}", code="unavailable")


def never_sent(exc: httpx.TransportError) -> bool:
    """The request cannot have reached the server: safe to send again whatever it was."""
    return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)


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
        body = encode(args)
        attempt = 0
        while True:
            try:
                response = self.http.post(
                    f"/v1/tools/{tool}", content=body, headers={"content-type": "application/json"}
                )
            except httpx.TransportError as exc:
                if attempt >= self.policy.retries or not (idempotent or never_sent(exc)):
                    raise unreachable(exc, self.base_url) from exc
                time.sleep(self.policy.delay(attempt))
                attempt += 1
                continue
            if response.status_code in RETRY_STATUSES and idempotent and attempt < self.policy.retries:
                time.sleep(self.policy.delay(attempt, response.headers.get("retry-after")))
                attempt += 1
                continue
            return answer(response)

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
        body = encode(args)
        attempt = 0
        while True:
            try:
                response = await self.http.post(
                    f"/v1/tools/{tool}", content=body, headers={"content-type": "application/json"}
                )
            except httpx.TransportError as exc:
                if attempt >= self.policy.retries or not (idempotent or never_sent(exc)):
                    raise unreachable(exc, self.base_url) from exc
                await asyncio.sleep(self.policy.delay(attempt))
                attempt += 1
                continue
            if response.status_code in RETRY_STATUSES and idempotent and attempt < self.policy.retries:
                await asyncio.sleep(self.policy.delay(attempt, response.headers.get("retry-after")))
                attempt += 1
                continue
            return answer(response)

    async def close(self) -> None:
        await self.http.aclose()
