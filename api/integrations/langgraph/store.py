"""``MemstreamStore``: a LangGraph ``BaseStore`` whose items are memstream memories.

Each item is one memory: its value as JSON content (so recall searches it and ``update_memory``
replaces it in one event), its namespace and key in metadata, placed by ``Layout``. Reads come
from a fold of each agent's history (``ItemIndex``), kept current by reading only new events.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import cast

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

from ...client.errors import NotFound
from ..calls import AsyncCalls, Blocking, SyncCalls, is_async_client
from ..codec import encode
from ..feed import Feed
from .filters import passes, path_matches
from .index import MARK, Entry, ItemIndex
from .layout import Layout, check_key, msg_id

PUT_ATTEMPTS = 8  # looks at a key another writer keeps storing and deleting before giving up
RECALL_DEPTH = 100  # rows asked of recall per agent: the tool's maximum, so filters have room


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _item(entry: Entry) -> Item:
    return Item(
        value=entry.copy_value(),
        key=entry.key,
        namespace=entry.namespace,
        created_at=entry.created_at,
        updated_at=entry.updated_at,
    )


def _search_item(entry: Entry, score: float | None) -> SearchItem:
    return SearchItem(entry.namespace, entry.key, entry.copy_value(), entry.created_at, entry.updated_at, score)


class MemstreamStore(BaseStore):
    """A LangGraph store over a memstream ``Client`` or ``AsyncClient``.

    ``agent_id=None`` (the default): ``namespace[0]`` is the memstream agent, so each user or
    assistant a graph scopes by namespace is an agent of its own (its own partition, its own
    audit trail). ``agent_id="x"``: every namespace lives in agent ``x``.

    TTLs are not supported (``supports_ttl`` is False: memstream forgets only when told to);
    every item is indexed whole, so ``index`` arguments are accepted and have no effect.
    """

    supports_ttl = False

    def __init__(self, client: SyncCalls | AsyncCalls, *, agent_id: str | None = None) -> None:
        self.client = client
        self.layout = Layout(agent_id)
        self._async = is_async_client(client)
        self._feeds: dict[str, Feed] = {}
        self._feeds_lock = threading.Lock()
        # The loop an AsyncClient lives on: blocking calls from other threads are sent to it.
        self._loop: asyncio.AbstractEventLoop | None = _running_loop()

    # -- the two entry points BaseStore builds every method on ----------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        if self._async:
            loop = self._loop
            if loop is None or not loop.is_running() or _running_loop() is loop:
                raise RuntimeError(
                    "this MemstreamStore wraps an AsyncClient: call the async methods (abatch, aget, aput, "
                    "asearch, ...), or blocking ones from another thread while the store's event loop runs; "
                    "for blocking use, give it a Client"
                )
            return asyncio.run_coroutine_threadsafe(self._run(cast(AsyncCalls, self.client), ops), loop).result()
        calls = Blocking(cast(SyncCalls, self.client), threaded=False)
        if _running_loop() is None:
            return asyncio.run(self._run(calls, ops))
        with ThreadPoolExecutor(1) as pool:  # asyncio.run needs a thread with no loop running
            return pool.submit(asyncio.run, self._run(calls, ops)).result()

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        if self._async:
            self._loop = asyncio.get_running_loop()
            return await self._run(cast(AsyncCalls, self.client), ops)
        return await asyncio.to_thread(self.batch, ops)

    # -- the operations, in order -----------------------------------------------------------------

    async def _run(self, calls: AsyncCalls, ops: list[Op]) -> list[Result]:
        synced: set[str] = set()  # agents read since this batch last wrote to them
        results: list[Result] = []
        for op in ops:
            validate_op_namespace(op)
            if isinstance(op, GetOp):
                results.append(await self._get(calls, op, synced))
            elif isinstance(op, PutOp):
                await self._put(calls, op, synced)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(await self._search(calls, op, synced))
            elif isinstance(op, ListNamespacesOp):
                results.append(await self._list_namespaces(calls, op, synced))
            else:
                raise TypeError(f"unknown store operation {type(op).__name__}")
        return results

    async def _index(self, calls: AsyncCalls, agent: str, synced: set[str]) -> ItemIndex:
        with self._feeds_lock:
            feed = self._feeds.get(agent)
            if feed is None:
                feed = self._feeds[agent] = Feed(agent, ItemIndex())
        if agent not in synced:
            await feed.catch_up(calls)
            synced.add(agent)
        return cast(ItemIndex, feed.fold)

    async def _agents(self, calls: AsyncCalls, named: str | None) -> list[str]:
        if named is not None:
            return [named]
        listing = await calls.list_agents(prefix="", limit=10_000)
        return [a.agent_id for a in listing.agents]

    async def _get(self, calls: AsyncCalls, op: GetOp, synced: set[str]) -> Item | None:
        if not op.namespace:
            return None
        agent, _ = self.layout.place(op.namespace)
        entry = (await self._index(calls, agent, synced)).get(op.namespace, op.key)
        return _item(entry) if entry is not None else None

    async def _put(self, calls: AsyncCalls, op: PutOp, synced: set[str]) -> None:
        agent, project = self.layout.place(op.namespace)
        if op.value is None:
            entry = (await self._index(calls, agent, synced)).get(op.namespace, op.key)
            synced.discard(agent)
            if entry is not None:
                # Deleted by someone else meanwhile: the item is gone either way.
                with contextlib.suppress(NotFound):
                    await calls.delete_memory(agent_id=agent, memory_id=entry.memory_id)
            return
        check_key(op.key)
        content = encode(dict(op.value))
        for _ in range(PUT_ATTEMPTS):
            entry = (await self._index(calls, agent, synced)).get(op.namespace, op.key)
            synced.discard(agent)
            if entry is not None:
                if await self._replace(calls, agent, entry.memory_id, content, entry.content):
                    return
                continue  # deleted meanwhile: look again
            stored = await calls.store(
                content=content,
                agent_id=agent,
                id=msg_id(op.namespace, op.key),
                metadata={MARK: {"namespace": list(op.namespace), "key": op.key}},
                channel=op.key,
                project_id=project,
            )
            if stored.result != "stored" or stored.id is None:
                # Skipped: another writer stored this key since we looked. Look again and
                # update what it stored: the later put wins, as in any LangGraph store.
                continue
            if stored.truncated:
                await calls.delete_memory(agent_id=agent, memory_id=stored.id)
                raise ValueError(_too_long(op, content))
            return
        raise RuntimeError(f"could not put {op.namespace!r}/{op.key!r}: other writers kept changing it")

    async def _replace(self, calls: AsyncCalls, agent: str, memory_id: int, content: str, previous: str | None) -> bool:
        """Update in place; False when the memory is gone (then the caller stores anew)."""
        try:
            updated = await calls.update_memory(agent_id=agent, memory_id=memory_id, content=content)
        except NotFound:
            return False
        if updated.truncated:
            if previous is not None:
                await calls.update_memory(agent_id=agent, memory_id=memory_id, content=previous)
            raise ValueError(f"the value is too long for this server's content limit ({len(content)} characters)")
        return True

    async def _search(self, calls: AsyncCalls, op: SearchOp, synced: set[str]) -> list[SearchItem]:
        prefix = op.namespace_prefix
        found: list[tuple[Entry, float | None]] = []
        for agent in await self._agents(calls, self.layout.agent_of_prefix(prefix)):
            index = await self._index(calls, agent, synced)
            inside = [e for e in index.under(prefix) if passes(e.value, op.filter)]
            if not inside:
                continue
            if op.query:
                found += await self._recalled(calls, agent, op, index, inside)
            else:
                found += [(e, None) for e in inside]
        if op.query:
            found.sort(key=lambda pair: -(pair[1] if pair[1] is not None else float("-inf")))
        else:  # newest change first, as LangGraph's database stores list them
            found.sort(key=lambda pair: (pair[0].updated_at, pair[0].memory_id), reverse=True)
        return [_search_item(e, score) for e, score in found[op.offset : op.offset + op.limit]]

    async def _recalled(
        self, calls: AsyncCalls, agent: str, op: SearchOp, index: ItemIndex, inside: list[Entry]
    ) -> list[tuple[Entry, float | None]]:
        """The items recall finds for the query, best first, among those the prefix and filter keep."""
        prefix = op.namespace_prefix
        # One project holds every candidate: recall reads that project (and the agent's global pool).
        single = all(len(e.namespace) == len(prefix) for e in inside) and self.layout.project_of_prefix(prefix)
        answer = await calls.recall(
            agent_id=agent,
            query=cast(str, op.query),
            limit=RECALL_DEPTH,
            project_id=self.layout.project_of_prefix(prefix) if single else None,
        )
        keep = {e.memory_id for e in inside}
        out: list[tuple[Entry, float | None]] = []
        for hit in reversed(answer.messages):  # recall answers best last
            mid = hit.memory_id
            if mid is not None and mid in keep:
                score = (hit.match_reason or {}).get("score")
                out.append((index.by_id[mid], float(score) if isinstance(score, int | float) else None))
        return out

    async def _list_namespaces(
        self, calls: AsyncCalls, op: ListNamespacesOp, synced: set[str]
    ) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        named = None
        for cond in conditions:
            if cond.match_type == "prefix":
                named = self.layout.agent_of_prefix(tuple(cond.path))
        if self.layout.agent_id is not None:
            named = self.layout.agent_id
        spaces: set[tuple[str, ...]] = set()
        for agent in await self._agents(calls, named):
            spaces |= {e.namespace for e in (await self._index(calls, agent, synced)).by_key.values()}
        kept = [
            ns
            for ns in spaces
            if all(path_matches(ns, tuple(c.path), suffix=c.match_type == "suffix") for c in conditions)
        ]
        if op.max_depth is not None:
            kept = list({ns[: op.max_depth] for ns in kept})
        return sorted(kept)[op.offset : op.offset + op.limit]


def _too_long(op: PutOp, content: str) -> str:
    return (
        f"the value of {op.namespace!r}/{op.key!r} is too long for this server's content limit "
        f"({len(content)} characters as JSON); nothing was stored"
    )


__all__ = ["MemstreamStore"]
