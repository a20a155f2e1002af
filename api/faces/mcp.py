"""The MCP face: every registered tool over MCP, on stdio and on streamable HTTP, answering
exactly what dispatch (or, in Kafka mode, the router) answers, so a bad call is never a protocol
error. How it behaves, and how to mount it in an app: docs/mcp.md."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import re
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import replace
from importlib import metadata
from typing import Any, Protocol, cast

import anyio
import mcp_types as types
import orjson
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.types import Message, Receive, Scope, Send

import memstream.api.tools  # noqa: F401  (the package imports, and so registers, every tool)
from memstream.api.faces.auth import scope_caller
from memstream.api.faces.feed import EngineFeed
from memstream.api.faces.mcp_resources import AgentChanges, resource_handlers, source_changes
from memstream.api.services.feed import Feed
from memstream.api.services.metrics import FACE
from memstream.api.services.ports import Engine
from memstream.api.tools.dispatch import dispatch, failure, list_tools
from memstream.api.tools.registry import Caller

log = logging.getLogger(__name__)

SERVER_NAME = "memstream"

CallerFactory = Callable[[Any], Caller]
"""Who is calling: gets the Starlette ``Request`` of an HTTP call (``None`` on stdio).

Raise ``PermissionError`` to refuse the call; it is answered with the permission-denied shape.
"""

_MAX_CLIENT_ID = 256
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")

_ABSENT: Any = object()
# The raw ``arguments`` of a tools/call the SDK would refuse (see _keep_raw_arguments).
_RAW_ARGUMENTS: ContextVar[Any] = ContextVar("memstream_mcp_raw_arguments", default=_ABSENT)


def _version() -> str:
    try:
        return metadata.version("memstream")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0"


# -- callers ------------------------------------------------------------------------------------


def _clean_id(value: str | None) -> str | None:
    """A header value usable as a client id, or None: trimmed, printable, bounded."""
    if value is None:
        return None
    value = value.strip()
    if not value or len(value) > _MAX_CLIENT_ID or not value.isprintable():
        return None
    return value


def caller_from_headers(headers: Mapping[str, str] | None) -> Caller:
    """``Authorization: Bearer <token>``, else ``X-Client-Id``, else ``anonymous``.

    The token is passed through as the client id for now. Mapping tokens to identities is the
    ACL's job, and so is checking them.
    """
    if not headers:
        return Caller(client_id="anonymous")
    client_id = None
    auth = headers.get("authorization")
    if auth is not None:
        scheme, _, token = auth.strip().partition(" ")
        if scheme.lower() == "bearer":
            client_id = _clean_id(token)
    if client_id is None:
        client_id = _clean_id(headers.get("x-client-id"))
    session = _clean_id(headers.get("mcp-session-id")) or _clean_id(headers.get("x-session-id")) or ""
    return Caller(client_id=client_id or "anonymous", session_id=session)


def http_caller(request: Any) -> Caller:
    """The default caller factory of the HTTP face: in ACL mode the client the bearer token
    named (api/faces/auth.py), else :func:`caller_from_headers`."""
    caller = caller_from_headers(getattr(request, "headers", None))
    authenticated = scope_caller(getattr(request, "scope", None), caller.session_id)
    return authenticated if authenticated is not None else caller


def stdio_caller_factory(env: Mapping[str, str] | None = None) -> CallerFactory:
    """Every call on one stdio connection comes from ``MEMSTREAM_CLIENT_ID`` (default ``stdio``).

    In ACL mode use :func:`memstream.api.faces.auth.stdio_caller` instead: the ``local`` principal."""
    source = os.environ if env is None else env
    caller = Caller(
        client_id=_clean_id(source.get("MEMSTREAM_CLIENT_ID")) or "stdio",
        session_id=f"stdio-{uuid.uuid4().hex}",
    )
    return lambda _request: caller


# -- the server ---------------------------------------------------------------------------------


def encode_result(result: Any) -> str:
    """The JSON text of a dispatch result; never raises."""
    try:
        return orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        pass
    try:
        # orjson refuses lone surrogates (an echo of a bad input); stdlib JSON escapes them.
        return json.dumps(result, ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        log.error("tool result is not JSON-serializable: %s", exc)
        return orjson.dumps(failure("internal error; the server log has the details")).decode()


def _text_result(result: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=encode_result(result))], is_error=False)


# -- frames the SDK's strict JSON parser would refuse ------------------------------------------
#
# JSON lets a string carry an unpaired surrogate as an escape ("\udfff"). Such a string is not
# valid Unicode, and the SDK's JSON parser refuses the whole frame. On stdio the frame is then
# dropped without an answer and the client waits forever; on legacy HTTP it gets a 400 parse
# error. A tools/call whose arguments carry one is bad input, which is dispatch's to refuse
# and audit (W8, H4). rescue_frame() rewrites such a frame before the SDK parses it. The
# arguments are parked in _STASH and replaced by {}, and a token in params._meta lets
# _keep_raw_arguments hand the parked arguments to dispatch. Unpaired surrogates anywhere else
# in the frame are backslash-escaped, so the request is answered rather than dropped.

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")  # \ud800 ... \udfff
_STASH_KEY = "memstream/raw-arguments"
_STASH: dict[str, Any] = {}
_STASH_LIMIT = 1024


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= ch <= "\udfff" for ch in value)
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def _escape_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8") if _has_lone_surrogate(value) else value
    if isinstance(value, dict):
        return {_escape_surrogates(k): _escape_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escape_surrogates(v) for v in value]
    return value


def rescue_frame(text: str) -> str | None:
    """The rewritten JSON-RPC frame if ``text`` carries unpaired surrogates, else None (leave it)."""
    if not _SURROGATE_ESCAPE.search(text):
        return None
    try:
        msg = json.loads(text)  # unlike the SDK's parser, the stdlib accepts unpaired surrogates
    except (ValueError, RecursionError):
        return None
    if not isinstance(msg, dict) or not _has_lone_surrogate(msg):
        return None
    params = msg.get("params")
    if msg.get("method") == "tools/call" and isinstance(params, dict) and _has_lone_surrogate(params.get("arguments")):
        while len(_STASH) >= _STASH_LIMIT:  # parked arguments of calls that never reached a handler
            _STASH.pop(next(iter(_STASH)))
        token = uuid.uuid4().hex
        _STASH[token] = params["arguments"]
        meta = params.get("_meta")
        params = {**params, "arguments": {}, "_meta": {**(meta if isinstance(meta, dict) else {}), _STASH_KEY: token}}
        msg = {**msg, "params": params}
    return json.dumps(_escape_surrogates(msg))


class _RescuingLines:
    """stdin lines for the SDK's stdio reader, with rescue_frame() applied."""

    def __init__(self, lines: Any) -> None:
        self._lines = lines

    def __aiter__(self) -> AsyncIterator[str]:
        return self._gen()

    async def _gen(self) -> AsyncIterator[str]:
        async for line in self._lines:
            fixed = rescue_frame(line)
            yield line if fixed is None else fixed + "\n"


