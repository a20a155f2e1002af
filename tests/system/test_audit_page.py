"""The audit view (issue 6, item 6): one agent's and one memory's history as an HTML timeline,
escaped, checked as served (HTTP) and as a person sees it (headless Chromium, a screenshot).

The browser test needs Debian's Chromium at /usr/bin/chromium (``infra/install-chromium.sh``,
which ``infra/run-tests.sh`` runs) and the ``playwright`` package (the test extra). It skips
when they are absent, unless MEMSTREAM_REQUIRE_BROWSER is set; it installs nothing itself.
MEMSTREAM_UPDATE_SCREENSHOTS=1 also copies the screenshot to docs/img/audit-timeline.png.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memstream.api.services.settings import load_settings
from tests.support.servers import ServerThread

CHROMIUM = Path("/usr/bin/chromium")
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
    required = bool(os.environ.get("MEMSTREAM_REQUIRE_BROWSER"))
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if required:
            raise
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    if not CHROMIUM.exists():
        if required:
            pytest.fail(f"MEMSTREAM_REQUIRE_BROWSER is set but {CHROMIUM} is missing (infra/install-chromium.sh)")
        pytest.skip(f"{CHROMIUM} is missing: run infra/install-chromium.sh (or set MEMSTREAM_REQUIRE_BROWSER)")
    srv, ids = populated
    dialogs: list[str] = []
    shot = tmp_path / "audit-timeline.png"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
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
