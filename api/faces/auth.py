"""HTTP authentication in ACL mode: ``Authorization: Bearer <token>`` on every route but the
public documentation ones, resolved against the ACL file (api/services/acl.py).

The middleware is installed only when an ACL file is configured, so without one nothing here
runs. A missing, malformed or unknown token is a 401 before any route (``/v1/tools/*``,
``/mcp``, ``/context/*``, ``/health``) sees the request; a known one is put in the ASGI scope,
where the faces' caller factories read it (and nothing else: ``X-Client-Id`` is ignored in ACL
mode, so a caller cannot name itself). Tokens are never logged.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from memstream.api.services.acl import LOCAL_CLIENT_ID, AclConfig
from memstream.api.tools.registry import Caller

log = logging.getLogger(__name__)

# Where the middleware leaves the authenticated client id in the ASGI scope.
PRINCIPAL_KEY = "memstream.client_id"
# Served without a token: the API's own description (no memory, no state).
PUBLIC_PATHS = frozenset({"/", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


def is_loopback(host: str) -> bool:
    import ipaddress

    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bearer_token(header: str | None) -> str:
    """The credential of an ``Authorization: Bearer <token>`` header (scheme case-insensitive)."""
    if not header:
        return ""
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def scope_caller(scope: Any, session_id: str = "") -> Caller | None:
    """The authenticated caller the middleware recorded in ``scope``, if any."""
    client = scope.get(PRINCIPAL_KEY) if isinstance(scope, dict) else None
    if not isinstance(client, str):
        return None
    return Caller(client_id=client, session_id=session_id, authenticated=True)


def stdio_caller(session_id: str) -> Caller:
    """MCP over stdio in ACL mode: the reserved ``local`` principal (CPersona's rule)."""
    return Caller(client_id=LOCAL_CLIENT_ID, session_id=session_id, authenticated=True)


class BearerAuth:
    """ASGI middleware: 401 unless the bearer token names a client of the ACL file."""

    def __init__(self, app: ASGIApp, acl: AclConfig) -> None:
        self.app = app
        self.acl = acl

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        header = None
        for key, value in scope.get("headers") or ():
            if key.lower() == b"authorization":
                header = value.decode("latin-1")
                break
        client = self.acl.authenticate(bearer_token(header))
        if client is None:
            log.info("401 on %s: %s bearer token", scope.get("path"), "unknown" if header else "no")
            body = orjson.dumps({"ok": False, "error": "unauthorized"})
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"www-authenticate", b"Bearer"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        scope[PRINCIPAL_KEY] = client
        await self.app(scope, receive, send)