async def _keep_raw_arguments(ctx: Any, call_next: Any) -> Any:
    """Let ``tools/call`` arguments the SDK would refuse reach dispatch as they came.

    The SDK validates request params against the protocol schema before the handler runs. If
    ``arguments`` is a list, a string or a number, the client would get an INVALID_PARAMS
    protocol error instead of the tool's failure shape. So this middleware swaps in ``{}`` for
    the SDK's check and hands the original to the handler through a context variable. It does
    the same for arguments that rescue_frame() parked.
    """
    params = ctx.params
    if ctx.method == "tools/call" and isinstance(params, Mapping):
        raw = params.get("arguments")
        meta = params.get("_meta")
        token = meta.get(_STASH_KEY) if isinstance(meta, Mapping) else None
        if isinstance(token, str) and isinstance(meta, Mapping):
            raw = _STASH.pop(token, raw)
            params = {**params, "_meta": {k: v for k, v in meta.items() if k != _STASH_KEY}}
        elif raw is None or isinstance(raw, Mapping):
            return await call_next(ctx)
        reset = _RAW_ARGUMENTS.set(raw)
        try:
            return await call_next(replace(ctx, params={**params, "arguments": {}}))
        finally:
            _RAW_ARGUMENTS.reset(reset)
    return await call_next(ctx)


# Runs one tool call somewhere else (Kafka mode: on the worker owning the agent) and answers
# the tool's JSON body, as ``dispatch`` does locally.
RemoteCall = Callable[[Caller, str, Any], Awaitable[dict[str, Any]]]


class ToolService(Protocol):
    """What the stdio face serves: something that runs a tool call (the embedded engine through
    ``dispatch``, or a Kafka router), started before the first call and closed after the last."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def call(self, caller: Caller, name: str, args: Any) -> dict[str, Any]:
        """The tool's JSON body, as ``dispatch`` answers it (never raises for a bad call)."""
        ...


