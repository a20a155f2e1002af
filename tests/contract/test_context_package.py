"""Token-budgeted context packages (CONTRACTS A6, seed 001): the budget's invariants, refill of
exactly one anchor, the token counter, through both faces and POST /context/package."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.budgets import check_budget
from tests.support.corpora import corpus
from tests.support.servers import ServerThread

# -- through the faces ---------------------------------------------------------------------------


async def _fill(face: Any, agent: str) -> list[str]:
    refs = []
    for t in corpus(36):
        r = await face.call("store", {"agent_id": agent, "content": t})
        refs.append(f"mem:{r['id']}")
    return refs


async def test_a6_package_preview_and_refill(face: Any) -> None:
    await _fill(face, "pk")
    query = "printer jams third floor glossy paper"
    recalled = await face.call("recall", {"agent_id": "pk", "query": query, "limit": 10})
    best_first = [m["ref"] for m in reversed(recalled["messages"])]
    for budget in (20, 60, 400):
        body = await face.call("context_package", {"agent_id": "pk", "query": query, "maxContextTokens": budget})
        check_budget(body, budget)
        ids = [a["id"] for a in body["anchors"]]
        assert ids and ids == best_first[: len(ids)]  # built on recall, best first
    default = await face.call("context_package", {"agent_id": "pk", "query": query})
    assert default["tokenBudget"]["maxContextTokens"] == 2000 and default["tokenizer"]

    target = best_first[1]
    refill = await face.call("context_package", {"agent_id": "pk", "anchorId": target})
    content = (await face.call("get_contents", {"agent_id": "pk", "refs": [target]}))["items"][0]["content"]
    assert refill["anchorId"] == target and [a["id"] for a in refill["anchors"]] == [target]
    assert refill["summary"] == [content] and refill["truncated"] is False
    check_budget(refill, 2000)


async def test_a6_bad_calls_are_refused(face: Any) -> None:
    ref = (await face.call("store", {"agent_id": "pkb", "content": "one memory"}))["id"]
    cases = [
        ({"agent_id": "pkb"}, "query"),
        ({"agent_id": "pkb", "query": "  "}, "query is empty"),
        ({"agent_id": "pkb", "query": "one", "anchorId": f"mem:{ref}"}, "not both"),
        ({"agent_id": "pkb", "anchorId": "mem:123456"}, "not found"),
        ({"agent_id": "other", "anchorId": f"mem:{ref}"}, "not found"),
        ({"agent_id": "pkb", "anchorId": "file:x"}, "not a ref"),
        ({"agent_id": "pkb", "query": "one", "maxContextTokens": 3}, "maxContextTokens"),
    ]
    for args, words in cases:
        r = await face.call("context_package", args)
        assert r["ok"] is False and words in r["error"], (args, r)


async def test_package_route(http_server: ServerThread) -> None:
    async with httpx.AsyncClient(base_url=http_server.url) as client:
        await client.post("/v1/tools/store", json={"agent_id": "rt", "content": "the vpn certificate expires soon"})
        args = {"agent_id": "rt", "query": "vpn certificate", "maxContextTokens": 64}
        via_route = await client.post("/context/package", json=args)
        via_tool = await client.post("/v1/tools/context_package", json=args)
        assert via_route.status_code == 200 and via_route.json() == via_tool.json()
        check_budget(via_route.json(), 64)
        bad = await client.post("/context/package", json={"agent_id": "rt", "query": " "})
        assert bad.status_code == 400
        missing = await client.post("/context/package", json={"agent_id": "rt", "anchorId": "mem:424242"})
        assert missing.status_code == 404
