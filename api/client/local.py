"""In-process mode: the embedded engine on a data directory, with no server (tests, notebooks).

``AsyncLocal`` runs the engine in the caller's event loop; ``ThreadedLocal`` gives blocking
calls by running that loop in a background thread of its own. Calls go through the same
``run_tool`` the servers use, so arguments are validated, refusals audited and failures coded
exactly as over HTTP.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from memstream.api import tools as _tools  # noqa: F401  (registers every tool)
from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import load_settings
from memstream.api.tools.dispatch import run_tool
from memstream.api.tools.registry import Caller

from .errors import error_for

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

    async def close(self) -> None:
        self._closed = True
        if self._started:
            self._started = False
            await self.engine.close()


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
