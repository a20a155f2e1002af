"""Calling a tool on an in-process engine, as a face would, without a server."""

from __future__ import annotations

from typing import Any

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.tools.dispatch import dispatch
from memstream.api.tools.registry import Caller


async def call(engine: EmbeddedEngine, tool: str, caller: Caller | None = None, **args: Any) -> dict[str, Any]:
    return await dispatch(engine, caller or Caller(client_id="test"), tool, args)
