"""The console's routes: the page at ``/``, its assets, and its login and logout in ACL mode.

The page is a shell: every figure on it comes from the tools (``POST /v1/tools/*``) and the
change feed (``GET /v1/events``), called by ``static/console.js`` as the page's client, so the
console shows exactly what that client may read through the API. Nothing is inlined and nothing
is fetched from another origin: the Content-Security-Policy allows scripts, styles and requests
of this origin only.

Who the page's client is:

* ACL mode: a person logs in at ``/console/login`` with a bearer token; the session cookie
  (HttpOnly, SameSite=Strict, Path=/, HMAC-signed, expiring) then stands for the token on the
  tools and the feed (api/faces/auth.py), and a POST must also carry the session's CSRF token in
  ``X-CSRF-Token`` (the page reads it from a ``<meta>`` of the shell).
* Without an ACL: the page answers loopback peers only (anyone else gets 403), as the API
  itself answers anyone who can reach it; the tools see ``X-Client-Id: console``.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from memstream.api.faces.auth import CONSOLE_COOKIE, is_loopback
from memstream.api.faces.login import LoginPage, login_routes
from memstream.api.faces.sessions import AuditSessions, Session
from memstream.api.services.acl import AclConfig

STATIC = Path(__file__).resolve().parent / "static"
ASSETS = {
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
LOGIN_PATH = "/console/login"
LOGOUT_PATH = "/console/logout"
LOGIN_COOKIE = "memstream_console_login"
LOGIN_COOKIE_PATH = "/console"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _doc(title: str, body: str, head: str = "") -> str:
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{_e(title)}</title><link rel='icon' href='/console/static/icon.svg' type='image/svg+xml'>"
        f"<link rel='stylesheet' href='/console/static/console.css'>{head}"
        f"</head><body>{body}</body></html>"
    )


def shell(session: Session | None) -> str:
    """The page: the console's script builds every view into ``<main>``."""
    meta = ""
    signed_in = ""
    if session is not None:
        meta = f"<meta name='memstream-csrf' content='{_e(session.csrf)}'>"
        signed_in = (
            f"<form class='logout' method='post' action='{LOGOUT_PATH}'><span>Signed in as "
            f"<b id='whoami'>{_e(session.client_id)}</b></span>"
            f"<input type='hidden' name='csrf' value='{_e(session.csrf)}'>"
            "<button type='submit'>Log out</button></form>"
        )
    head = f"{meta}<script src='/console/static/console.js' defer></script>"
    body = (
        "<header><a class='brand' href='#/'>memstream</a><nav>"
        "<a id='nav-agents' href='#/'>Agents</a><a id='nav-audit' href='#/audit'>Audit</a></nav>"
        "<form id='asof' class='asof'><label>As of <input name='as_of' id='asof-input' "
        "placeholder='now (offset or ISO time)' size='26' autocomplete='off'></label>"
        "<button type='submit'>Go</button><button type='button' id='asof-now'>Now</button></form>"
        f"<span id='live' class='live off' title='change feed'>live: off</span>{signed_in}</header>"
        "<main id='view'><p class='muted'>Loading…</p></main>"
        "<aside id='feed' class='feed'><h2>Live changes</h2><ol id='feed-list'></ol></aside>"
    )
    return _doc("memstream console", body, head)


def add_console_routes(app: Starlette, acl: AclConfig | None = None, sessions: AuditSessions | None = None) -> None:
    """``/``, ``/console/static/*`` and (ACL mode) ``/console/login`` and ``/console/logout``, on
    the embedded server's app and on the Kafka router's alike (plain Starlette routes)."""

    def session_of(request: Request) -> Session | None:
        return sessions.resolve(request.cookies.get(CONSOLE_COOKIE)) if sessions is not None else None

    def refused_peer(request: Request) -> Response | None:
        """Without an ACL the console is for this machine's users only."""
        peer = request.client.host if request.client is not None else ""
        if acl is None and not is_loopback(peer):
            text = "The console answers loopback only without an ACL (docs/console.md)."
            return HTMLResponse(_doc("memstream console", f"<p>{_e(text)}</p>"), 403, headers=HEADERS)
        return None

    async def index(request: Request) -> Response:
        if (refused := refused_peer(request)) is not None:
            return refused
        session = None
        if acl is not None:
            session = session_of(request)
            if session is None:
                return RedirectResponse(LOGIN_PATH, status_code=303, headers={"Cache-Control": "no-store"})
        return HTMLResponse(shell(session), headers=HEADERS)

    async def asset(request: Request) -> Response:
        if (refused := refused_peer(request)) is not None:
            return refused
        name = str(request.path_params["name"])
        media = ASSETS.get(name)
        if media is None:
            return Response("not found", 404, media_type="text/plain", headers=HEADERS)
        headers = {**HEADERS, "Cache-Control": "no-cache"}
        return Response((STATIC / name).read_bytes(), media_type=media, headers=headers)

    routes = [Route("/", index, methods=["GET"]), Route("/console/static/{name}", asset, methods=["GET"])]
    if acl is not None and sessions is not None:
        routes += _login(acl, sessions)
    app.router.routes.extend(routes)


def _login(acl: AclConfig, sessions: AuditSessions) -> list[Route]:
    def draw_login(form: str) -> str:
        body = (
            "<main class='login'><h1>memstream console: log in</h1><p class='muted'>Sign in with your client's "
            f"bearer token (the ACL file's). The console shows what that client may read.</p>{form}</main>"
        )
        return _doc("memstream console: log in", body)

    def refuse_logout(request: Request, error: str) -> Response:
        return HTMLResponse(_doc("memstream console", f"<main>{error}</main>"), 403, headers=HEADERS)

    page = LoginPage(
        login_path=LOGIN_PATH,
        logout_path=LOGOUT_PATH,
        home="/",
        session_cookie=CONSOLE_COOKIE,
        session_path="/",
        nonce_cookie=LOGIN_COOKIE,
        nonce_path=LOGIN_COOKIE_PATH,
        headers=HEADERS,
        session_of=lambda request: sessions.resolve(request.cookies.get(CONSOLE_COOKIE)),
        draw_login=draw_login,
        refuse_logout=refuse_logout,
    )
    return login_routes(page, acl, sessions)
