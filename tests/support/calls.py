"""Calling a tool on an in-process engine, as a face would, without a server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import Settings
from memstream.api.tools.dispatch import dispatch
from memstream.api.tools.registry import Caller
from tests.support.embedders import HashEmbedder


async def call(engine: EmbeddedEngine, tool: str, caller: Caller | None = None, **args: Any) -> dict[str, Any]:
    return await dispatch(engine, caller or Caller(client_id="test"), tool, args)


def filled(settings: Settings, agent: str, texts: Iterable[str]) -> None:
    """A data directory holding these stores, written by an engine started and closed around
    them (called outside an event loop)."""

    async def run() -> None:
        engine = EmbeddedEngine(settings, embedder=HashEmbedder())
        await engine.start()
        try:
            for text in texts:
                out = await call(engine, "store", agent_id=agent, content=text)
                assert out.get("result") == "stored", out
        finally:
            await engine.close()

    asyncio.run(run())
