"""``POST /v1/tools/<name>`` and the context routes as a plain ASGI endpoint.

Why: with the default embedder, 8 clients on 2 cores share the cores with the model, so every
millisecond a store spends outside the model lowers the rate the clients reach against the
model's own (issue 19). FastAPI's stack around a tool call (its error, telemetry and body-limit
middlewares, the exception middleware, the exit stack, the router, ``Request`` and
``Response`` objects) was about a tenth of the event loop's time per store and does nothing a
tool call needs. ``MemstreamApp`` (api/faces/http.py) hands these requests here behind the same
``OriginGuard`` and ``BearerAuth`` the middleware stack runs, so a request is refused, read,
answered and audited exactly as through FastAPI: the same statuses, headers and bodies.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memstream.api.faces.auth import scope_caller
from memstream.api.services.metrics import FACE
from memstream.api.services.ports import Engine
from memstream.api.tools.dispatch import failure, parse_arguments, refuse, run_tool
from memstream.api.tools.registry import REGISTRY, Caller

log = logging.getLogger(__name__)

# The HTTP status of each failure code ``run_tool`` reports.
STATUS = {
    "invalid": 400,
    "unknown_tool": 404,
    "not_found": 404,
    "permission_denied": 403,
    "locked": 409,
    "conflict": 409,
    "too_large": 413,
    "log_unavailable": 503,
    "embedding_unavailable": 503,
    "internal": 500,
}

# A failed tool call names its failure code here too, so a client need not tell codes that
# share a status (404, 409, 503) apart by the text (api/client/errors.py reads it).
ERROR_HEADER = "memstream-error"

# Routes outside /v1/tools that serve one tool each, under the path its source names
# (seed 002's ``POST /context/packet``; the token-budgeted package beside it).
TOOL_ROUTES = {"/context/packet": "context_packet", "/context/package": "context_package"}
TOOLS_PREFIX = "/v1/tools/"

# The largest tool-call body a face reads: the MCP SDK's limit for its own face (a test keeps the
# two equal). A larger body is refused with 413 as soon as it is known to be larger (its
# Content-Length, else the bytes read so far) instead of being buffered whole.
MAX_BODY_BYTES = 4 * 1024 * 1024

# The request headers a tool call reads (names as the ASGI server gives them: lowercase).
SESSION_HEADER = b"x-session-id"
CLIENT_HEADER = b"x-client-id"
IDEMPOTENCY_HEADER = b"idempotency-key"
_READ = (SESSION_HEADER, CLIENT_HEADER, IDEMPOTENCY_HEADER)


def tool_of(path: str) -> str | None:
    """The tool a path serves (as the route ``/v1/tools/{name}`` matches it: one non-empty
    segment), or None when it serves none."""
    if path.startswith(TOOLS_PREFIX):
        name = path[len(TOOLS_PREFIX) :]
        return name if name and "/" not in name else None
    return TOOL_ROUTES.get(path)


def make_caller(scope: Any, session: str | None, client: str | None) -> Caller:
    """The caller of a request: in ACL mode the token's client (``X-Client-Id`` is ignored),
    else the client it names; either way with the session it names."""
    session_id = (session or "")[:256]
    authenticated = scope_caller(scope, session_id)
    if authenticated is not None:
        return authenticated
    return Caller(client_id=(client or "anonymous")[:256], session_id=session_id)


async def tool_answer(
    engine: Engine, caller: Callable[[], Caller], name: str, raw: bytes, key: str | None
) -> tuple[dict[str, Any], int, str | None]:
    """A tool call's answer from its raw body: the body, its HTTP status and failure code."""
    try:  # numbers as written, lone surrogates kept: dispatch refuses them by name, as over MCP
        args = parse_arguments(raw)
    except ValueError as exc:  # refused and audited like any bad call (H4)
        body = await refuse(engine, caller(), name, raw[:512], f"invalid JSON body: {exc}")
        return body, 400, None
    tool = REGISTRY.get(name)
    if key and tool is not None and tool.writes and isinstance(args, dict) and "command_id" not in args:
        args["command_id"] = key  # the HTTP spelling of a command id (W9)
    FACE.set("http")
    body, code = await run_tool(engine, caller(), name, args)
    return body, 200 if code is None else STATUS.get(code, 400), code


