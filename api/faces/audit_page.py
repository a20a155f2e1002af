"""The audit view for people: one agent's or one memory's history as a timeline, in HTML.

    GET /audit                       a form (agent or ref) and the latest refusals
    GET /audit?agent=alice           every event of the agent and its refused/skipped commands
    GET /audit/memory/mem:42         every event of one memory and the refusals that named it

Plain server-rendered HTML: no script, no build step, no external resource (the
Content-Security-Policy forbids all three). Every value from the log goes through
``html.escape``, since memories hold whatever agents wrote. The data comes from the ``history``
and ``audit_log`` tools through ``dispatch``, so the page sees exactly what the caller may see
through the API (the same caller, the same checks). In ACL mode the caller is the bearer
token's client, or the one a browser logged in as (``/audit/login``, api/faces/sessions.py).
"""

from __future__ import annotations

import html
from typing import Any
from urllib.parse import quote, urlencode

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from starlette.routing import Route

from memstream.api.faces.auth import LOGIN_PATH, SESSION_KEY, scope_caller
from memstream.api.faces.login import LoginPage, login_routes
from memstream.api.faces.sessions import COOKIE_PATH, LOGIN_COOKIE, SESSION_COOKIE, AuditSessions
from memstream.api.services.acl import READ, WILDCARD, AclConfig, Demand
from memstream.api.tools.dispatch import dispatch
from memstream.api.tools.registry import Caller

LOGOUT_PATH = "/audit/logout"

