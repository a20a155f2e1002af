"""The few client calls the adapters make, as Protocols, and one async face over either client.

The adapters' logic is written once, against ``AsyncCalls``. A blocking ``Client`` gets there
through ``Blocking``: its calls run inline (inside a private event loop, for a sync LangGraph
batch) or in a worker thread (from a caller's running loop, so the loop is never blocked).
Each call's arguments are declared once, as a TypedDict (keyword arguments, as the adapters pass
them); the async and the blocking Protocol and ``Blocking`` only name the call and its answer.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NotRequired, Protocol, TypedDict, TypeVar, Unpack, runtime_checkable

from ..client.results import (
    DeleteResult,
    HistoryResult,
    ListAgentsResult,
    RecallResult,
    StoreResult,
    UpdateResult,
)

T = TypeVar("T")


class StoreArgs(TypedDict):
    content: str
    agent_id: str
    id: NotRequired[str | None]
    metadata: NotRequired[dict[str, Any] | None]
    channel: NotRequired[str | None]
    project_id: NotRequired[str | None]


class UpdateArgs(TypedDict):
    agent_id: str
    memory_id: int
    content: str


class DeleteArgs(TypedDict):
    agent_id: str
    memory_id: int


class HistoryArgs(TypedDict):
    agent_id: str
    since_offset: NotRequired[int]
    limit: NotRequired[int]


class RecallArgs(TypedDict):
    agent_id: str
    query: str
    limit: NotRequired[int]
    project_id: NotRequired[str | None]
    full_content: NotRequired[bool]


class ListAgentsArgs(TypedDict, total=False):
    prefix: str
    limit: int


@runtime_checkable
class AsyncCalls(Protocol):
    """What the adapters ask of an ``AsyncClient``: the tools' names and argument names."""

    async def store(self, **args: Unpack[StoreArgs]) -> StoreResult: ...

    async def update_memory(self, **args: Unpack[UpdateArgs]) -> UpdateResult: ...

    async def delete_memory(self, **args: Unpack[DeleteArgs]) -> DeleteResult: ...

    async def history(self, **args: Unpack[HistoryArgs]) -> HistoryResult: ...

    async def recall(self, **args: Unpack[RecallArgs]) -> RecallResult: ...

    async def list_agents(self, **args: Unpack[ListAgentsArgs]) -> ListAgentsResult: ...


@runtime_checkable
class SyncCalls(Protocol):
    """The same calls on a blocking ``Client``."""

    def store(self, **args: Unpack[StoreArgs]) -> StoreResult: ...

    def update_memory(self, **args: Unpack[UpdateArgs]) -> UpdateResult: ...

    def delete_memory(self, **args: Unpack[DeleteArgs]) -> DeleteResult: ...

    def history(self, **args: Unpack[HistoryArgs]) -> HistoryResult: ...

    def recall(self, **args: Unpack[RecallArgs]) -> RecallResult: ...

    def list_agents(self, **args: Unpack[ListAgentsArgs]) -> ListAgentsResult: ...


class Blocking:
    """``AsyncCalls`` over a blocking client. ``threaded``: each call runs in a worker thread
    (for callers on a live event loop); otherwise inline (for a loop of the adapter's own)."""

    def __init__(self, client: SyncCalls, *, threaded: bool) -> None:
        self.client = client
        self.threaded = threaded

    async def _run(self, fn: Callable[..., T], args: Any) -> T:
        if self.threaded:
            return await asyncio.to_thread(fn, **args)
        return fn(**args)

    async def store(self, **args: Unpack[StoreArgs]) -> StoreResult:
        return await self._run(self.client.store, args)

    async def update_memory(self, **args: Unpack[UpdateArgs]) -> UpdateResult:
        return await self._run(self.client.update_memory, args)

    async def delete_memory(self, **args: Unpack[DeleteArgs]) -> DeleteResult:
        return await self._run(self.client.delete_memory, args)

    async def history(self, **args: Unpack[HistoryArgs]) -> HistoryResult:
        return await self._run(self.client.history, args)

    async def recall(self, **args: Unpack[RecallArgs]) -> RecallResult:
        return await self._run(self.client.recall, args)

    async def list_agents(self, **args: Unpack[ListAgentsArgs]) -> ListAgentsResult:
        return await self._run(self.client.list_agents, args)


if TYPE_CHECKING:  # mypy checks that the real clients answer the Protocols (and Blocking the async one)
    from ..client import AsyncClient, Client

    def _conforms(sync: Client, aio: AsyncClient, blocking: Blocking) -> tuple[SyncCalls, AsyncCalls, AsyncCalls]:
        return sync, aio, blocking


def is_async_client(client: object) -> bool:
    """An ``AsyncClient`` (its calls are coroutines) rather than a blocking ``Client``."""
    return inspect.iscoroutinefunction(getattr(client, "history", None))
