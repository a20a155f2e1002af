"""The audit view (issue 6, item 6): one agent's and one memory's history as an HTML timeline,
escaped, checked as served (HTTP) and as a person sees it (headless Chromium, a screenshot).
In ACL mode (issue 17, item 2) the page's caller is the bearer token's client, never the one
X-Client-Id names, and a person logs in with a token for a session cookie (HttpOnly,
SameSite=Strict, signed, expiring, ended by logout; CSRF tokens on both forms): checked with
curl-like requests and in the browser.

The browser test needs Debian's Chromium at /usr/bin/chromium (``infra/install-chromium.sh``,
which ``infra/run-tests.sh`` runs) and the ``playwright`` package (the test extra). It skips
when they are absent, unless MEMSTREAM_REQUIRE_BROWSER is set; it installs nothing itself.
MEMSTREAM_UPDATE_SCREENSHOTS=1 also copies the screenshot to docs/img/audit-timeline.png.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memstream.api.services.settings import load_settings
from tests.support.acl import ACL, TOKENS, write_acl
from tests.support.browser import browser_or_skip, launch
from tests.support.cookies import assert_strict, cookie_value, cookieless_client, set_cookies
from tests.support.servers import ServerThread, log_end

DOC_IMAGE = Path(__file__).resolve().parents[2] / "docs" / "img" / "audit-timeline.png"
HOSTILE = "<script>alert('pwned')</script> & <b>bold</b> \"quoted\""


@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerThread, dict[str, Any]]]:
    settings = load_settings(env={}, data_dir=tmp_path_factory.mktemp("audit") / "data", sync="NORMAL")
    with ServerThread(settings) as srv:
        alice = {"x-client-id": "alice-laptop"}
        ops = {"x-client-id": "ops-bot"}
        with httpx.Client(base_url=srv.url, timeout=30) as http:

            def call(tool: str, args: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
                body: dict[str, Any] = http.post(f"/v1/tools/{tool}", json=args, headers=headers).json()
                return body

            first = call("store", {"agent_id": "alice", "content": "Meeting with Bob moved to Friday"}, alice)
            hostile = call("store", {"agent_id": "alice", "content": HOSTILE}, alice)
            update = {"agent_id": "alice", "memory_id": first["id"], "content": "Meeting on Monday"}
            call("update_memory", update, alice)
            call("lock_memory", {"agent_id": "alice", "memory_id": first["id"]}, alice)
            refused = call("delete_memory", {"agent_id": "alice", "memory_id": first["id"]}, ops)
            assert refused["ok"] is False
            call("store", {"agent_id": "alice", "content": "x", "colour": "blue"}, ops)  # unknown field: refused
            skipped = call("store", {"agent_id": "alice", "content": HOSTILE}, alice)
            assert skipped["result"] == "skipped", skipped
            call("store", {"agent_id": "bob", "content": "bob's own note"}, {"x-client-id": "bob"})
        yield srv, {"first": first["id"], "hostile": hostile["id"]}


def test_agent_timeline_html_lists_events_and_refusals_escaped(populated: tuple[ServerThread, dict[str, Any]]) -> None:
    srv, ids = populated
    r = httpx.get(f"{srv.url}/audit", params={"agent": "alice"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in r.headers["content-security-policy"]
    page = r.text
    for what in ("memory.stored", "memory.updated", "memory.locked", "refused: delete_memory", "refused: store"):
        assert what in page, what
    assert "skipped: store" in page
    assert "client alice-laptop" in page and "client ops-bot" in page
    assert "<script>" not in page  # the hostile memory is shown as text only
    assert "&lt;script&gt;alert(" in page
    assert "bob&#x27;s own note" not in page and "bob's own note" not in page  # another agent's memory
    assert f"/audit/memory/mem:{ids['first']}" in page


def test_memory_timeline_and_bad_requests(populated: tuple[ServerThread, dict[str, Any]]) -> None:
    srv, ids = populated
    r = httpx.get(f"{srv.url}/audit/memory/mem:{ids['first']}")
    assert r.status_code == 200
    page = r.text
    for what in ("memory.stored", "memory.updated", "memory.locked", "refused: delete_memory"):
        assert what in page, what
    assert "refused: store" not in page  # that refusal named no memory
    for path, status in [
        ("/audit/memory/mem:999999", 404),
        ("/audit/memory/%3Cscript%3E", 404),
        ("/audit?agent=nobody", 200),
        ("/audit?agent=alice&limit=abc&since=-3", 200),
        ("/audit", 200),
    ]:
        r = httpx.get(f"{srv.url}{path}")
        assert r.status_code == status, (path, r.status_code)
        assert "<script>" not in r.text, path


def test_audit_page_in_headless_chromium(populated: tuple[ServerThread, dict[str, Any]], tmp_path: Path) -> None:
    browser_or_skip()
    from playwright.sync_api import sync_playwright

    srv, ids = populated
    dialogs: list[str] = []
    shot = tmp_path / "audit-timeline.png"
    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(f"{srv.url}/audit?agent=alice")
            assert page.title() == "Agent alice"
            entries = page.locator("li.entry")
            assert entries.count() >= 7
            assert page.locator("li.entry.refused").count() == 2
            assert page.locator("li.entry.skipped").count() == 1
            # The hostile content is on screen as text, and no script ran.
            assert "<script>alert('pwned')</script> & <b>bold</b>" in page.locator("body").inner_text()
            assert page.locator("b", has_text="bold").count() == 0
            assert "locked" in page.locator("li.entry.refused").first.inner_text()
            page.screenshot(path=str(shot), full_page=True)
            # Follow the link to one memory's timeline.
            page.click(f"a[href='/audit/memory/mem:{ids['first']}']")
            page.wait_for_load_state()
            assert page.title() == f"Memory mem:{ids['first']}"
            assert page.locator("li.entry.refused").count() == 1
        finally:
            browser.close()
    assert not dialogs, f"a script ran: {dialogs}"
    assert shot.stat().st_size > 10_000
    if os.environ.get("MEMSTREAM_UPDATE_SCREENSHOTS"):
        DOC_IMAGE.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, DOC_IMAGE)


# -- ACL mode ----------------------------------------------------------------------------------------

CSRF = re.compile(r"name='csrf' value='([^']+)'")


def _bearer(client: str, **extra: str) -> dict[str, str]:
    return {"authorization": f"Bearer {TOKENS[client]}", **extra}


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """An ACL-mode server: alice's memories written by rw-alice, bob's by the admin."""
    root = tmp_path_factory.mktemp("audit-acl")
    settings = load_settings(env={}, data_dir=root / "data", sync="NORMAL", acl_file=write_acl(root / "acl.json", ACL))
    with ServerThread(settings) as srv:
        with httpx.Client(base_url=srv.url, timeout=30) as http:
            for client, agent, text in (("rw-alice", "alice", "alice's own note"), ("admin", "bob", "bob's own note")):
                r = http.post("/v1/tools/store", json={"agent_id": agent, "content": text}, headers=_bearer(client))
                assert r.json()["result"] == "stored", r.text
        yield srv


def test_acl_audit_page_is_the_bearer_clients_never_a_headers(acl_server: ServerThread) -> None:
    """X-Client-Id names nobody in ACL mode: the page shows the token's client its own agent,
    refuses it another's, and the refusal is recorded with the token's client as actor."""
    with cookieless_client(acl_server.url) as http:
        r = http.get("/audit", params={"agent": "alice"}, headers=_bearer("rw-alice", **{"x-client-id": "mallory"}))
        assert r.status_code == 200, r.text
        assert "alice&#x27;s own note" in r.text and "client rw-alice" in r.text and "mallory" not in r.text
        before = log_end(acl_server)
        r = http.get("/audit", params={"agent": "bob"}, headers=_bearer("rw-alice", **{"x-client-id": "mallory"}))
        assert r.status_code == 403 and "permission_denied" in r.text and "bob&#x27;s own note" not in r.text
        assert log_end(acl_server) == (before[0], before[1] + 1)  # the refusal, audited
        audit = http.post("/v1/tools/audit_log", json={"agent_id": "bob"}, headers=_bearer("admin")).json()
        [refusal] = [rec for rec in audit["records"] if rec["tool"] == "history"]
        assert refusal["who"]["client_id"] == "rw-alice", refusal
        assert "mallory" not in json.dumps(audit)
        # The landing page's list of every refusal is a sweep: shown to a client that may sweep,
        # and not even asked for (so nothing is audited) for one that may not.
        before = log_end(acl_server)
        r = http.get("/audit", headers=_bearer("rw-alice"))
        assert r.status_code == 200 and "Pick an agent above." in r.text and "class='entry" not in r.text
        assert log_end(acl_server) == before
        r = http.get("/audit", headers=_bearer("admin"))
        assert r.status_code == 200 and "refused: history" in r.text and "client rw-alice" in r.text
        # Without a token or a session: a browser is sent to the login form, anything else is 401.
        r = http.get("/audit", params={"agent": "alice"}, headers={"x-client-id": "rw-alice"})
        assert r.status_code == 303 and r.headers["location"] == "/audit/login"
        assert http.post("/audit/logout").status_code == 401
        r = http.get("/audit", params={"agent": "alice"}, headers={"authorization": "Bearer not-a-token"})
        assert r.status_code == 401


def _login_form(http: httpx.Client) -> tuple[str, str]:
    """(login cookie, CSRF token) of a fresh login form."""
    r = http.get("/audit/login")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    cookie = set_cookies(r)["memstream_audit_login"]
    assert_strict(cookie, "/audit")
    match = CSRF.search(r.text)
    assert match is not None, r.text
    return cookie_value(cookie), match.group(1)


def test_acl_audit_login_gives_a_strict_session_cookie_and_logout_ends_it(acl_server: ServerThread) -> None:
    with cookieless_client(acl_server.url) as http:
        nonce, csrf = _login_form(http)
        login = {"memstream_audit_login": nonce}

        def post_login(form: dict[str, str], cookies: dict[str, str], **headers: str) -> httpx.Response:
            jar = "; ".join(f"{k}={v}" for k, v in cookies.items())
            return http.post("/audit/login", data=form, headers={"cookie": jar, **headers} if jar else headers)

        # Refused: an unknown token, a wrong or missing CSRF token, no login cookie, another site.
        refused = [
            (post_login({"csrf": csrf, "token": "not-a-token"}, login), 401),
            (post_login({"csrf": csrf + "x", "token": TOKENS["rw-alice"]}, login), 403),
            (post_login({"token": TOKENS["rw-alice"]}, login), 403),
            (post_login({"csrf": csrf, "token": TOKENS["rw-alice"]}, {}), 403),
            (post_login({"csrf": csrf, "token": TOKENS["rw-alice"]}, login, origin="http://evil.example"), 403),
        ]
        for r, status in refused:
            assert r.status_code == status, (status, r.status_code, r.text)
            assert "memstream_audit" not in set_cookies(r)
        r = post_login({"csrf": csrf, "token": TOKENS["rw-alice"]}, login)
        assert r.status_code == 303 and r.headers["location"] == "/audit", r.text
        session_cookie = set_cookies(r)["memstream_audit"]
        assert_strict(session_cookie, "/audit")
        assert "max-age=3600" in session_cookie.lower()
        session = {"cookie": f"memstream_audit={cookie_value(session_cookie)}"}

        r = http.get("/audit", params={"agent": "alice"}, headers=session)
        assert r.status_code == 200 and "alice&#x27;s own note" in r.text and "Signed in as rw-alice" in r.text
        assert http.get("/audit", params={"agent": "bob"}, headers=session).status_code == 403
        # The cookie opens the audit page only: never a tool, the health or the metrics.
        for method, path in (
            ("POST", "/v1/tools/list_memories"),
            ("POST", "/mcp"),
            ("GET", "/health"),
            ("GET", "/metrics"),
        ):
            r = http.request(method, path, json={"agent_id": "alice"}, headers=session)
            assert r.status_code == 401, (path, r.status_code)
        # A forged or altered cookie opens nothing.
        forged = {"cookie": f"memstream_audit={cookie_value(session_cookie)[:-2]}xx"}
        assert http.get("/audit", params={"agent": "alice"}, headers=forged).status_code == 303

        logout_csrf = CSRF.search(http.get("/audit", headers=session).text)
        assert logout_csrf is not None
        r = http.post("/audit/logout", data={"csrf": "not-it"}, headers=session)
        assert r.status_code == 403  # still signed in
        assert http.get("/audit", params={"agent": "alice"}, headers=session).status_code == 200
        r = http.post("/audit/logout", data={"csrf": logout_csrf.group(1)}, headers=session)
        assert r.status_code == 303 and r.headers["location"] == "/audit/login"
        assert cookie_value(set_cookies(r)["memstream_audit"]) in ("", '""')
        # The old cookie no longer opens anything.
        r = http.get("/audit", params={"agent": "alice"}, headers=session)
        assert r.status_code == 303 and r.headers["location"] == "/audit/login"


def test_acl_audit_login_in_headless_chromium(acl_server: ServerThread) -> None:
    """A person with a browser: log in with a token, see their own agent's timeline, be refused
    another agent's, log out (and be asked to log in again)."""
    browser_or_skip()
    from playwright.sync_api import sync_playwright

    dialogs: list[str] = []
    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            context = browser.new_context()
            page = context.new_page()
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(f"{acl_server.url}/audit?agent=alice")
            assert page.title() == "memstream audit: log in"  # sent to the login form
            page.fill("input[name=token]", TOKENS["rw-alice"])
            with page.expect_navigation():
                page.click("button[type=submit]")
            assert page.title() == "memstream audit", (page.url, page.content()[:2000])
            assert "Signed in as rw-alice" in page.locator("body").inner_text()
            [cookie] = [c for c in context.cookies() if c["name"] == "memstream_audit"]
            assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict" and cookie["path"] == "/audit"

            page.fill("input[name=agent]", "alice")
            with page.expect_navigation():
                page.click("form[action='/audit'] button[type=submit]")
            assert page.title() == "Agent alice"
            assert page.locator("li.entry.event").count() >= 1
            assert "alice's own note" in page.locator("body").inner_text()

            response = page.goto(f"{acl_server.url}/audit?agent=bob")
            assert response is not None and response.status == 403
            assert "permission_denied" in page.locator("p.err").inner_text()
            assert "bob's own note" not in page.locator("body").inner_text()

            with page.expect_navigation():
                page.click("form[action='/audit/logout'] button[type=submit]")
            assert page.title() == "memstream audit: log in"
            assert not [c for c in context.cookies() if c["name"] == "memstream_audit"]
            page.goto(f"{acl_server.url}/audit?agent=alice")
            assert page.title() == "memstream audit: log in"
        finally:
            browser.close()
    assert not dialogs, f"a script ran: {dialogs}"
