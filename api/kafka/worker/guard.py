"""A worker's answers to routers only: the worker-token guard and the record-owner route the
routers' grant checks ask (why the router enforces grants: api/kafka/router/gate.py)."""

from __future__ import annotations

import hmac
import logging
from typing import Protocol

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from memstream.api.faces.http import json_response
from memstream.api.kafka.wire import OWNER_PATH, WORKER_TOKEN_HEADER
from memstream.api.services.settings import Settings
from memstream.api.tools.dispatch import failure
from memstream.streams.events import parse_ref
from memstream.streams.log.port import LogUnavailable

log = logging.getLogger(__name__)


class OwnerLookup(Protocol):
    """The worker, as the owner route asks it."""

    worker_id: str

    async def owner_in_partition(self, kind: str, ident: int) -> tuple[bool, str | None]: ...


def owner_route(worker: OwnerLookup) -> Route:
    """``POST /v1/owner {"ref": "mem:<id>"}`` → ``{"owner": agent_id | null}``: the owner of a
    record of this worker's partitions, for the routers' grant checks (421 when not held here)."""

    async def owner(request: Request) -> Response:
        try:
            kind, ident = parse_ref(orjson.loads(await request.body())["ref"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            return json_response(failure(f"invalid owner lookup: {exc}"), 400)
        try:
            held, agent = await worker.owner_in_partition(kind, ident)
        except (TimeoutError, LogUnavailable) as exc:  # read models catching up, or the topic unread
            return json_response(failure(f"log_unavailable: {exc}"), 503)
        if not held:
            return json_response(failure("not_owner", node=worker.worker_id), 421)
        return json_response({"owner": agent})

    return Route(OWNER_PATH, owner, methods=["POST"])


class WorkerGuard:
    """ASGI middleware of a worker with ``MEMSTREAM_WORKER_TOKEN``: 401 unless the request
    carries the token (compared in constant time; never logged)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode("ascii")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        presented = b""
        for key, value in scope.get("headers") or ():
            if key.lower() == WORKER_TOKEN_HEADER.encode():
                presented = value
                break
        if hmac.compare_digest(presented, self.token):
            await self.app(scope, receive, send)
            return
        log.warning("401 on worker %s: %s worker token", scope.get("path"), "wrong" if presented else "no")
        body = orjson.dumps({"ok": False, "error": "unauthorized"})
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def guard_worker(app: Starlette, settings: Settings) -> None:
    """Install :class:`WorkerGuard` on a worker's app when the settings carry a worker token."""
    if settings.worker_token is not None:
        app.add_middleware(WorkerGuard, token=settings.worker_token.get_secret_value())
