"""The few client calls the adapters make, as Protocols, and one async face over either client.

The adapters' logic is written once, against ``AsyncCalls``. A blocking ``Client`` gets there
through ``Blocking``: its calls run inline (inside a private event loop, for a sync LangGraph
batch) or in a worker thread (from a caller's running loop, so the loop is never blocked).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..client.results import (
    DeleteResult,
    HistoryResult,
    ListAgentsResult,
    RecallResult,
    StoreResult,
    UpdateResult,
)

T = TypeVar("T")


@runtime_checkable
class AsyncCalls(Protocol):
    """What the adapters ask of an ``AsyncClient``: the tools' names and argument names."""

    async def store(
        self,
        *,
        content: str,
        agent_id: str,
        id: str | None = None,
        metadata: dict[str, Any] | None = None,
        channel: str | None = None,
        project_id: str | None = None,
    ) -> StoreResult: ...

    async def update_memory(self, *, agent_id: str, memory_id: int, content: str) -> UpdateResult: ...

    async def delete_memory(self, *, agent_id: str, memory_id: int) -> DeleteResult: ...

    async def history(self, *, agent_id: str, since_offset: int = 0, limit: int = 1000) -> HistoryResult: ...

    async def recall(
        self,
        *,
        agent_id: str,
        query: str,
        limit: int = 10,
        project_id: str | None = None,
        full_content: bool = False,
    ) -> RecallResult: ...

    async def list_agents(self, *, prefix: str = "", limit: int = 1000) -> ListAgentsResult: ...


@runtime_checkable
class SyncCalls(Protocol):
    """The same calls on a blocking ``Client``."""

    def store(
        self,
        *,
        content: str,
        agent_id: str,
        id: str | None = None,
        metadata: dict[str, Any] | None = None,
        channel: str | None = None,
        project_id: str | None = None,
    ) -> StoreResult: ...

    def update_memory(self, *, agent_id: str, memory_id: int, content: str) -> UpdateResult: ...

    def delete_memory(self, *, agent_id: str, memory_id: int) -> DeleteResult: ...

    def history(self, *, agent_id: str, since_offset: int = 0, limit: int = 1000) -> HistoryResult: ...

    def recall(
        self,
        *,
        agent_id: str,
        query: str,
        limit: int = 10,
        project_id: str | None = None,
        full_content: bool = False,
    ) -> RecallResult: ...

    def list_agents(self, *, prefix: str = "", limit: int = 1000) -> ListAgentsResult: ...


class Blocking:
    """``AsyncCalls`` over a blocking client. ``threaded``: each call runs in a worker thread
    (for callers on a live event loop); otherwise inline (for a loop of the adapter's own)."""

    def __init__(self, client: SyncCalls, *, threaded: bool) -> None:
        self.client = client
        self.threaded = threaded

    async def _run(self, fn: Callable[..., T], **kwargs: Any) -> T:
        if self.threaded:
            return await asyncio.to_thread(fn, **kwargs)
        return fn(**kwargs)

    async def store(
        self,
        *,
        content: str,
        agent_id: str,
        id: str | None = None,
        metadata: dict[str, Any] | None = None,
        channel: str | None = None,
        project_id: str | None = None,
    ) -> StoreResult:
        return await self._run(
            self.client.store,
            content=content,
            agent_id=agent_id,
            id=id,
            metadata=metadata,
            channel=channel,
            project_id=project_id,
        )

    async def update_memory(self, *, agent_id: str, memory_id: int, content: str) -> UpdateResult:
        return await self._run(self.client.update_memory, agent_id=agent_id, memory_id=memory_id, content=content)

    async def delete_memory(self, *, agent_id: str, memory_id: int) -> DeleteResult:
        return await self._run(self.client.delete_memory, agent_id=agent_id, memory_id=memory_id)

    async def history(self, *, agent_id: str, since_offset: int = 0, limit: int = 1000) -> HistoryResult:
        return await self._run(self.client.history, agent_id=agent_id, since_offset=since_offset, limit=limit)

    async def recall(
        self,
        *,
        agent_id: str,
        query: str,
        limit: int = 10,
        project_id: str | None = None,
        full_content: bool = False,
    ) -> RecallResult:
        return await self._run(
            self.client.recall,
            agent_id=agent_id,
            query=query,
            limit=limit,
            project_id=project_id,
            full_content=full_content,
        )

    async def list_agents(self, *, prefix: str = "", limit: int = 1000) -> ListAgentsResult:
        return await self._run(self.client.list_agents, prefix=prefix, limit=limit)


def is_async_client(client: object) -> bool:
    """An ``AsyncClient`` (its calls are coroutines) rather than a blocking ``Client``."""
    return inspect.iscoroutinefunction(getattr(client, "history", None))
