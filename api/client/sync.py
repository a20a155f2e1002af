"""``Client``: blocking calls to memstream over HTTP, or to an engine in this process."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from .base import DEFAULT_TIMEOUT, ClientBase
from .feed import EventStream, FeedCursor
from .methods import SyncTools
from .remote import HttpTransport
from .retry import RetryPolicy

if TYPE_CHECKING:
    from memstream.api.services.embedding import Embedder


class SyncTransport(Protocol):
    def call(self, tool: str, args: dict[str, Any], idempotent: bool) -> dict[str, Any]: ...

    def close(self) -> None: ...


class Client(ClientBase, SyncTools):
    """A memstream server at ``base_url`` (``memstream serve``, embedded or ``--kafka``).

    Every tool is a method (``client.store("agent", "text")``, ``client.recall(agent_id=...,
    query=...)``) answering a pydantic model; a failure raises a ``MemstreamError`` subclass.
    ``token`` is sent as ``Authorization: Bearer`` (ACL mode); without one, ``client_id`` is
    sent as ``X-Client-Id``. Writes carry a ``command_id`` (generated when not given) and, like
    reads, are retried on 503 and lost connections with exponential backoff (``retries`` times).
    One connection pool serves every call; ``close()`` (or ``with``) releases it."""

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
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        policy = RetryPolicy(retries, backoff, max_backoff)
        headers = self._over_http(base_url, token, client_id, session_id, policy)
        self._transport: SyncTransport = HttpTransport(self.base_url, headers, timeout, policy, transport)

    @classmethod
    def local(
        cls,
        data_dir: str | Path,
        *,
        embedder: Embedder | None = None,
        client_id: str = "local",
        session_id: str = "",
        settings: dict[str, Any] | None = None,
    ) -> Client:
        """The engine on ``data_dir`` in this process, no server: its event loop runs in a
        background thread. ``settings`` override the environment's (``MEMSTREAM_*``);
        ``embedder`` replaces the configured model."""
        from .local import AsyncLocal, ThreadedLocal

        self = cls.__new__(cls)
        self._in_process(data_dir)
        inner = AsyncLocal(data_dir, embedder=embedder, client_id=client_id, session_id=session_id, settings=settings)
        self._transport = ThreadedLocal(inner)
        return self

    def _invoke(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        sent, idempotent = self._prepared(tool, args)
        return self._transport.call(tool, sent, idempotent)

    def call(self, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """Any tool by name with its arguments as a dict (say, one newer than this client):
        the answer's JSON, failures raised as for the methods."""
        return self._invoke(tool, dict(args or {}))

    def events(
        self,
        agent_id: str | list[str] | None = None,
        *,
        types: str | list[str] | None = None,
        start: str | int | None = None,
        after: str | None = None,
        reconnect: bool = True,
    ) -> EventStream:
        """The change feed (``GET /v1/events``): events as they are written, in log order.
        ``agent_id``: one agent or several (none: every agent the caller may read); ``types``:
        event types (``"memory.stored,memory.updated"`` or a list; none: all). ``start``: the
        position of the first event to deliver; ``after``: a position already seen (deliver
        what follows it); neither: from now on. A dropped connection or a server's cut-off is
        resumed where the stream stood (``reconnect=False``: the iteration ends instead)."""
        self._check_open()
        cursor = FeedCursor(agent_id, types, start, after)
        if isinstance(self._transport, HttpTransport):
            return EventStream.over_http(self._transport.http, self.retry_policy, cursor, reconnect)
        from .local import ThreadedLocal

        if not isinstance(self._transport, ThreadedLocal):
            raise NotImplementedError(f"no change feed over {type(self._transport).__name__}")
        return EventStream(self._transport.events(cursor, reconnect), cursor)

    def close(self) -> None:
        """Release the connection pool (or stop the local engine, checkpointing it). Idempotent."""
        if not self._closed:
            self._closed = True
            self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
