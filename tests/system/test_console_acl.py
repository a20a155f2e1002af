"""The console in ACL mode: a person logs in with a bearer token at /console/login and gets a
session cookie (HttpOnly, SameSite=Strict, Path=/, signed, ended by logout). The cookie stands
for the token on the tools and the change feed, a POST only with the session's CSRF token, and
always as the session's client: what the console shows is what that client may read. Checked
with curl-like requests and in headless Chromium (tests/support/browser.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from memstream.api.services.settings import load_settings
from tests.support.acl import ACL, TOKENS, write_acl
from tests.support.browser import browser_or_skip, launch
from tests.support.cookies import assert_strict, cookie_value, cookieless_client, set_cookies
from tests.support.servers import ServerThread

CSRF_INPUT = re.compile(r"name='csrf' value='([^']+)'")
CSRF_META = re.compile(r"<meta name='memstream-csrf' content='([^']+)'>")


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerThread, dict[str, int]]]:
    root = tmp_path_factory.mktemp("console-acl")
    settings = load_settings(env={}, data_dir=root / "data", sync="NORMAL", acl_file=write_acl(root / "acl.json", ACL))
    ids: dict[str, int] = {}
    with ServerThread(settings) as srv:
        with httpx.Client(base_url=srv.url, timeout=30) as http:
            for client, agent, text in (("rw-alice", "alice", "alice's own note"), ("admin", "bob", "bob's own note")):
                auth = {"authorization": f"Bearer {TOKENS[client]}"}
                r = http.post("/v1/tools/store", json={"agent_id": agent, "content": text}, headers=auth)
                assert r.json()["result"] == "stored", r.text
                ids[agent] = r.json()["id"]
        yield srv, ids


def _login(http: httpx.Client, client: str) -> tuple[str, str]:
    """(session cookie value, CSRF token of the page) after logging in as ``client``."""
    form = http.get("/console/login")
    assert form.status_code == 200 and "default-src 'none'" in form.headers["content-security-policy"]
    nonce = cookie_value(set_cookies(form)["memstream_console_login"])
    match = CSRF_INPUT.search(form.text)
    assert match is not None
    r = http.post(
        "/console/login",
        data={"csrf": match.group(1), "token": TOKENS[client]},
        headers={"cookie": f"memstream_console_login={nonce}"},
    )
    assert r.status_code == 303 and r.headers["location"] == "/", r.text
    cookie = set_cookies(r)["memstream_console"]
    assert_strict(cookie, "/")
    page = http.get("/", headers={"cookie": f"memstream_console={cookie_value(cookie)}"})
    assert page.status_code == 200 and f"Signed in as <b id='whoami'>{client}</b>" in page.text
    meta = CSRF_META.search(page.text)
    assert meta is not None
    return cookie_value(cookie), meta.group(1)


def test_console_session_opens_the_tools_with_csrf_and_only_as_its_client(
    acl_server: tuple[ServerThread, dict[str, int]],
) -> None:
    srv, ids = acl_server
    with cookieless_client(srv.url) as http:
        # No session: the page sends a browser to the login form; the tools answer 401.
        r = http.get("/")
        assert r.status_code == 303 and r.headers["location"] == "/console/login"
        assert http.post("/v1/tools/list_agents", json={}).status_code == 401
        # A bad login: unknown token, or a form that did not come from the login page.
        form = http.get("/console/login")
        nonce = cookie_value(set_cookies(form)["memstream_console_login"])
        token = CSRF_INPUT.search(form.text)
        assert token is not None
        jar = {"cookie": f"memstream_console_login={nonce}"}
        bad = http.post("/console/login", data={"csrf": token.group(1), "token": "nope"}, headers=jar)
        assert bad.status_code == 401 and "memstream_console" not in set_cookies(bad)
        forged = http.post("/console/login", data={"csrf": "x", "token": TOKENS["rw-alice"]}, headers=jar)
        assert forged.status_code == 403 and "memstream_console" not in set_cookies(forged)

        cookie, csrf = _login(http, "rw-alice")
        session = {"cookie": f"memstream_console={cookie}", "x-client-id": "admin"}  # the header names nobody
        # A POST without the session's CSRF token is refused before any tool runs.
        for headers in (session, {**session, "x-csrf-token": "not-it"}):
            r = http.post("/v1/tools/list_agents", json={}, headers=headers)
            assert r.status_code == 403 and "X-CSRF-Token" in r.text, r.text
        ok = {**session, "x-csrf-token": csrf}
        listing = http.post("/v1/tools/list_agents", json={}, headers=ok).json()
        assert [a["agent_id"] for a in listing["agents"]] == ["alice"]
        mine = http.post("/v1/tools/history", json={"ref": f"mem:{ids['alice']}"}, headers=ok)
        assert mine.status_code == 200 and mine.json()["events"][0]["actor"]["client_id"] == "rw-alice"
        theirs = http.post("/v1/tools/list_memories", json={"agent_id": "bob"}, headers=ok)
        assert theirs.status_code == 403 and "bob's own note" not in theirs.text
        audit = http.post(
            "/v1/tools/audit_log", json={"agent_id": "bob"}, headers={"authorization": f"Bearer {TOKENS['admin']}"}
        )
        assert [r["who"]["client_id"] for r in audit.json()["records"]] == ["rw-alice"]  # the session's client
        # The audit page's cookie is not the console's: it opens no tool.
        r = http.post(
            "/v1/tools/list_agents", json={}, headers={"cookie": f"memstream_audit={cookie}", "x-csrf-token": csrf}
        )
        assert r.status_code == 401
        # The console's cookie opens the tools, the context routes and the feed: nothing else.
        for method, path in (("POST", "/mcp"), ("GET", "/health"), ("GET", "/metrics"), ("GET", "/audit")):
            r = http.request(method, path, json={}, headers={**ok, "accept": "application/json"})
            assert r.status_code in (303, 401), (path, r.status_code)  # /audit: to its own login
        # A forged cookie opens nothing.
        r = http.post(
            "/v1/tools/list_agents",
            json={},
            headers={"cookie": f"memstream_console={cookie[:-2]}xx", "x-csrf-token": csrf},
        )
        assert r.status_code == 401

        # Logout needs the CSRF token too, then the cookie opens nothing.
        assert http.post("/console/logout", data={"csrf": "no"}, headers=session).status_code == 403
        r = http.post("/console/logout", data={"csrf": csrf}, headers=session)
        assert r.status_code == 303 and r.headers["location"] == "/console/login"
        assert http.post("/v1/tools/list_agents", json={}, headers=ok).status_code == 401
        assert http.get("/", headers=session).status_code == 303


def test_console_login_in_headless_chromium(acl_server: tuple[ServerThread, dict[str, int]]) -> None:
    browser_or_skip()
    from playwright.sync_api import expect, sync_playwright

    srv, ids = acl_server
    dialogs: list[str] = []
    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            context = browser.new_context()
            page = context.new_page()
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(f"{srv.url}/")
            assert page.title() == "memstream console: log in"
            page.fill("input[name=token]", TOKENS["rw-alice"])
            with page.expect_navigation():
                page.click("button[type=submit]")
            expect(page.locator("#whoami")).to_have_text("rw-alice")
            expect(page.locator("#agents tr[data-agent='alice']")).to_be_visible()
            assert page.locator("#agents tr[data-agent='bob']").count() == 0
            [cookie] = [c for c in context.cookies() if c["name"] == "memstream_console"]
            assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict" and cookie["path"] == "/"
            assert page.evaluate("document.cookie") == ""  # out of the page's script's reach
            # The change feed takes the session too, and brings only the client's agents' events.
            expect(page.locator("#live")).to_have_text("live")
            admin = {"authorization": f"Bearer {TOKENS['admin']}"}
            with httpx.Client(base_url=srv.url, timeout=30, headers=admin) as http:
                for agent in ("bob", "alice"):  # bob's first: had it been delivered, it would be there by now
                    r = http.post("/v1/tools/store", json={"agent_id": agent, "content": f"{agent} live {agent}"})
                    assert r.json()["result"] == "stored", r.text
            expect(page.locator("#feed-list li.feed-item").first).to_contain_text("alice live alice")
            assert "bob live bob" not in page.locator("#feed-list").inner_text()
            # Tool calls from the page carry the session; another agent's memory is refused.
            page.goto(f"{srv.url}/#/agent/alice")
            expect(page.locator("#memories")).to_contain_text("alice's own note")
            page.goto(f"{srv.url}/#/memory/mem:{ids['bob']}")
            expect(page.locator("p.err")).to_be_visible()
            assert "bob's own note" not in page.locator("body").inner_text()
            # Log out: the console asks for a token again.
            with page.expect_navigation():
                page.click("form.logout button[type=submit]")
            assert page.title() == "memstream console: log in"
            page.goto(f"{srv.url}/")
            assert page.title() == "memstream console: log in"
        finally:
            browser.close()
    assert not dialogs, dialogs