def engine_changes(engine: Engine | None) -> AgentChanges | None:
    """The live changes of an engine that has a change feed (the embedded engine), else None."""
    feed = getattr(engine, "feed", None)
    return source_changes(EngineFeed(feed)) if isinstance(feed, Feed) else None


def build_server(
    engine: Engine | None,
    caller_factory: CallerFactory | None = None,
    *,
    call: RemoteCall | None = None,
    changes: AgentChanges | None = None,
) -> Server[Any]:
    """A low-level MCP server over the tool registry: list_tools() and dispatch() (or ``call``
    instead of dispatch, for a router that runs tools on other processes), and resources read
    through the same tools (api/faces/mcp_resources.py), subscribable when ``changes`` is given."""
    callers = caller_factory or http_caller

    async def run_tool(caller: Caller, name: str, arguments: Any) -> dict[str, Any]:
        if call is not None:
            return await call(caller, name, arguments)
        assert engine is not None, "build_server needs an engine or a call"
        return await dispatch(engine, caller, name, arguments)

    def caller_of(ctx: Any) -> Caller:
        try:
            caller = callers(ctx.request)
        except PermissionError:
            raise MCPError(types.INVALID_REQUEST, "permission_denied: this client may not use memstream") from None
        FACE.set("mcp")
        return caller

    async def on_list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in list_tools()])

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        raw = _RAW_ARGUMENTS.get()
        arguments = params.arguments if raw is _ABSENT else raw
        try:
            caller = callers(ctx.request)
        except PermissionError:
            return _text_result(failure("permission_denied", tool=params.name, client_id="anonymous"))
        except Exception:
            log.exception("caller factory failed for tool %s", params.name)
            return _text_result(failure("internal error; the server log has the details"))
        FACE.set("mcp")
        try:
            result = await run_tool(caller, params.name, arguments)
        except Exception:  # dispatch never raises; a bug there must still not become a protocol error
            log.exception("dispatch raised for tool %s", params.name)
            result = failure("internal error; the server log has the details")
        return _text_result(result)

    server: Server[Any] = Server(
        SERVER_NAME,
        version=_version(),
        instructions="memstream: event-sourced memory for AI agents. Every tool answers JSON text; "
        "treat any answer carrying `error` as a failure.",
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        # The 2026-07-28 HTTP path checks Mcp-Param-* headers against a tool's x-mcp-header
        # annotations before dispatch. memstream advertises none. Answering None skips that
        # check, so nothing pre-empts dispatch, and stops the SDK re-running tools/list on
        # every call to find the schema.
        get_tool_input_schema=lambda _name: None,
        **resource_handlers(run_tool, caller_of, changes),
    )
    server.middleware.append(_keep_raw_arguments)
    return server


# -- stdio --------------------------------------------------------------------------------------


async def run_stdio(service: ToolService, callers: CallerFactory, changes: AgentChanges | None = None) -> None:
    """Serve MCP over this process's stdin/stdout until stdin closes; then close ``service``.
    With ``changes`` (the service's change feed), resources can be subscribed to.

    SIGTERM/SIGINT stop the server the same way. The SDK reads stdin on a worker thread that
    cannot be interrupted, so if stdin is still open one second after the signal, the process
    exits as soon as the service is closed: every acknowledged write is already in the log.
    """

    async def serve() -> None:
        # Claim stdin/stdout first: from here on fd 1 points at stderr, so nothing the engine
        # prints while it starts can corrupt the protocol stream.
        async with stdio_server(stdin=cast(Any, _RescuingLines(_stdin_lines()))) as (read_stream, write_stream):
            await service.start()
            server = build_server(None, callers, call=service.call, changes=changes)
            await server.run(read_stream, write_stream, server.create_initialization_options())

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or not POSIX
            pass

    serving = asyncio.ensure_future(serve())
    stopping = asyncio.ensure_future(stop.wait())
    stuck = False
    try:
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not serving.done():
            log.info("signal received: stopping the stdio server")
            serving.cancel()
            await asyncio.wait({serving}, timeout=1.0)
            stuck = not serving.done()
        elif not serving.cancelled():
            serving.result()  # a crash of the server loop propagates (after the engine closes)
    finally:
        stopping.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)
        await service.close()
        log.info("engine closed")
    if stuck:
        log.info("stdin is still open; exiting")
        logging.shutdown()
        os._exit(0)


def _stdin_lines() -> Any:
    """stdin as the SDK's stdio reader takes it: UTF-8 text lines read on a worker thread.

    It reads a duplicate of fd 0, so closing it never closes the process's own stdin.
    """
    try:
        raw: Any = os.fdopen(os.dup(sys.stdin.fileno()), "rb")
    except (AttributeError, OSError, ValueError):
        raw = sys.stdin.buffer
    return anyio.wrap_file(io.TextIOWrapper(raw, encoding="utf-8", errors="replace"))


