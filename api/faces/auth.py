"""HTTP authentication in ACL mode: ``Authorization: Bearer <token>`` on every route but the
public documentation ones, resolved against the ACL file (api/services/acl.py).

The middleware is installed only when an ACL file is configured, so without one nothing here
runs. A missing, malformed or unknown token is a 401 before any route (``/v1/tools/*``,
``/mcp``, ``/context/*``, ``/health``, ``/metrics``, ``/audit``) sees the request; a known one
is put in the ASGI scope, where the faces' caller factories read it (and nothing else:
``X-Client-Id`` is ignored in ACL mode, so a caller cannot name itself). The audit page's
routes also take the session cookie its login gives a browser (api/faces/sessions.py), and
only those routes; the console's session cookie opens the tools, the context routes and the
change feed, a POST only with the session's CSRF token (api/faces/console/). Tokens are never
logged.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from starlette.requests import cookie_parser
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from memstream.api.faces.sessions import SESSION_COOKIE, AuditSessions
from memstream.api.services.acl import ADMIN, LOCAL_CLIENT_ID, AclConfig, Demand, denial
from memstream.api.tools.registry import Caller

log = logging.getLogger(__name__)

# Where the middleware leaves the authenticated client id in the ASGI scope.
PRINCIPAL_KEY = "memstream.client_id"
# Served without a token: the API's own description (no memory, no state).
PUBLIC_PATHS = frozenset({"/", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
# The audit page's routes, where a session cookie stands for a token; its login form is public.
AUDIT_PATH = "/audit"
LOGIN_PATH = "/audit/login"
# Where the middleware leaves the audit session a cookie named (its logout form's CSRF token).
SESSION_KEY = "memstream.audit_session"
# The console (api/faces/console/): its pages check their session themselves; its session cookie
# (Path=/) stands for a token on the routes its script calls, a POST only with the session's
# CSRF token in this header.
CONSOLE_PREFIX = "/console/"
CONSOLE_COOKIE = "memstream_console"
CONSOLE_API_PREFIXES = ("/v1/tools/", "/v1/events", "/context/")
CSRF_HEADER = "x-csrf-token"


def is_audit_path(path: str) -> bool:
    return path == AUDIT_PATH or path.startswith(AUDIT_PATH + "/")


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


def not_admin(acl: AclConfig, scope: Any, what: str) -> dict[str, Any] | None:
    """The denial of ``what`` (an admin-only route) to the scope's client; None for an admin."""
    client_id = scope.get(PRINCIPAL_KEY) if isinstance(scope, dict) else None
    client = acl.client(client_id) if isinstance(client_id, str) else None
    if client is not None and client.admin:
        return None
    return denial(
        what, str(client_id or "anonymous"), Demand("", ADMIN), f"{what} needs the admin grant (docs/security.md)"
    )


def stdio_caller(session_id: str) -> Caller:
    """MCP over stdio in ACL mode: the reserved ``local`` principal (CPersona's rule)."""
    return Caller(client_id=LOCAL_CLIENT_ID, session_id=session_id, authenticated=True)


class BearerAuth:
    """ASGI middleware: 401 unless the bearer token names a client of the ACL file. With
    ``sessions``, a request to the audit page without a token may present a login's cookie
    instead (a browser without one is sent to the login form)."""

    def __init__(self, app: ASGIApp, acl: AclConfig, sessions: AuditSessions | None = None) -> None:
        self.app = app
        self.acl = acl
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path") or "")
        if scope["type"] != "http" or path in PUBLIC_PATHS or path.startswith(CONSOLE_PREFIX):
            await self.app(scope, receive, send)
            return
        header = cookies = csrf = None
        for key, value in scope.get("headers") or ():
            if key.lower() == b"authorization" and header is None:
                header = value.decode("latin-1")
            elif key.lower() == b"cookie" and cookies is None:
                cookies = value.decode("latin-1")
            elif key.lower() == CSRF_HEADER.encode() and csrf is None:
                csrf = value.decode("latin-1")
        if header is None and self.sessions is not None and is_audit_path(path):
            await self._audit_session(scope, receive, send, cookies)
            return
        if header is None and self.sessions is not None and cookies and path.startswith(CONSOLE_API_PREFIXES):
            session = self.sessions.resolve(cookie_parser(cookies).get(CONSOLE_COOKIE))
            if session is not None:
                if scope.get("method") not in ("GET", "HEAD") and not self.sessions.csrf_ok(session, csrf):
                    await _refuse(send, 403, "forbidden: a console call needs its session's X-CSRF-Token")
                    return
                scope[PRINCIPAL_KEY] = session.client_id
                await self.app(scope, receive, send)
                return
        client = self.acl.authenticate(bearer_token(header))
        if client is None:
            log.info("401 on %s: %s bearer token", scope.get("path"), "unknown" if header else "no")
            await _unauthorized(send)
            return
        scope[PRINCIPAL_KEY] = client
        await self.app(scope, receive, send)

    async def _audit_session(self, scope: Scope, receive: Receive, send: Send, cookies: str | None) -> None:
        """The audit page without a bearer token: its login form, or the session a cookie names."""
        assert self.sessions is not None
        if scope.get("path") == LOGIN_PATH:  # it checks the token it is given itself
            await self.app(scope, receive, send)
            return
        session = self.sessions.resolve(cookie_parser(cookies).get(SESSION_COOKIE) if cookies else None)
        if session is not None:
            scope[PRINCIPAL_KEY] = session.client_id
            scope[SESSION_KEY] = session
            await self.app(scope, receive, send)
        elif scope.get("method") in ("GET", "HEAD"):
            await RedirectResponse(LOGIN_PATH, status_code=303)(scope, receive, send)
        else:
            await _unauthorized(send)


async def _refuse(send: Send, status: int, why: str) -> None:
    body = orjson.dumps({"ok": False, "error": why})
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _unauthorized(send: Send) -> None:
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
