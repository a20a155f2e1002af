"""``MemstreamSession``: an OpenAI Agents SDK session whose items are memstream memories.

Each conversation item is one memory in channel ``session_id`` of the session's agent, its JSON
as content, marked in metadata; the session's order is the log's. Reads come from a fold of the
agent's history (``feed.py``), so two processes sharing a session see each other's items.
"""

from __future__ import annotations

import contextlib
import copy
import uuid
from typing import TYPE_CHECKING, Any, cast

from agents.memory.session_settings import SessionSettings, resolve_session_limit

from ...client.errors import Conflict, NotFound
from ...client.results import Event, StoreResult
from ..calls import AsyncCalls, Blocking, SyncCalls, is_async_client
from ..codec import decode, encode
from ..feed import Feed, deleted_ids, marker

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

MARK = "openai_agents"  # metadata: {"session_id": ..., "wrapped": bool}
MAX_NAME = 256


class SessionItems:
    """A session's live items in log order (memory id to item), folded from the agent's events."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.items: dict[int, Any] = {}  # insertion order is log order

    def apply(self, event: Event) -> None:
        if event.type == "memory.stored":
            mark = marker(event, MARK)
            mid, content = event.change.get("id"), event.change.get("content")
            if mark is None or mark.get("session_id") != self.session_id:
                return
            if not isinstance(mid, int) or not isinstance(content, str):
                return
            try:
                value = decode(content)
            except ValueError:
                return
            if mark.get("wrapped"):
                value = value.get("item") if isinstance(value, dict) else None
            if isinstance(value, dict):
                self.items[mid] = value
        for mid in deleted_ids(event):
            self.items.pop(mid, None)

    def latest(self, limit: int | None) -> list[tuple[int, Any]]:
        rows = list(self.items.items())
        if limit is None:
            return rows
        return rows[len(rows) - limit :] if limit > 0 else []


class MemstreamSession:
    """Conversation history in memstream, for ``Runner.run(..., session=...)``.

    ``agent_id`` defaults to ``session_id``: each conversation is an agent of its own. Give
    one to keep many sessions (each a channel) under one agent. ``client`` is a ``Client`` or an
    ``AsyncClient``; a blocking client's calls run in worker threads, off the event loop.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        client: SyncCalls | AsyncCalls,
        *,
        agent_id: str | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        if not session_id or len(session_id) > MAX_NAME:
            raise ValueError(f"session_id must have 1 to {MAX_NAME} characters (it is a memstream channel)")
        self.session_id = session_id
        self.agent_id = agent_id or session_id
        self.session_settings = session_settings or SessionSettings()
        self._calls: AsyncCalls = (
            cast(AsyncCalls, client) if is_async_client(client) else Blocking(cast(SyncCalls, client), threaded=True)
        )
        self._feed = Feed(self.agent_id, SessionItems(session_id))

    async def _items(self) -> SessionItems:
        await self._feed.catch_up(self._calls)
        return cast(SessionItems, self._feed.fold)

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The latest ``limit`` items (all when None and no default limit), oldest first."""
        rows = (await self._items()).latest(resolve_session_limit(limit, self.session_settings))
        return [cast("TResponseInputItem", copy.deepcopy(item)) for _, item in rows]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append in order. All or nothing: when one item cannot be stored, the ones this call
        stored are deleted again before the error is raised."""
        added: list[int] = []
        try:
            for item in items:
                added.append(await self._store(dict(item)))
        except BaseException:
            for mid in added:
                with contextlib.suppress(NotFound):
                    await self._calls.delete_memory(agent_id=self.agent_id, memory_id=mid)
            raise

    async def _store(self, item: dict[str, Any]) -> int:
        content = encode(item)
        answer: StoreResult | None
        try:
            answer = await self._calls.store(
                content=content,
                agent_id=self.agent_id,
                metadata={MARK: {"session_id": self.session_id}},
                channel=self.session_id,
            )
        except Conflict:  # the same text from another source in this bucket
            answer = None
        if answer is None or answer.result == "skipped":
            # The same item already stands in this session (a user saying "hi" twice): memstream
            # keeps one copy of a text per bucket, so a repeat is stored wrapped with a nonce.
            content = encode({"item": item, "nonce": uuid.uuid4().hex})
            answer = await self._calls.store(
                content=content,
                agent_id=self.agent_id,
                metadata={MARK: {"session_id": self.session_id, "wrapped": True}},
                channel=self.session_id,
            )
        if answer.id is None or answer.result != "stored":
            raise RuntimeError(f"memstream did not store the session item: {answer!r}")
        if answer.truncated:
            await self._calls.delete_memory(agent_id=self.agent_id, memory_id=answer.id)
            raise ValueError(
                f"a session item is too long for this server's content limit ({len(content)} characters "
                "as JSON); nothing was added"
            )
        return answer.id

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the most recent item; None when the session is empty. When another
        process pops the same item first, the next most recent one is taken."""
        while True:
            rows = (await self._items()).latest(1)
            if not rows:
                return None
            mid, item = rows[0]
            try:
                await self._calls.delete_memory(agent_id=self.agent_id, memory_id=mid)
            except NotFound:
                continue
            return cast("TResponseInputItem", copy.deepcopy(item))

    async def clear_session(self) -> None:
        for mid, _ in (await self._items()).latest(None):
            with contextlib.suppress(NotFound):
                await self._calls.delete_memory(agent_id=self.agent_id, memory_id=mid)


__all__ = ["MemstreamSession"]