# -- streamable HTTP ----------------------------------------------------------------------------


def _loopback_security() -> TransportSecuritySettings:
    hosts = [*_LOOPBACK_HOSTS, *(f"{h}:*" for h in _LOOPBACK_HOSTS)]
    origins = [f"{scheme}://{h}{port}" for scheme in ("http", "https") for h in _LOOPBACK_HOSTS for port in ("", ":*")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


SESSION_IDLE_SECONDS = 600.0  # a stateful session nobody used for this long ends (its subscriptions with it)
MAX_SESSIONS = 10_000


def _opens_session(body: bytes) -> bool:
    """Whether a POST body is a handshake ``initialize`` request (which gets a stateful session)."""
    if b"initialize" not in body:
        return False
    try:
        msg = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(msg, dict) and msg.get("method") == "initialize"


class McpHttpApp:
    """ASGI app serving MCP streamable HTTP (JSON responses) over one engine.

    A handshake ``initialize`` opens a stateful session (its answer carries ``Mcp-Session-Id``),
    so the client can hold a GET stream for resource update notifications; requests carrying that
    id go to the session. Everything else is served statelessly, as before sessions existed: a
    client that ignores the session id loses nothing but notifications (docs/mcp.md).

    Route it at ``/mcp`` and run :meth:`lifespan` inside the host app's lifespan (docs/mcp.md).
    """

    def __init__(
        self,
        engine: Engine | None,
        caller_factory: CallerFactory | None = None,
        *,
        host: str = "127.0.0.1",
        allowed_hosts: Sequence[str] | None = None,
        allowed_origins: Sequence[str] | None = None,
        max_request_body_size: int = DEFAULT_MAX_REQUEST_BODY_SIZE,
        call: RemoteCall | None = None,
        changes: AgentChanges | None = None,
        session_idle_seconds: float = SESSION_IDLE_SECONDS,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self.engine = engine
        self.call = call
        self.changes = changes
        self.session_idle_seconds = session_idle_seconds
        self.max_sessions = max_sessions
        self.caller_factory = caller_factory or http_caller
        self.max_request_body_size = max_request_body_size
        if allowed_hosts is not None:
            self.security: TransportSecuritySettings | None = TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=list(allowed_hosts),
                allowed_origins=list(allowed_origins or _loopback_security().allowed_origins),
            )
        elif host in ("127.0.0.1", "localhost", "::1", "[::1]"):
            self.security = _loopback_security()
        else:
            # Bound to a routable interface without a host list: no Host/Origin check (as the SDK).
            self.security = None
        self._manager: StreamableHTTPSessionManager | None = None
        self._sessions: StreamableHTTPSessionManager | None = None
        self._owners = SessionOwners(max_sessions)

    @contextlib.asynccontextmanager
    async def lifespan(self, engine: Engine | None = None) -> AsyncIterator[None]:
        """Run the MCP session manager; enter once per app run, with the engine started."""
        if engine is not None:
            self.engine = engine
        if self.engine is None and self.call is None:
            raise RuntimeError("McpHttpApp needs an engine (or a remote call)")
        changes = self.changes if self.changes is not None else engine_changes(self.engine)
        server = build_server(self.engine, self.caller_factory, call=self.call, changes=changes)
        manager = StreamableHTTPSessionManager(
            app=server,
            json_response=True,
            stateless=True,
            security_settings=self.security,
            max_request_body_size=self.max_request_body_size,
        )
        sessions = StreamableHTTPSessionManager(
            app=server,
            json_response=True,
            stateless=False,
            security_settings=self.security,
            max_request_body_size=self.max_request_body_size,
            session_idle_timeout=self.session_idle_seconds,
            max_sessions=self.max_sessions,
        )
        async with manager.run(), sessions.run():
            self._manager, self._sessions = manager, sessions
            try:
                yield
            finally:
                self._manager = self._sessions = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1000})
            return  # lifespan: the host app's lifespan runs ours (docs/mcp.md)
        manager = self._manager
        if manager is None:
            body = orjson.dumps(
                {"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message": "MCP endpoint not running"}}
            )
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        request_body: bytes | None = None
        if scope.get("method") == "POST":
            scope, request_body, receive = await self._rescued(scope, receive)
        sessions = self._sessions
        session_id = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"mcp-session-id"), None)
        if sessions is not None and session_id is not None:
            if not self._owners.admits(session_id, scope):
                await send_json(send, 404, {"jsonrpc": "2.0", "id": None, "error": _SESSION_NOT_FOUND})
                return
            await sessions.handle_request(scope, receive, send)
            if scope.get("method") == "DELETE":
                self._owners.forget(session_id)
            return
        if sessions is not None and request_body is not None and _opens_session(request_body):
            if await _answered_unless_full(sessions, scope, receive, send, self._owners):
                return
            receive = _replay([_body(request_body)], receive)
        await manager.handle_request(scope, receive, send)

    async def _rescued(self, scope: Scope, receive: Receive) -> tuple[Scope, bytes | None, Receive]:
        """The request with rescue_frame() applied to its body (read here, replayed to the SDK),
        and the body (None when it is over the size limit or came in an unusual shape)."""
        chunks: list[bytes] = []
        size = 0
        more = True
        trailing: list[Message] = []
        while more and size <= self.max_request_body_size:
            message = await receive()
            if message["type"] != "http.request":
                trailing.append(message)
                break
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            more = bool(message.get("more_body", False))
        body = b"".join(chunks)
        if not more and not trailing and _SURROGATE_ESCAPE.search(body.decode("latin-1")):
            try:
                fixed = rescue_frame(body.decode("utf-8"))
            except UnicodeDecodeError:
                fixed = None
            if fixed is not None:
                body = fixed.encode("utf-8")
                headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
                scope = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
        # Over the size limit: replayed as it came, for the SDK to refuse with a 413.
        first: Message = {"type": "http.request", "body": body, "more_body": more}
        whole = body if not more and not trailing else None
        return scope, whole, _replay([first, *trailing], receive)


