"""Logging in and out of a browser page in ACL mode (the audit page, the console): a browser cannot
send a bearer token, so a form exchanges one for a session cookie (api/faces/sessions.py). Both
forms carry a CSRF token; the cookies are HttpOnly and SameSite=Strict. Each page names its
paths and cookies and draws its own documents; the flow is this module's, once."""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from memstream.api.faces.sessions import LOGIN_NONCE_S, AuditSessions, Session
from memstream.api.services.acl import AclConfig

MAX_FORM_BYTES = 16_384
NOT_FROM_THIS_PAGE = "The form did not come from this page; you are still signed in."


@dataclass(frozen=True)
class LoginPage:
    """One page's login. ``home``: where a login lands; ``session_cookie`` is set on
    ``session_path``, the login form's nonce cookie ``nonce_cookie`` on ``nonce_path``.
    ``draw_login`` wraps the login form (and its error, if any) in the page's document;
    ``refuse_logout`` answers a logout whose form did not come from the page."""

    login_path: str
    logout_path: str
    home: str
    session_cookie: str
    session_path: str
    nonce_cookie: str
    nonce_path: str
    headers: Mapping[str, str]
    session_of: Callable[[Request], Session | None]
    draw_login: Callable[[str], str]
    refuse_logout: Callable[[Request, str], Response]


def login_routes(page: LoginPage, acl: AclConfig, sessions: AuditSessions) -> list[Route]:
    """``GET``/``POST page.login_path`` and ``POST page.logout_path``."""

    def login_form(request: Request, message: str = "", status: int = 200) -> HTMLResponse:
        nonce, token = sessions.login_nonce()
        error = f"<p class='err'>{html.escape(message, quote=True)}</p>" if message else ""
        form = (
            f"<form method='post' action='{page.login_path}'>"
            f"<input type='hidden' name='csrf' value='{html.escape(token, quote=True)}'>"
            "<label>Token <input type='password' name='token' autocomplete='off' size='40' autofocus></label> "
            "<button type='submit'>Log in</button></form>"
        )
        response = HTMLResponse(page.draw_login(error + form), status_code=status, headers=dict(page.headers))
        _set_cookie(request, response, page.nonce_cookie, nonce, LOGIN_NONCE_S, page.nonce_path)
        return response

    async def login_page(request: Request) -> HTMLResponse:
        return login_form(request)

    async def login(request: Request) -> Response:
        fields = await _form_fields(request)
        if fields is None:
            return login_form(request, "The form was too large.", 413)
        if not sessions.login_token_ok(request.cookies.get(page.nonce_cookie), fields.get("csrf")):
            return login_form(request, "The form expired or did not come from this page; try again.", 403)
        client_id = acl.authenticate(fields.get("token", "").strip())
        if client_id is None:
            return login_form(request, "Unknown token.", 401)
        _, cookie = sessions.open(client_id)
        response = RedirectResponse(page.home, status_code=303, headers={"Cache-Control": "no-store"})
        _set_cookie(request, response, page.session_cookie, cookie, int(sessions.lifetime_s), page.session_path)
        response.delete_cookie(page.nonce_cookie, path=page.nonce_path, httponly=True, samesite="strict")
        return response

    async def logout(request: Request) -> Response:
        session = page.session_of(request)
        if session is not None:
            fields = await _form_fields(request)
            if fields is None or not sessions.csrf_ok(session, fields.get("csrf")):
                return page.refuse_logout(request, f"<p class='err'>{NOT_FROM_THIS_PAGE}</p>")
            sessions.close(session)
        response = RedirectResponse(page.login_path, status_code=303, headers={"Cache-Control": "no-store"})
        response.delete_cookie(page.session_cookie, path=page.session_path, httponly=True, samesite="strict")
        return response

    return [
        Route(page.login_path, login_page, methods=["GET"]),
        Route(page.login_path, login, methods=["POST"]),
        Route(page.logout_path, logout, methods=["POST"]),
    ]


def _set_cookie(request: Request, response: Response, name: str, value: str, max_age: int, path: str) -> None:
    secure = request.url.scheme == "https"
    response.set_cookie(name, value, max_age=max_age, path=path, secure=secure, httponly=True, samesite="strict")


async def _form_fields(request: Request) -> dict[str, str] | None:
    """An urlencoded form's fields (first value of each), or None past MAX_FORM_BYTES."""
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_FORM_BYTES:
            return None
    fields: dict[str, str] = {}
    for key, value in parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True):
        fields.setdefault(key, value)
    return fields
