"""The HTTP face: a JSON API over the tool registry, its OpenAPI spec, and MCP at ``/mcp``.

Each tool is ``POST /v1/tools/<name>`` with the tool's arguments as the JSON body; the body is
handed to the same ``dispatch`` the MCP face uses, so both faces accept and refuse exactly the
same inputs with exactly the same answers. The OpenAPI document is generated from the same
argument models. Failures keep the tool's JSON shape and add an HTTP status that says what
kind of failure it was; no input produces a 500.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from memstream.api import tools as _tools  # noqa: F401  (registers every tool)
from memstream.api.faces.audit_page import add_audit_routes
from memstream.api.faces.auth import BearerAuth, not_admin
from memstream.api.faces.console.routes import add_console_routes
from memstream.api.faces.feed import EngineFeed, add_feed_route
from memstream.api.faces.mcp_on_demand import McpOnDemand
from memstream.api.faces.origin import OriginGuard, origin_policy
from memstream.api.faces.sessions import AuditSessions
from memstream.api.faces.tool_route import (
    ERROR_HEADER,
    STATUS,
    TOOL_ROUTES,
    Crashproof,
    ToolEndpoint,
    make_caller,
    request_answer,
    tool_of,
)
from memstream.api.services.acl import load_configured
from memstream.api.services.embedding import Embedder
from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.metrics import CONTENT_TYPE_LATEST
from memstream.api.services.settings import Settings
from memstream.api.tools.dispatch import failure, run_tool
from memstream.api.tools.registry import REGISTRY, Caller, Tool

log = logging.getLogger(__name__)


def json_response(body: Any, status: int = 200, code: str | None = None) -> Response:
    headers = None if code is None else {ERROR_HEADER: code}
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def tool_response(body: dict[str, Any], code: str | None) -> Response:
    """A tool's answer as ``run_tool`` gave it: the status and header its failure code names."""
    return json_response(body, 200 if code is None else STATUS.get(code, 400), code)


def caller_of(request: Request) -> Caller:
    """ACL mode: the token's client, nothing else; else the client ``X-Client-Id`` names."""
    return make_caller(request.scope, request.headers.get("x-session-id"), request.headers.get("x-client-id"))


async def call_tool(request: Request) -> Response:
    """``POST /v1/tools/{name}`` through FastAPI's stack, where ``MemstreamApp`` does not take
    the request itself (a ``root_path``): the same answer as ``ToolEndpoint``'s."""
    name = request.path_params.get("name") or TOOL_ROUTES[request.url.path]
    answer = await request_answer(
        request.app.state.engine,
        lambda: caller_of(request),
        name,
        request.receive,
        request.scope["headers"],
        request.headers.get("idempotency-key"),
    )
    if answer is None:
        return Response(status_code=400)  # the client went away: no one reads this
    return json_response(*answer)


