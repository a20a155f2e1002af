"""MCP at ``/mcp``, built on its first request: a start does not import the MCP SDK.

Importing the SDK and its types costs ~0.5 CPU s, a fifth of a restart from checkpoints at
100k memories (docs/benchmarks.md, "Restart and memory per memory"). The first ``/mcp``
request imports it (on a worker thread: the event loop keeps serving), builds the MCP app and
runs its session manager in a task of its own, which the host app's lifespan ends on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from typing import TYPE_CHECKING, Any

from starlette.types import Receive, Scope, Send

from memstream.api.services.ports import Engine

if TYPE_CHECKING:
    from memstream.api.faces.mcp import McpHttpApp


class McpOnDemand:
    """The ASGI app routed at ``/mcp``; ``aclose()`` in the host app's lifespan, after serving."""

    def __init__(self, engine: Engine, **options: Any) -> None:
        self._engine = engine
        self._options = options
        self.open()

    def open(self) -> None:
        """At each start of the host app: the next request builds and runs the MCP app anew."""
        self._app: McpHttpApp | None = None
        self._lock = asyncio.Lock()
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failed: BaseException | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self._app
        if app is None:
            app = await self._started()
        await app(scope, receive, send)

    async def _started(self) -> McpHttpApp:
        async with self._lock:
            if self._task is None:
                self._task = asyncio.create_task(self._serve(), name="memstream-mcp")
        await self._ready.wait()
        if self._app is None:
            raise RuntimeError("the MCP endpoint could not start") from self._failed
        return self._app

    async def _serve(self) -> None:
        try:
            mcp = await asyncio.to_thread(importlib.import_module, "memstream.api.faces.mcp")
            app: McpHttpApp
            app, lifespan = mcp.streamable_http_app(self._engine, **self._options)
            async with lifespan():
                self._app = app
                self._ready.set()
                await self._closing.wait()
        except BaseException as exc:
            self._failed = exc
            raise
        finally:
            self._ready.set()

    async def aclose(self) -> None:
        """End the session manager (if a request started it); later requests get the SDK-less
        app's answer: 503, the endpoint not running."""
        self._closing.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
