"""The console (issue 18, part 2) at ``/``: its shell and assets as served (CSP, no inline
script, nothing from another origin, loopback only without an ACL), and, in headless Chromium
against a real server with real data, the agents list, a search with its match reasons, a
memory's versions as a diff, the association graph with a click through to a memory, time
travel to an earlier offset, the audit trail's filter, a live update after another client's
store, and hostile memory content shown as text and never run.

Browser tests need Debian's Chromium at /usr/bin/chromium and playwright, and skip without
them unless MEMSTREAM_REQUIRE_BROWSER is set (as tests/system/test_audit_page.py).
MEMSTREAM_UPDATE_SCREENSHOTS=1 copies the screenshots into docs/img/ (the console-*.png files).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memstream.api.faces.http import create_app
from memstream.api.services.settings import load_settings
from tests.support.browser import browser_or_skip, launch
from tests.support.embedders import HashEmbedder
from tests.support.servers import ServerThread, log_end

DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
HOSTILE = "<img src=x onerror=alert('pwned')><script>alert('pwned')</script> & <b>bold</b>"
EVIL_AGENT = "<img src=x onerror=alert('agent')>"


@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerThread, dict[str, Any]]]:
    settings = load_settings(env={}, data_dir=tmp_path_factory.mktemp("console") / "data", sync="NORMAL")
    with ServerThread(settings) as srv:
        alice = {"x-client-id": "alice-laptop"}
        ops = {"x-client-id": "ops-bot"}
        with httpx.Client(base_url=srv.url, timeout=30) as http:

            def call(tool: str, args: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
                body: dict[str, Any] = http.post(f"/v1/tools/{tool}", json=args, headers=headers).json()
                return body

            meeting = call(
                "store",
                {
                    "agent_id": "alice",
                    "content": "Meeting with Bob about the billing service moved to Friday afternoon",
                    "associations": {
                        "entities": [{"name": "Bob", "aliases": ["Robert"]}, {"name": "billing service"}],
                        "relations": [{"subject": "Bob", "predicate": "owns", "object": "billing service"}],
                    },
                },
                alice,
            )
            postgres = {
                "entities": [{"name": "billing service"}, {"name": "Postgres"}],
                "relations": [{"subject": "billing service", "predicate": "runs on", "object": "Postgres"}],
            }
            db = call(
                "store",
                {"agent_id": "alice", "content": "The billing service runs on Postgres 16", "associations": postgres},
                alice,
            )
            carol = {
                "entities": [{"name": "Carol"}],
                "relations": [{"subject": "Carol", "predicate": "runs", "object": "Postgres"}],
            }
            call("store", {"agent_id": "alice", "content": "Carol is the Postgres admin", "associations": carol}, alice)
            link = {
                "relations": [{"subject": f"mem:{db['id']}", "predicate": "explains", "object": f"mem:{meeting['id']}"}]
            }
            call("declare_associations", {"agent_id": "alice", "associations": link}, alice)
            hostile = call("store", {"agent_id": "alice", "content": HOSTILE}, alice)
            before_update = log_end(srv)[0] - 1  # the offset of the last event before the edit
            edit = "Meeting with Bob about the billing service moved to Monday morning"
            call("update_memory", {"agent_id": "alice", "memory_id": meeting["id"], "content": edit}, ops)
            call("declare_standing", {"ref": f"mem:{meeting['id']}", "standing": "fact", "note": "confirmed"}, ops)
            call("lock_memory", {"agent_id": "alice", "memory_id": meeting["id"]}, alice)
            refused = call("delete_memory", {"agent_id": "alice", "memory_id": meeting["id"]}, ops)
            assert refused["ok"] is False
            skipped = call("store", {"agent_id": "alice", "content": HOSTILE}, alice)
            assert skipped["result"] == "skipped", skipped
            call("store", {"agent_id": "bob", "content": "bob's own note about lunch"}, {"x-client-id": "bob"})
            call("store", {"agent_id": EVIL_AGENT, "content": "an agent with a hostile id"}, {"x-client-id": "bob"})
            call("archive_episode", {"agent_id": "bob", "summary": "a talk about lunch"}, {"x-client-id": "bob"})
        ids = {"meeting": meeting["id"], "hostile": hostile["id"], "before_update": before_update}
        yield srv, ids


# -- as served ---------------------------------------------------------------------------------------


def test_shell_and_assets_are_served_with_a_strict_policy(populated: tuple[ServerThread, dict[str, Any]]) -> None:
    srv, _ = populated
    r = httpx.get(f"{srv.url}/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    csp = r.headers["content-security-policy"]
    for directive in ("default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'"):
        assert directive in csp, csp
    assert "unsafe-inline" not in csp and "http" not in csp
    page = r.text
    assert "<script src='/console/static/console.js' defer></script>" in page
    assert re.search(r"<script(?![^>]*\bsrc=)", page) is None  # no inline script
    assert re.search(r"(src|href)=['\"](https?:)?//", page) is None  # nothing from another origin
    for name, media in (("console.js", "text/javascript"), ("console.css", "text/css")):
        r = httpx.get(f"{srv.url}/console/static/{name}")
        assert r.status_code == 200 and r.headers["content-type"].startswith(media), name
        assert "//" not in re.sub(r"//[^\n]*|\"[^\"\n]*\"|'[^'\n]*'|`[^`\n]*`", "", r.text).replace(
            "http://www.w3.org", ""
        )
        assert "https://" not in r.text and "@import" not in r.text and "url(" not in r.text
    for path in ("/console/static/..%2Froutes.py", "/console/static/nope.js", "/console/static/routes.py"):
        assert httpx.get(f"{srv.url}{path}").status_code == 404, path


async def test_without_an_acl_the_console_answers_loopback_only(tmp_path: Path) -> None:
    app = create_app(load_settings(env={}, data_dir=tmp_path / "data", sync="NORMAL"), embedder=HashEmbedder())
    for peer, status in ((("10.1.2.3", 40000), 403), (("127.0.0.1", 40000), 200), (("::1", 40000), 200)):
        transport = httpx.ASGITransport(app=app, client=peer)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            for path in ("/", "/console/static/console.js"):
                r = await http.get(path)
                assert r.status_code == status, (peer, path, r.status_code)


# -- in the browser ----------------------------------------------------------------------------------


def _shot(page: Any, tmp_path: Path, name: str, shots: list[Path]) -> None:
    path = tmp_path / f"console-{name}.png"
    page.screenshot(path=str(path), full_page=False)
    assert path.stat().st_size > 10_000
    shots.append(path)


def test_console_in_headless_chromium(populated: tuple[ServerThread, dict[str, Any]], tmp_path: Path) -> None:
    browser_or_skip()
    from playwright.sync_api import expect, sync_playwright

    srv, ids = populated
    meeting = f"mem:{ids['meeting']}"
    dialogs: list[str] = []
    errors: list[str] = []
    shots: list[Path] = []
    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(f"{srv.url}/")

            # Agents: counts and last activity.
            alice = page.locator("#agents tr[data-agent='alice']")
            expect(alice).to_be_visible()
            cells = alice.locator("td").all_inner_texts()
            assert cells[1:4] == ["4", "0", ""], cells
            assert cells[6] == "memory.locked", cells
            bob = page.locator("#agents tr[data-agent='bob']").locator("td").all_inner_texts()
            assert bob[1:3] == ["1", "1"], bob
            page.goto(f"{srv.url}/#/agent/bob")
            expect(page.locator("#episodes .episode")).to_have_count(1)
            expect(page.locator("#episodes")).to_contain_text("a talk about lunch")
            page.goto(f"{srv.url}/#/")
            _shot(page, tmp_path, "agents", shots)
            evil = page.locator("#agents tbody tr").nth(0)  # '<' sorts first
            assert (
                evil.get_attribute("data-agent") == EVIL_AGENT and evil.locator("td a").first.inner_text() == EVIL_AGENT
            )
            assert page.locator("#agents img").count() == 0

            # Search with the match reasons.
            alice.locator("a", has_text="alice").click()
            page.fill("#recall-query", "billing service Postgres")
            page.click("#recall-form button[type=submit]")
            results = page.locator("#recall-results .result")
            expect(results.first).to_be_visible()
            assert "Postgres" in results.first.inner_text()
            assert "matched by" in results.first.locator(".reason").inner_text()
            assert "score" in results.first.locator(".reason").inner_text()
            _shot(page, tmp_path, "search", shots)

            # The hostile memory is on screen as text, and nothing in it ran or was parsed.
            expect(page.locator("#memories")).to_contain_text("<script>alert('pwned')</script>")
            assert page.locator("#memories img, #memories b, #memories script").count() == 0

            page.goto(f"{srv.url}/#/memory/mem:{ids['hostile']}")
            expect(page.locator("#versions")).to_contain_text("<script>alert('pwned')</script>")
            assert page.locator("main img, main script").count() == 0
            assert page.locator("main b", has_text="bold").count() == 0
            page.go_back()
            expect(page.locator("#memories")).to_be_visible()

            # A memory's page: the edit as a word diff, who did it, its standing and associations.
            page.locator(f"#memories a[href='#/memory/{meeting.replace(':', '%3A')}']").click()
            expect(page.locator("#versions .version")).to_have_count(2)
            second = page.locator("#versions .version").nth(1)
            assert second.locator("del").all_inner_texts() == ["Friday afternoon"]
            assert second.locator("ins").all_inner_texts() == ["Monday morning"]
            assert "client ops-bot" in second.inner_text()
            assert "fact" in page.locator("#standings").inner_text()
            assoc = page.locator("#associations").inner_text()
            assert "mentions Bob" in assoc and "billing service" in assoc
            events = page.locator("#events tbody tr td:first-child").all_inner_texts()
            assert events == ["memory.stored", "memory.updated", "standing.declared", "memory.locked"], events
            _shot(page, tmp_path, "memory", shots)

            # Time travel: the same page before the edit.
            page.fill("#asof-input", str(ids["before_update"]))
            page.click("#asof button[type=submit]")
            expect(page.locator("#versions .version")).to_have_count(1)
            expect(page.locator("#current")).to_contain_text("Friday afternoon")
            assert page.locator("#standings").count() == 0  # declared later
            # ... and the agents as they were then (bob had not written yet).
            page.click("#nav-agents")
            expect(page.locator("#agents tr[data-agent='alice']")).to_be_visible()
            assert page.locator("#agents tr[data-agent='bob']").count() == 0
            assert "as of" in page.locator("h1").inner_text()
            page.click("#asof-now")
            expect(page.locator("#agents tr[data-agent='bob']")).to_be_visible()
            # An instant works as an offset does: the moment of the first version.
            stored_at = httpx.post(f"{srv.url}/v1/tools/history", json={"ref": meeting}).json()["events"][0]["at"]
            page.goto(f"{srv.url}/#/memory/{meeting}")
            expect(page.locator("#versions .version")).to_have_count(2)
            page.fill("#asof-input", stored_at)
            page.click("#asof button[type=submit]")
            expect(page.locator("#versions .version")).to_have_count(1)
            expect(page.locator("#current")).to_contain_text("Friday afternoon")
            page.click("#asof-now")
            expect(page.locator("#current")).to_contain_text("Monday morning")

            # The graph, drawn, and a click through to a memory.
            page.goto(f"{srv.url}/#/graph/alice")
            expect(page.locator("svg.graph .node.entity")).to_have_count(4)
            expect(page.locator("svg.graph .node.record")).to_have_count(3)
            labels = sorted(page.locator("svg.graph .edge-label").all_text_contents())
            assert labels == ["explains", "owns", "runs", "runs on"], labels
            page.locator("svg.graph .node.entity", has_text="Bob").click()
            expect(page.locator("#graph-detail")).to_contain_text("Robert")
            _shot(page, tmp_path, "graph", shots)
            page.locator(f"svg.graph .node.record[data-key='{meeting}']").click()
            expect(page.locator("h1")).to_have_text(f"Memory {meeting}")

            # The audit trail, filtered.
            page.goto(f"{srv.url}/#/audit")
            expect(page.locator("#audit tbody tr").first).to_be_visible()
            kinds = set(page.locator("#audit tbody tr td:nth-child(2)").all_inner_texts())
            assert kinds == {"refused", "skipped"}, kinds
            page.select_option("#audit-kind", "refused")
            page.fill("#audit-text", "locked")
            page.click("#audit-form button[type=submit]")
            expect(page.locator("#audit-count")).to_have_text("1 record(s)")
            row = page.locator("#audit tbody tr").first.inner_text()
            assert "delete_memory" in row and "client ops-bot" in row
            _shot(page, tmp_path, "audit", shots)
        finally:
            browser.close()
    assert not dialogs, f"a script ran: {dialogs}"
    assert not errors, errors
    if os.environ.get("MEMSTREAM_UPDATE_SCREENSHOTS"):
        for shot in shots:
            shutil.copyfile(shot, DOCS_IMG / shot.name)


def test_console_follows_the_change_feed(populated: tuple[ServerThread, dict[str, Any]]) -> None:
    """Another client stores while the console is open: the change arrives in the live panel
    (as text) and the agents list, a view of now, is refreshed with the new agent."""
    browser_or_skip()
    from playwright.sync_api import expect, sync_playwright

    srv, _ = populated
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{srv.url}/")
            expect(page.locator("#live")).to_have_text("live")
            expect(page.locator("#agents tr[data-agent='alice']")).to_be_visible()
            carol = page.locator("#agents tr[data-agent='carol']")
            assert carol.count() == 0
            with httpx.Client(base_url=srv.url, timeout=30) as http:
                r = http.post(
                    "/v1/tools/store",
                    json={"agent_id": "carol", "content": "carol joined the <i>fleet</i>"},
                    headers={"x-client-id": "carol-bot"},
                )
                stored = r.json()
            assert stored["result"] == "stored", stored
            item = page.locator("#feed-list li.feed-item").first
            expect(item).to_contain_text("memory.stored")
            expect(item).to_contain_text("client carol-bot")
            expect(item).to_contain_text("carol joined the <i>fleet</i>")
            assert page.locator("#feed-list i").count() == 0
            expect(carol.locator("td").nth(1)).to_have_text("1")
        finally:
            browser.close()
    assert not errors, errors