class MemstreamApp(FastAPI):
    """FastAPI, except that a POST to a tool route goes straight to ``lean`` (OriginGuard,
    BearerAuth in ACL mode, then ``ToolEndpoint``: api/faces/tool_route.py says why), not
    through FastAPI's middleware stack and router. Everything else is FastAPI's."""

    lean: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        lean = self.lean
        if (
            lean is not None
            and scope["type"] == "http"
            and scope.get("method") == "POST"
            and not scope.get("root_path")
            and not self.root_path
            and tool_of(scope["path"]) is not None
        ):
            await lean(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


# Nested argument models, referenced from the tools' request bodies as components/schemas
# (pydantic's default ``#/$defs/...`` refs would dangle: they point at the document's root).
REF_TEMPLATE = "#/components/schemas/{model}"


def _body_schema(tool: Tool, components: dict[str, Any]) -> dict[str, Any]:
    schema = tool.args.model_json_schema(ref_template=REF_TEMPLATE)
    for name, sub in schema.pop("$defs", {}).items():
        if components.setdefault(name, sub) != sub:
            raise ValueError(f"two argument models named {name} differ; rename one")
    return schema


def _with_components(app: FastAPI, components: dict[str, Any]) -> None:
    """Add the collected nested models to the generated OpenAPI document."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = generate()
            spec.setdefault("components", {}).setdefault("schemas", {}).update(components)
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]


def _document_tool(app: FastAPI, tool: Tool, path: str | None = None, components: dict[str, Any] | None = None) -> None:
    """The tool's entry in the OpenAPI document. Requests are served by ``MemstreamApp``'s own
    path (else by ``call_tool``, a plain Starlette route placed first), not by this route."""
    app.add_api_route(
        path or f"/v1/tools/{tool.name}",
        call_tool,
        methods=["POST"],
        name=f"{tool.name} ({path})" if path else tool.name,
        summary=tool.description.split("\n", 1)[0][:120],
        description=tool.description,
        tags=["admin" if tool.admin else "writes" if tool.writes else "reads"],
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": _body_schema(tool, {} if components is None else components)}
                },
            }
        },
    )


def create_app(
    settings: Settings, *, embedder: Embedder | None = None, with_mcp: bool = True, host: str = "127.0.0.1"
) -> MemstreamApp:
    """The ASGI app; its lifespan opens and closes the engine. ``host``: the address it is bound
    to, a Host name it answers besides loopback and MEMSTREAM_ALLOWED_HOSTS (unless a wildcard)."""
    acl = load_configured(settings)  # a malformed ACL file stops here (AclConfigError)
    policy = origin_policy(settings, host)
    eng = EmbeddedEngine(settings, embedder=embedder)
    eng.acl = acl
    # MCP is built on its first request (api/faces/mcp_on_demand.py): a start skips the SDK's import.
    mcp_app = None
    if with_mcp:
        mcp_app = McpOnDemand(eng, allowed_hosts=policy.mcp_hosts(), allowed_origins=policy.mcp_origins())

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await eng.start()
        app.state.engine = eng
        try:
            if mcp_app is not None:
                mcp_app.open()
            yield
        finally:
            if mcp_app is not None:
                await mcp_app.aclose()
            await eng.close()

    app = MemstreamApp(
        title="memstream",
        version="0.1.0",
        description="Event-sourced memory for fleets of AI agents. Every tool is also served over MCP at /mcp.",
        lifespan=lifespan,
    )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        return json_response(failure(f"invalid request: {exc.errors()[:3]}"), 400)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return json_response(failure(str(exc.detail)), exc.status_code)

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s", request.url.path)
        return json_response(failure("internal error; the server log has the details"), 500)

    app.router.routes.insert(0, Route("/v1/tools/{name}", call_tool, methods=["POST"], include_in_schema=False))
    components: dict[str, Any] = {}
    for tool in sorted(REGISTRY.values(), key=lambda t: t.name):
        _document_tool(app, tool, components=components)
    for path, name in TOOL_ROUTES.items():
        app.router.routes.insert(0, Route(path, call_tool, methods=["POST"], include_in_schema=False))
        _document_tool(app, REGISTRY[name], path, components=components)
    _with_components(app, components)

    @app.get("/health", tags=["reads"])
    async def health(request: Request) -> Response:
        body, code = await run_tool(request.app.state.engine, caller_of(request), "check_health", {})
        if code == "permission_denied":
            return json_response(body, 403)
        # degraded still serves (a load balancer keeps it); only unhealthy (or a failure) is 503
        return json_response(body, 200 if body.get("status") in ("ok", "healthy", "degraded") else 503)

    @app.get("/metrics", tags=["reads"], summary="Prometheus metrics (text exposition format)")
    async def metrics(request: Request) -> Response:
        if acl is not None and (denied := not_admin(acl, request.scope, "metrics")) is not None:
            return json_response(denied, 403)  # ACL mode: the whole store's figures are an admin's
        return Response(request.app.state.engine.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    # GET /audit, /audit/memory/{ref}: the timeline page for people (and its login in ACL mode)
    sessions = AuditSessions(settings.audit_session_s) if acl is not None else None
    add_audit_routes(app, acl, sessions)
    add_console_routes(app, acl, sessions)  # GET /: the console (and its login in ACL mode)

    # GET /v1/events: the change feed as Server-Sent Events (api/faces/feed.py)
    add_feed_route(app, lambda request: EngineFeed(request.app.state.engine.feed), settings, acl)

    if mcp_app is not None:
        # A Route (not a Mount) so that POST /mcp itself is served, not redirected to /mcp/.
        app.router.routes.append(Route("/mcp", endpoint=mcp_app, include_in_schema=False))
    if acl is not None:
        app.add_middleware(BearerAuth, acl=acl, sessions=sessions)  # nothing is served before the token is checked
    app.add_middleware(OriginGuard, policy=policy)  # outermost: a web page's request is refused first
    # The tool routes' own path, behind the same guards in the same order.
    endpoint: ASGIApp = ToolEndpoint(lambda: app.state.engine)
    if acl is not None:
        endpoint = BearerAuth(endpoint, acl=acl, sessions=sessions)
    app.lean = Crashproof(OriginGuard(endpoint, policy=policy))
    return app