PAGE_LIMIT = 500
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: with no-referrer a browser posts the forms with Origin: null
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d1f24;background:#fafafa}
h1{font-size:20px;margin:0 0 4px} .sub{color:#5b616e;margin:0 0 16px}
form{margin:0 0 18px} input{font:inherit;padding:4px 6px} button{font:inherit;padding:4px 10px}
ol.timeline{list-style:none;margin:0;padding:0 0 0 18px;border-left:3px solid #d0d4dc}
.entry{position:relative;margin:0 0 12px;padding:8px 12px;background:#fff;border:1px solid #e1e4ea;border-radius:6px}
.entry:before{content:"";position:absolute;left:-27px;top:12px;width:12px;height:12px;border-radius:50%;
background:#4a7bd0;border:2px solid #fafafa}
.entry.refused{border-color:#e5b3b3;background:#fff6f6} .entry.refused:before{background:#c63d3d}
.entry.skipped{border-color:#e7dcae;background:#fffdf3} .entry.skipped:before{background:#c49a1b}
.head{display:flex;gap:12px;flex-wrap:wrap;align-items:baseline}
.what{font-weight:600} .when{color:#5b616e;font-variant-numeric:tabular-nums}
.who{color:#30425f} .off{color:#8a909c;margin-left:auto;font-size:12px}
.why{color:#a12b2b;font-weight:600;margin-top:4px}
pre{margin:6px 0 0;white-space:pre-wrap;word-break:break-word;font:12px/1.4 ui-monospace,monospace;color:#30343c}
.empty{color:#5b616e} .err{color:#a12b2b}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _caller(request: Request, acl: AclConfig | None) -> Caller:
    """The authenticated client in ACL mode (never a header's claim); else ``X-Client-Id``."""
    session = (request.headers.get("x-session-id") or "")[:256]
    authenticated = scope_caller(request.scope, session)
    if authenticated is not None:
        return authenticated
    if acl is not None:  # no principal in ACL mode: a wiring bug; dispatch denies it
        return Caller(client_id="anonymous", session_id=session)
    client = request.headers.get("x-client-id") or "anonymous"
    return Caller(client_id=client[:256], session_id=session)


def _page(
    title: str, subtitle: str, body: str, status: int = 200, agent: str = "", request: Request | None = None
) -> HTMLResponse:
    session = request.scope.get(SESSION_KEY) if request is not None else None
    signed_in = ""
    if session is not None:
        signed_in = (
            f"<form method='post' action='{LOGOUT_PATH}'><span class='sub'>Signed in as "
            f"{_e(session.client_id)}</span> <input type='hidden' name='csrf' value='{_e(session.csrf)}'>"
            "<button type='submit'>Log out</button></form>"
        )
    doc = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>{signed_in}"
        f"<h1>{_e(title)}</h1><p class='sub'>{subtitle}</p>{_form(agent)}{body}</body></html>"
    )
    return HTMLResponse(doc, status_code=status, headers=HEADERS)


def _form(agent: str = "") -> str:
    return (
        "<form method='get' action='/audit'>"
        f"<label>Agent <input name='agent' value='{_e(agent)}' size='24'></label> "
        "<button type='submit'>Show timeline</button></form>"
    )


def _who(actor: dict[str, Any]) -> str:
    parts = [f"client {actor.get('client_id') or '?'}"]
    if actor.get("agent_id"):
        parts.append(f"agent {actor['agent_id']}")
    if actor.get("session_id"):
        parts.append(f"session {actor['session_id']}")
    return ", ".join(parts)


def _show(value: Any, limit: int = 600) -> str:
    text = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    return text if len(text) <= limit else text[:limit] + "\n…"


def _event_item(ev: dict[str, Any]) -> tuple[str, int, str]:
    change = dict(ev.get("change") or {})
    ref = ""
    if "id" in change and str(ev.get("type", "")).startswith(("memory.", "episode.")):
        kind = "ep" if str(ev["type"]).startswith("episode.") else change.get("kind", "mem")
        ref = f"{kind}:{change['id']}"
    link = f" <a href='/audit/memory/{quote(ref, safe=':')}'>{_e(ref)}</a>" if ref else ""
    item = (
        "<li class='entry event'><div class='head'>"
        f"<span class='what'>{_e(ev.get('type'))}</span>{link}"
        f"<span class='when'>{_e(ev.get('at'))}</span>"
        f"<span class='who'>{_e(_who(ev.get('actor') or {}))}</span>"
        f"<span class='off'>offset {_e(ev.get('offset'))}</span></div>"
        f"<pre>{_e(_show(change))}</pre></li>"
    )
    return str(ev.get("at") or ""), 0, item


def _audit_item(rec: dict[str, Any]) -> tuple[str, int, str]:
    kind = "skipped" if rec.get("kind") == "skipped" else "refused"
    item = (
        f"<li class='entry {kind}'><div class='head'>"
        f"<span class='what'>{_e(kind)}: {_e(rec.get('tool'))}</span>"
        f"<span class='when'>{_e(rec.get('at'))}</span>"
        f"<span class='who'>{_e(_who(rec.get('who') or {}))}</span>"
        f"<span class='off'>audit {_e(rec.get('audit_offset'))}</span></div>"
        f"<div class='why'>why: {_e(rec.get('why'))}</div>"
        f"<pre>{_e(_show(rec.get('request') or {}))}</pre></li>"
    )
    return str(rec.get("at") or ""), 1, item


def _timeline(items: list[tuple[str, int, str]]) -> str:
    if not items:
        return "<p class='empty'>Nothing recorded.</p>"
    items.sort(key=lambda t: (t[0], t[1]))
    return "<ol class='timeline'>" + "".join(i for _, _, i in items) + "</ol>"


def _failed(body: dict[str, Any]) -> str | None:
    if body.get("ok") is False:
        return str(body.get("error") or body.get("reason") or "refused")
    return None


def _limit(raw: str | None) -> int:
    try:
        return max(1, min(PAGE_LIMIT, int(raw or PAGE_LIMIT)))
    except ValueError:
        return PAGE_LIMIT


def _may_sweep(acl: AclConfig | None, caller: Caller) -> bool:
    """Whether the landing page's list of every refusal is the caller's to see (asked before
    the call, so that a person opening the page is not audited as refused)."""
    if acl is None:
        return True
    client = acl.client(caller.client_id) if caller.authenticated else None
    return client is not None and client.permits(Demand(WILDCARD, READ))


def add_audit_routes(app: FastAPI, acl: AclConfig | None = None, sessions: AuditSessions | None = None) -> None:
    """The audit page's routes; with ``acl`` and ``sessions``, its login and logout too."""
    if acl is not None and sessions is not None:
        app.router.routes.extend(_login(acl, sessions))

    @app.get("/audit", include_in_schema=False)
    async def audit_page(request: Request) -> HTMLResponse:
        engine = request.app.state.engine
        caller = _caller(request, acl)
        params = request.query_params
        agent = params.get("agent") or ""
        limit = _limit(params.get("limit"))
        if not agent and not _may_sweep(acl, caller):
            return _page("memstream audit", "Pick an agent above.", "", request=request)
        if not agent:
            body = await dispatch(engine, caller, "audit_log", {"kind": "refused", "limit": limit})
            if (err := _failed(body)) is not None:
                return _page("memstream audit", "", f"<p class='err'>{_e(err)}</p>", 403, request=request)
            items = [_audit_item(r) for r in body.get("records", [])]
            subtitle = "Refused commands, oldest first. Pick an agent above."
            return _page("memstream audit", subtitle, _timeline(items), request=request)
        try:
            since = max(0, int(params.get("since") or 0))
        except ValueError:
            since = 0
        history = await dispatch(engine, caller, "history", {"agent_id": agent, "since_offset": since, "limit": limit})
        if (err := _failed(history)) is not None:
            status = 403 if err == "permission_denied" else 400
            return _page(f"Agent {agent}", "", f"<p class='err'>{_e(err)}</p>", status, agent, request)
        refusals = await dispatch(engine, caller, "audit_log", {"agent_id": agent, "kind": "all", "limit": limit})
        events = history.get("events", [])
        items = [_event_item(e) for e in events]
        items += [_audit_item(r) for r in refusals.get("records", [])] if _failed(refusals) is None else []
        more = ""
        if len(events) == limit:
            query = urlencode({"agent": agent, "since": events[-1]["offset"] + 1, "limit": limit})
            more = f"<p><a href='/audit?{_e(query)}'>Later events →</a></p>"
        subtitle = (
            f"{len(events)} events (from offset {since}) and {len(items) - len(events)} refused or skipped "
            "commands, oldest first."
        )
        return _page(f"Agent {agent}", _e(subtitle), _timeline(items) + more, agent=agent, request=request)

    @app.get("/audit/memory/{ref}", include_in_schema=False)
    async def memory_page(request: Request, ref: str) -> HTMLResponse:
        engine = request.app.state.engine
        caller = _caller(request, acl)
        history = await dispatch(engine, caller, "history", {"ref": ref, "limit": PAGE_LIMIT})
        if (err := _failed(history)) is not None:
            return _page(f"Memory {ref}", "", f"<p class='err'>{_e(err)}</p>", 404, request=request)
        events = history.get("events", [])
        items = [_event_item(e) for e in events]
        agent = events[0]["scope"]["agent_id"] if events else None
        ident = ref.split(":", 1)[-1]
        if agent:
            refusals = await dispatch(engine, caller, "audit_log", {"agent_id": agent, "kind": "all", "limit": 10_000})
            for rec in refusals.get("records", []) if _failed(refusals) is None else []:
                request_ = rec.get("request") or {}
                named = {str(request_.get(k)) for k in ("memory_id", "episode_id", "ref")}
                if ident in named or ref in named:
                    items.append(_audit_item(rec))
        link = f"<a href='/audit?{_e(urlencode({'agent': agent}))}'>{_e(agent)}</a>" if agent else "?"
        subtitle = f"Owned by agent {link}: {len(events)} events and {len(items) - len(events)} refusals, oldest first."
        return _page(f"Memory {history.get('ref', ref)}", subtitle, _timeline(items), request=request)


def _login(acl: AclConfig, sessions: AuditSessions) -> list[Route]:
    def draw_login(form: str) -> str:
        return (
            "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>memstream audit: log in</title><style>{STYLE}</style></head><body>"
            "<h1>memstream audit: log in</h1><p class='sub'>Sign in with your client's bearer token "
            f"(the ACL file's). The page shows what that client may read.</p>{form}</body></html>"
        )

    def refuse_logout(request: Request, error: str) -> Response:
        return _page("memstream audit", "", error, 403, request=request)

    page = LoginPage(
        login_path=LOGIN_PATH,
        logout_path=LOGOUT_PATH,
        home="/audit",
        session_cookie=SESSION_COOKIE,
        session_path=COOKIE_PATH,
        nonce_cookie=LOGIN_COOKIE,
        nonce_path=COOKIE_PATH,
        headers=HEADERS,
        session_of=lambda request: request.scope.get(SESSION_KEY),  # resolved by BearerAuth
        draw_login=draw_login,
        refuse_logout=refuse_logout,
    )
    return login_routes(page, acl, sessions)