def response_messages(body: Any, status: int, code: str | None) -> tuple[Message, Message]:
    """The two ASGI messages of a JSON answer, headers as Starlette's ``Response`` writes them."""
    encoded = orjson.dumps(body)
    headers = [] if code is None else [(ERROR_HEADER.encode(), code.encode("latin-1"))]
    headers += [(b"content-length", str(len(encoded)).encode()), (b"content-type", b"application/json")]
    return (
        {"type": "http.response.start", "status": status, "headers": headers},
        {"type": "http.response.body", "body": encoded},
    )


class ToolEndpoint:
    """The tool routes' endpoint. ``engine`` gives the app's engine (set by its lifespan)."""

    def __init__(self, engine: Callable[[], Engine]) -> None:
        self.engine = engine

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = tool_of(scope["path"])
        assert name is not None, "MemstreamApp routes only tool paths here"
        found: dict[bytes, str] = {}
        for key, value in scope["headers"]:
            if key in _READ and key not in found:
                found[key] = value.decode("latin-1")

        answer = await request_answer(
            self.engine(),
            lambda: make_caller(scope, found.get(SESSION_HEADER), found.get(CLIENT_HEADER)),
            name,
            receive,
            scope["headers"],
            found.get(IDEMPOTENCY_HEADER),
        )
        if answer is None:  # the client went away: nothing to answer
            return
        body, status, code = answer
        for message in response_messages(body, status, code):
            await send(message)


class BodyTooLarge(Exception):
    """A request body over ``MAX_BODY_BYTES``; ``head``: its first bytes, for the audit."""

    def __init__(self, head: bytes) -> None:
        super().__init__(f"request body over {MAX_BODY_BYTES} bytes")
        self.head = head


def declared_length(headers: Iterable[tuple[bytes, bytes]]) -> int | None:
    """The body length a request's Content-Length declares (None: none, or not a number)."""
    for key, value in headers:
        if key == b"content-length":
            return int(value) if value.isdigit() else None
    return None


async def read_body(receive: Receive, headers: Iterable[tuple[bytes, bytes]] = ()) -> bytes | None:
    """The whole request body, or None if the client disconnected first. Raises BodyTooLarge,
    before reading anything when the declared length is over the limit, else once the bytes
    read pass it: at most the limit and one chunk are ever held."""
    declared = declared_length(headers)
    if declared is not None and declared > MAX_BODY_BYTES:
        raise BodyTooLarge(b"")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise BodyTooLarge((chunks[0] if chunks else chunk)[:512])
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def request_answer(
    engine: Engine,
    caller: Callable[[], Caller],
    name: str,
    receive: Receive,
    headers: Iterable[tuple[bytes, bytes]],
    key: str | None,
) -> tuple[dict[str, Any], int, str | None] | None:
    """``tool_answer`` of a request's body, read within the limit (over it: a 413, refused and
    audited like any bad call, H4); None if the client went away first."""
    try:
        raw = await read_body(receive, headers)
    except BodyTooLarge as exc:
        return await refuse(engine, caller(), name, exc.head, str(exc)), 413, "too_large"
    if raw is None:
        return None
    return await tool_answer(engine, caller, name, raw, key)


class Crashproof:
    """What FastAPI's outermost error middleware does for these routes: an exception that
    escapes is logged and answered as the app's catch-all handler answers it (a 500 in the
    tools' failure shape), unless a response has already started."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            log.exception("unhandled error on %s", scope.get("path"))
            if not started:
                for message in response_messages(failure("internal error; the server log has the details"), 500, None):
                    await send(message)
