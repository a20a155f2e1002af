"""In-process mode: the embedded engine on a data directory, with no server (tests, notebooks).

``AsyncLocal`` runs the engine in the caller's event loop; ``ThreadedLocal`` gives blocking
calls by running that loop in a background thread of its own. Calls go through the same
``run_tool`` the servers use, so arguments are validated, refusals audited and failures coded
exactly as over HTTP.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Coroutine, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from memstream.api import tools as _tools  # noqa: F401  (registers every tool)
from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.feed import FeedCutOff
from memstream.api.services.settings import load_settings
from memstream.api.tools.dispatch import run_tool
from memstream.api.tools.registry import Caller

from .errors import Invalid, error_for
from .feed import FeedCursor, FeedEvent

if TYPE_CHECKING:
    from memstream.api.services.embedding import Embedder

T = TypeVar("T")


class AsyncLocal:
    """The engine opened on ``data_dir`` (settings from the environment, then ``settings``),
    started on first use or by ``start()``, closed (checkpointed) by ``close()``."""

    def __init__(
        self,
        data_dir: str | Path,
        *,
        embedder: Embedder | None = None,
        client_id: str = "local",
        session_id: str = "",
        settings: dict[str, Any] | None = None,
    ) -> None:
        config = load_settings(**{**(settings or {}), "data_dir": Path(data_dir)})
        self.engine = EmbeddedEngine(config, embedder=embedder)
        self.caller = Caller(client_id=client_id, session_id=session_id)
        self._started = False
        self._closed = False
        self._starting: asyncio.Lock | None = None

    async def start(self) -> None:
        if self._closed:
            raise RuntimeError("this local client is closed")
        if self._started:
            return
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if not self._started:
                await self.engine.start()
                self._started = True

    async def call(self, tool: str, args: dict[str, Any], idempotent: bool) -> dict[str, Any]:
        await self.start()
        body, code = await run_tool(self.engine, self.caller, tool, args)
        if code is None:
            return body
        raise error_for(code, body)

    async def events(self, cursor: FeedCursor, reconnect: bool = True) -> AsyncGenerator[FeedEvent, None]:
        """The engine's change feed (api/services/feed.py) from where ``cursor`` stands; a
        cut-off (this subscriber fell ``feed_buffer`` events behind) subscribes again from the
        event it was not given, as the HTTP client resumes. Ends when the engine closes."""
        await self.start()
        types = [t for t in (cursor.types or "").split(",") if t.strip()] or None
        while True:
            cursor.connections += 1
            subscription = self.engine.feed.subscribe(
                agents=cursor.agents or None,
                types=[t.strip() for t in types] if types else None,
                start=_offset(cursor.after, "after", 1) if cursor.after is not None else _offset(cursor.at, "start"),
                buffer=self.engine.settings.feed_buffer,
            )
            try:
                async with subscription:
                    async for item in subscription:
                        cursor.after = item.position
                        yield FeedEvent.model_validate({**item.entry, "position": item.position})
                return
            except FeedCutOff as cut:
                cursor.at, cursor.after = cut.position, None
                cursor.cutoffs += 1
                if not reconnect:
                    return

    async def close(self) -> None:
        self._closed = True
        if self._started:
            self._started = False
            await self.engine.close()


def _offset(position: str | None, what: str, past: int = 0) -> int | None:
    """A position of the embedded feed (a log offset in decimal) as the offset to start at."""
    if position is None:
        return None
    text = position.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise Invalid(f"{what} must be a log offset (a decimal integer, 0 or more); got {position[:40]!r}")
    return int(text) + past


class ThreadedLocal:
    """``AsyncLocal`` behind blocking calls: its event loop runs in a daemon thread."""

    def __init__(self, inner: AsyncLocal) -> None:
        self.inner = inner
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="memstream-local", daemon=True)
        self.thread.start()
        self._closed = False
        try:
            self._run(inner.start())
        except BaseException:
            self._stop()
            raise

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def call(self, tool: str, args: dict[str, Any], idempotent: bool) -> dict[str, Any]:
        if self._closed:
            raise RuntimeError("this local client is closed")
        return self._run(self.inner.call(tool, args, idempotent))

    def events(self, cursor: FeedCursor, reconnect: bool = True) -> Generator[FeedEvent, None, None]:
        """``AsyncLocal.events`` pulled one event at a time across to the engine's thread."""
        events = self.inner.events(cursor, reconnect)
        try:
            while True:
                try:
                    yield self._run(events.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            if not self._closed:
                self._run(events.aclose())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self.inner.close())
        finally:
            self._stop()

    def _stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()
