"""``memstream mcp``: what the stdio MCP face serves, composed here: the embedded engine, or a
Kafka router (``--kafka``) that forwards every call to the worker owning its agent."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import uuid
from typing import Any

from memstream.api.faces.auth import stdio_caller
from memstream.api.faces.mcp import CallerFactory, ToolService, engine_changes, run_stdio, stdio_caller_factory
from memstream.api.faces.mcp_resources import AgentChanges, source_changes
from memstream.api.kafka.router.app import RouterEngine
from memstream.api.kafka.router.feed import KafkaFeed
from memstream.api.services.acl import AclConfig, AclConfigError, load_configured
from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import Settings, load_settings
from memstream.api.tools.dispatch import dispatch
from memstream.api.tools.registry import Caller
from memstream.streams.log.kafka import KafkaConfig

log = logging.getLogger(__name__)


class EmbeddedTools:
    """The embedded engine as a :class:`ToolService`: each call through ``dispatch``."""

    def __init__(self, engine: EmbeddedEngine) -> None:
        self.engine = engine

    async def start(self) -> None:
        await self.engine.start()

    async def close(self) -> None:
        await self.engine.close()

    async def call(self, caller: Caller, name: str, args: Any) -> dict[str, Any]:
        return await dispatch(self.engine, caller, name, args)


def stdio_callers(acl: AclConfig | None) -> CallerFactory:
    """Who calls over stdio: in ACL mode whoever spawned this process is CPersona's reserved
    ``local`` principal, with the grants of the file's ``local`` row (none without one);
    otherwise ``MEMSTREAM_CLIENT_ID`` (default ``stdio``)."""
    if acl is None:
        return stdio_caller_factory()
    local = stdio_caller(f"stdio-{uuid.uuid4().hex}")
    return lambda _request: local


def tool_service(settings: Settings, acl: AclConfig | None, kafka: KafkaConfig | None) -> ToolService:
    """With ``kafka`` there is no local engine: every call is forwarded to the worker owning its
    agent, as ``memstream serve --kafka`` does for HTTP, after the router checked the caller's
    grants in ACL mode (api/kafka/router/gate.py), as dispatch does for the embedded engine."""
    if kafka is not None:
        return RouterEngine(kafka, acl=acl, settings=settings)
    engine = EmbeddedEngine(settings)
    engine.acl = acl
    return EmbeddedTools(engine)


async def serve_stdio(settings: Settings | None = None, *, kafka: KafkaConfig | None = None) -> None:
    """Serve MCP over stdio until stdin closes. A malformed ACL file raises ``AclConfigError``
    before anything starts."""
    settings = settings if settings is not None else load_settings()
    acl = load_configured(settings)
    service = tool_service(settings, acl, kafka)
    await run_stdio(service, stdio_callers(acl), service_changes(service, kafka))


def service_changes(service: ToolService, kafka: KafkaConfig | None) -> AgentChanges | None:
    """The change feed resource subscriptions follow: the embedded engine's, or with ``kafka``
    the events topic, read as the router's ``GET /v1/events`` reads it."""
    if kafka is not None:
        return source_changes(KafkaFeed(kafka))
    return engine_changes(service.engine) if isinstance(service, EmbeddedTools) else None


def main() -> None:
    """Serve MCP over stdio from ``MEMSTREAM_*`` settings, logging to stderr (for a process that
    registers more tools before it serves; ``memstream mcp`` is the command)."""
    logging.basicConfig(
        level=os.environ.get("MEMSTREAM_LOG_LEVEL", "INFO").upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        asyncio.run(serve_stdio())
    except AclConfigError as exc:
        log.error("refusing to start: %s", exc)
        sys.exit(1)
