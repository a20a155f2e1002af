"""The console on a Kafka deployment's router (`memstream serve --kafka`): the page and its
assets are served, and in headless Chromium the agents list (joined across partitions by
``list_agents``), a memory's diff, the graph and an agent's audit trail come through the router
from the workers, and a store made while the page is open arrives through the router's change
feed. Needs the broker, and Chromium (tests/support/browser.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.browser import browser_or_skip, launch
from tests.support.deployment import shared_deployment

pytestmark = [pytest.mark.kafka]


@pytest.fixture(scope="module")
def router() -> Iterator[tuple[str, dict[str, Any]]]:
    with shared_deployment() as url:
        with httpx.Client(base_url=url, timeout=60, headers={"x-client-id": "ops"}) as http:

            def call(tool: str, args: dict[str, Any]) -> dict[str, Any]:
                body: dict[str, Any] = http.post(f"/v1/tools/{tool}", json=args).json()
                return body

            rider = {
                "entities": [{"name": "Dana"}, {"name": "payments"}],
                "relations": [{"subject": "Dana", "predicate": "owns", "object": "payments"}],
            }
            first = call(
                "store", {"agent_id": "kc-alice", "content": "Dana owns payments since May", "associations": rider}
            )
            assert first["result"] == "stored", first
            edited = call(
                "update_memory",
                {"agent_id": "kc-alice", "memory_id": first["id"], "content": "Dana owns payments since June"},
            )
            assert edited.get("ok") is not False, edited
            for n in range(6):  # agents spread over several partitions
                assert call("store", {"agent_id": f"kc-agent-{n}", "content": f"note {n}"})["result"] == "stored"
            locked = call("lock_memory", {"agent_id": "kc-alice", "memory_id": first["id"]})
            assert locked.get("ok") is not False, locked
            assert call("delete_memory", {"agent_id": "kc-alice", "memory_id": first["id"]})["ok"] is False
        yield url, {"first": first["id"]}


def test_router_serves_the_console(router: tuple[str, dict[str, Any]]) -> None:
    url, _ = router
    page = httpx.get(f"{url}/")
    assert page.status_code == 200 and "default-src 'none'" in page.headers["content-security-policy"]
    assert "/console/static/console.js" in page.text
    assert httpx.get(f"{url}/console/static/console.js").status_code == 200


def test_console_through_the_router_in_headless_chromium(router: tuple[str, dict[str, Any]]) -> None:
    browser_or_skip()
    from playwright.sync_api import expect, sync_playwright

    url, ids = router
    ref = f"mem:{ids['first']}"
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{url}/")
            expect(page.locator("#agents tr[data-agent='kc-alice']")).to_be_visible()
            shown = page.locator("#agents tbody tr").evaluate_all("rows => rows.map(r => r.dataset.agent)")
            assert {f"kc-agent-{n}" for n in range(6)} <= set(shown) and shown == sorted(shown)
            page.goto(f"{url}/#/memory/{ref}")
            expect(page.locator("#versions .version")).to_have_count(2)
            assert page.locator("#versions .version").nth(1).locator("del").all_inner_texts() == ["May"]
            assert page.locator("#versions .version").nth(1).locator("ins").all_inner_texts() == ["June"]
            page.goto(f"{url}/#/graph/kc-alice")
            expect(page.locator("svg.graph .node.entity")).to_have_count(2)
            page.locator(f"svg.graph .node.record[data-key='{ref}']").click()
            expect(page.locator("h1")).to_have_text(f"Memory {ref}")
            page.goto(f"{url}/#/audit?kind=refused&agent=kc-alice")
            expect(page.locator("#audit-count")).to_have_text("1 record(s)")
            assert "delete_memory" in page.locator("#audit tbody tr").first.inner_text()
            # Live: the router's feed, read from the events topic.
            page.goto(f"{url}/")
            expect(page.locator("#live")).to_have_text("live", timeout=30_000)
            with httpx.Client(base_url=url, timeout=60, headers={"x-client-id": "kc-late"}) as http:
                late = http.post("/v1/tools/store", json={"agent_id": "kc-late", "content": "written while watched"})
                assert late.json()["result"] == "stored", late.text
            item = page.locator("#feed-list li.feed-item").first
            expect(item).to_contain_text("written while watched", timeout=30_000)
            expect(item).to_contain_text("client kc-late")
            expect(page.locator("#agents tr[data-agent='kc-late']")).to_be_visible(timeout=30_000)
        finally:
            browser.close()
    assert not errors, errors
