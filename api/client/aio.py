"""``AsyncClient``: the same methods as ``Client``, awaited, over HTTP or in the caller's loop."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from .base import DEFAULT_TIMEOUT, ClientBase
from .feed import AsyncEventStream, FeedCursor
from .methods import AsyncTools
from .remote import AsyncHttpTransport
from .retry import RetryPolicy

if TYPE_CHECKING:
    from memstream.api.services.embedding import Embedder


class AsyncTransport(Protocol):
    async def call(self, tool: str, args: dict[str, Any], idempotent: bool) -> dict[str, Any]: ...

    async def close(self) -> None: ...


class AsyncClient(ClientBase, AsyncTools):
    """``Client``'s async twin: ``await client.store(...)``; ``async with`` or ``await close()``."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        client_id: str | None = None,
        session_id: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = 4,
        backoff: float = 0.25,
        max_backoff: float = 8.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        policy = RetryPolicy(retries, backoff, max_backoff)
        headers = self._over_http(base_url, token, client_id, session_id, policy)
        self._transport: AsyncTransport = AsyncHttpTransport(self.base_url, headers, timeout, policy, transport)

    @classmethod
    def local(
        cls,
        data_dir: str | Path,
        *,
        embedder: Embedder | None = None,
        client_id: str = "local",
        session_id: str = "",
        settings: dict[str, Any] | None = None,
    ) -> AsyncClient:
        """The engine on ``data_dir`` in the caller's event loop, no server: it starts on the
        first call (or ``async with``) and is checkpointed and closed by ``close()``."""
        from .local import AsyncLocal

        self = cls.__new__(cls)
        self._in_process(data_dir)
        self._transport = AsyncLocal(
            data_dir, embedder=embedder, client_id=client_id, session_id=session_id, settings=settings
        )
        return self

    async def _invoke(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        sent, idempotent = self._prepared(tool, args)
        return await self._transport.call(tool, sent, idempotent)

    async def call(self, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """Any tool by name with its arguments as a dict: the answer's JSON."""
        return await self._invoke(tool, dict(args or {}))

    def events(
        self,
        agent_id: str | list[str] | None = None,
        *,
        types: str | list[str] | None = None,
        start: str | int | None = None,
        after: str | None = None,
        reconnect: bool = True,
    ) -> AsyncEventStream:
        """``Client.events`` as an async iterator (``async for event in client.events(...)``)."""
        self._check_open()
        cursor = FeedCursor(agent_id, types, start, after)
        if isinstance(self._transport, AsyncHttpTransport):
            return AsyncEventStream.over_http(self._transport.http, self.retry_policy, cursor, reconnect)
        from .local import AsyncLocal

        if not isinstance(self._transport, AsyncLocal):
            raise NotImplementedError(f"no change feed over {type(self._transport).__name__}")
        return AsyncEventStream(self._transport.events(cursor, reconnect), cursor)

    async def close(self) -> None:
        """Release the connection pool (or checkpoint and close the local engine). Idempotent."""
        if not self._closed:
            self._closed = True
            await self._transport.close()

    async def __aenter__(self) -> AsyncClient:
        start = getattr(self._transport, "start", None)
        if start is not None:
            await start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