def _body(body: bytes) -> Message:
    return {"type": "http.request", "body": body, "more_body": False}


def _replay(messages: list[Message], receive: Receive) -> Receive:
    queue = list(messages)

    async def replay() -> Message:
        return queue.pop(0) if queue else await receive()

    return replay


_SESSION_NOT_FOUND = {"code": types.INVALID_REQUEST, "message": "Session not found"}


async def send_json(send: Send, status: int, body: Any) -> None:
    raw = orjson.dumps(body)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": raw})


class SessionOwners:
    """Which authenticated client opened each session (ACL mode), so no other client's token
    can use it, even knowing its id: such a request is answered as for a session that does not
    exist (404). Sessions opened without a token (no ACL) are not bound. At most ``limit``
    are remembered (as many as may be open); a session forgotten that way gets a 404 in ACL
    mode, and its client opens a new one, as the protocol says."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._owners: dict[str, str] = {}

    def bind(self, session_id: str, scope: Scope) -> None:
        principal = scope_caller(scope)
        if principal is None:
            return
        self._owners[session_id] = principal.client_id
        while len(self._owners) > self._limit:
            del self._owners[next(iter(self._owners))]

    def admits(self, session_id: str, scope: Scope) -> bool:
        principal = scope_caller(scope)
        if principal is None:
            return session_id not in self._owners
        return self._owners.get(session_id) == principal.client_id

    def forget(self, session_id: str) -> None:
        self._owners.pop(session_id, None)


async def _answered_unless_full(
    sessions: StreamableHTTPSessionManager, scope: Scope, receive: Receive, send: Send, owners: SessionOwners
) -> bool:
    """Let the session manager open a session (bound to the caller, in ACL mode); False
    (nothing sent) if it refused with 503 for having too many, so the caller serves the request
    statelessly instead."""
    full = False

    async def guarded(message: Message) -> None:
        nonlocal full
        if message["type"] == "http.response.start":
            if message.get("status") == 503:
                full = True
            for key, value in message.get("headers", ()):
                if key.lower() == b"mcp-session-id":
                    owners.bind(value.decode("latin-1"), scope)
        if not full:
            await send(message)

    await sessions.handle_request(scope, receive, guarded)
    return not full


def streamable_http_app(
    engine: Engine, caller_factory: CallerFactory | None = None, **options: Any
) -> tuple[McpHttpApp, Callable[[], contextlib.AbstractAsyncContextManager[None]]]:
    """``(asgi_app, lifespan)``: route ``asgi_app`` at ``/mcp``; ``async with lifespan():`` in the app's lifespan.

    ``options`` go to :class:`McpHttpApp` (``host``, ``allowed_hosts``, ``allowed_origins``,
    ``max_request_body_size``).
    """
    app = McpHttpApp(engine, caller_factory, **options)
    return app, app.lifespan
