"""Know/miss packets (CONTRACTS A7, seed 002): the model validators that keep the two miss
classes apart, the pure judgement, and the packet through both faces and POST /context/packet."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from memstream.api.services.settings import Settings
from tests.support.faces import HttpFace, McpFace
from tests.support.servers import ServerThread

FILLER = [
    "the cafeteria serves soup on tuesdays",
    "parking permits renew every january",
    "the office plants need water twice a week",
    "badge readers on floor two were replaced",
]


# -- through the faces --------------------------------------------------------------------------


async def _store(face: Any, agent: str, content: str, **extra: Any) -> dict[str, Any]:
    r = await face.call("store", {"agent_id": agent, "content": content, **extra})
    assert r["result"] == "stored", r
    return r


async def test_a7_empty_query_is_a_400_and_a_clear_error(face: Any, http_server: ServerThread) -> None:
    for q in ("", "   ", "\n\t"):
        r = await face.call("context_packet", {"agent_id": "e", "query": q})
        assert r["ok"] is False and "query is empty" in r["error"], r
    async with httpx.AsyncClient(base_url=http_server.url) as client:
        for path in ("/context/packet", "/v1/tools/context_packet"):
            resp = await client.post(path, json={"agent_id": "e", "query": "  "})
            assert resp.status_code == 400 and "query is empty" in resp.json()["error"]
            resp = await client.post(path, json={"agent_id": "e"})
            assert resp.status_code == 400


async def test_a7_know_and_escalate_class_misses(face: Any) -> None:
    for text in FILLER:
        await _store(face, "k", text)
    good = await _store(face, "k", "the staging deploy key rotates every ninety days")
    body = await face.call("context_packet", {"agent_id": "k", "query": "staging deploy key rotates"})
    assert "miss" not in body and body["know"]["found"] is True and body["know"]["top_ref"] == f"mem:{good['id']}"
    assert body["verified"][0]["ref"] == f"mem:{good['id']}" and body["verified"][0]["status"] == "verified"
    assert body["delivery"]["pool_size"] == 5

    # Shares one word with a row, but the gate blocks it: abstain.
    body = await face.call("context_packet", {"agent_id": "k", "query": "zebra quantum chromodynamics galaxy soup"})
    assert "know" not in body and body["miss"]["reason"] == "abstain", body
    # Shares nothing: no_match. An agent with no memories: no_match.
    body = await face.call("context_packet", {"agent_id": "k", "query": "zebra quantum chromodynamics galaxy"})
    assert body["miss"]["reason"] == "no_match"
    body = await face.call("context_packet", {"agent_id": "nobody", "query": "staging deploy key"})
    assert body["miss"]["reason"] == "no_match" and body["delivery"]["pool_size"] == 0
    miss = body["miss"]
    assert miss["do_not_answer_from_memory"] is True and miss["escalate_to"] and miss["refresh_targets"] == []

    # Too little memory in scope to trust the only match: sparse.
    await _store(face, "sp", "the staging deploy key rotates every ninety days")
    body = await face.call("context_packet", {"agent_id": "sp", "query": "staging deploy key rotates"})
    assert body["miss"]["reason"] == "sparse" and body["miss"]["escalate_to"]
    assert [i["ref"] for i in body["verified"]] == body["delivery"]["delivered_refs"]


async def test_a7_superseded_by_a_newer_version_under_the_same_msg_id(face: Any) -> None:
    agent = "sv"
    for text in FILLER:
        await _store(face, agent, text)
    old = await _store(face, agent, "phoenix launch date is march third", id="launch", project_id="P")
    new = await _store(face, agent, "phoenix launch date moved to april tenth", id="launch")  # global pool
    old_ref, new_ref = f"mem:{old['id']}", f"mem:{new['id']}"
    q = {"agent_id": agent, "query": "phoenix launch date march third", "project_id": "P"}
    body = await face.call("context_packet", q)
    assert body["delivery"]["delivered_refs"][0] == old_ref
    assert body["miss"] == {
        "miss": True,
        "reason": "superseded",
        "top_score": body["miss"]["top_score"],
        "escalate_to": [],
        "refresh_targets": [new_ref],
        "do_not_answer_from_memory": True,
    }
    [item] = [i for i in body["stale_risk"] if i["ref"] == old_ref]
    assert item["status"] == "needs_refresh" and item["superseded_by"] == [new_ref] and item["msg_id"] == "launch"
    assert {"target_kind": "memory", "source_id": new_ref}.items() <= body["refresh_targets"][0].items()

    # update_memory writes a newer version: now the project copy is current, the global one superseded.
    edit = {"agent_id": agent, "memory_id": old["id"], "content": "phoenix launch date is march third, confirmed"}
    assert (await face.call("update_memory", edit))["ok"] is True
    body = await face.call("context_packet", q)
    assert body["know"]["top_ref"] == old_ref
    assert [i["version"] for i in body["verified"] if i["ref"] == old_ref] == [2]
    body = await face.call("context_packet", {**q, "query": "phoenix launch date moved april tenth"})
    assert body["delivery"]["delivered_refs"][0] == new_ref and body["miss"]["refresh_targets"] == [old_ref]
    # A scope that cannot read the newer version is not told about it (R10): project Q sees no P row.
    body = await face.call("context_packet", {**q, "project_id": "Q", "query": "phoenix launch date moved april tenth"})
    assert body["know"]["top_ref"] == new_ref


async def test_a7_superseded_by_a_declared_supersedes_relation(face: Any) -> None:
    agent = "sr"
    for text in FILLER:
        await _store(face, agent, text)
    old = await _store(face, agent, "the on-call rota is kept in the blue binder")
    new = await _store(face, agent, "the on-call rota moved to the team wiki")
    old_ref, new_ref = f"mem:{old['id']}", f"mem:{new['id']}"
    q = {"agent_id": agent, "query": "on-call rota blue binder"}
    before = await face.call("context_packet", q)
    assert before["delivery"]["delivered_refs"][0] == old_ref and "know" in before, before
    relation = {"subject": new_ref, "predicate": "supersedes", "object": old_ref}
    declared = await face.call("declare_associations", {"agent_id": agent, "associations": {"relations": [relation]}})
    assert declared.get("ok") is not False, declared
    body = await face.call("context_packet", q)
    assert body["miss"]["reason"] == "superseded" and body["miss"]["refresh_targets"] == [new_ref], body
    assert body["miss"]["do_not_answer_from_memory"] is True
    # retracting the relation makes the old memory current again
    [rid] = declared["relations"]
    retracted = await face.call("declare_associations", {"agent_id": agent, "retract": {"relations": [rid]}})
    assert retracted["retracted"]["relations"] == 1
    assert "know" in await face.call("context_packet", q)


async def test_a7_stale_until_verified(settings: Settings) -> None:
    with ServerThread(settings.model_copy(update={"stale_after_s": 1.0})) as srv:
        for face in (HttpFace(srv.url), McpFace(srv.url)):
            agent = f"st-{face.name}"
            for text in FILLER:
                await _store(face, agent, text)
            target = await _store(face, agent, "the vpn certificate expires in october")
            q = {"agent_id": agent, "query": "vpn certificate expires october"}
            async with asyncio.timeout(30):  # until the 1 s staleness window has passed
                while "know" in (body := await face.call("context_packet", q)):
                    await asyncio.sleep(0.1)
            ref = f"mem:{target['id']}"
            assert body["miss"]["reason"] == "stale" and body["miss"]["refresh_targets"][0] == ref, body
            assert body["stale_risk"][0]["status"] == "stale_risk" and body["verified"] == []

            r = await face.call("verify_memory", {"agent_id": agent, "memory_id": target["id"], "note": "checked"})
            assert r == {"ok": True, "verified_id": target["id"]}
            body = await face.call("context_packet", q)
            assert body["know"]["top_ref"] == ref and body["verified"][0]["ref"] == ref
            hist = await face.call("history", {"ref": ref})
            assert hist["events"][-1]["type"] == "memory.verified" and hist["events"][-1]["change"]["note"] == "checked"
            await face.close()


async def test_verify_memory_refuses_what_is_not_there(face: Any) -> None:
    mine = await _store(face, "vm", "a locked memory that can still be verified", lock=True)
    assert (await face.call("verify_memory", {"agent_id": "vm", "memory_id": mine["id"]}))["ok"] is True
    for args in ({"memory_id": 987654}, {"agent_id": "other", "memory_id": mine["id"]}, {"memory_id": "x"}):
        r = await face.call("verify_memory", args)
        assert r["ok"] is False and r["error"], (args, r)


async def test_packet_route_answers_as_the_tool(http_server: ServerThread) -> None:
    face = HttpFace(http_server.url)
    for text in FILLER:
        await _store(face, "rt", text)
    args = {"agent_id": "rt", "query": "parking permits january", "max_items": 99}
    via_tool = await face.call("context_packet", args)
    async with httpx.AsyncClient(base_url=http_server.url) as client:
        resp = await client.post("/context/packet", json=args)
        spec = (await client.get("/openapi.json")).json()
    assert resp.status_code == 200 and resp.json() == via_tool
    assert via_tool["delivery"]["delivered_count"] <= 32  # max_items is clamped to [1, 32]
    assert "/context/packet" in spec["paths"] and "/context/package" in spec["paths"]
    await face.close()
