"""Associations and reconstruct contracts A1–A5 and A8 (CONTRACTS.md), through the HTTP face
and the MCP face (the ``face`` fixture runs each test once per face against a real server).

The test embedder hashes words, so "related" means shared vocabulary."""

from __future__ import annotations

from typing import Any

import pytest

from memstream.api.tools.associations import json_tokens

pytestmark = pytest.mark.asyncio

T = "2026-01-15T10:{:02d}:00+00:00"


async def store(face: Any, agent: str, content: str, minute: int, **extra: Any) -> dict[str, Any]:
    r = await face.call("store", {"agent_id": agent, "content": content, "timestamp": T.format(minute), **extra})
    assert r["ok"] is True, r
    return r


async def declare(face: Any, agent: str, **args: Any) -> dict[str, Any]:
    r = await face.call("declare_associations", {"agent_id": agent, **args})
    assert r["ok"] is True and r["result"] == "declared", r
    return r


# -- A1 ------------------------------------------------------------------------------------------


async def test_a1_store_rider_declares_and_anchors(face: Any) -> None:
    r = await store(
        face,
        "alice",
        "Bob owns the billing service.",
        5,
        associations={
            "entities": [{"name": "Bob", "aliases": ["Robert"]}, {"name": "billing service"}],
            "relations": [{"subject": "Bob", "predicate": "Owns", "object": "billing service"}],
        },
    )
    assert r["result"] == "stored"
    a = r["associations"]
    assert [(e["name"], e["created"]) for e in a["entities"]] == [("Bob", True), ("billing service", True)]
    assert a["mentions"] == 2 and len(a["relations"]) == 1 and a["dropped"] == []
    t = await face.call("traverse", {"agent_id": "alice", "entity": "ROBERT"})  # alias, case-folded
    assert [(e["name"], e["hops"]) for e in t["entities"]] == [("Bob", 0), ("billing service", 1)]
    assert t["entities"][0]["mentions"] == [f"mem:{r['id']}"] and t["entities"][0]["aliases"] == ["Robert"]
    assert t["relations"][0]["predicate"] == "owns"  # predicates are stored normalised
    assert t["relations"][0]["anchor_ref"] == f"mem:{r['id']}"


async def test_a1_malformed_items_are_dropped_and_never_lose_the_memory(face: Any) -> None:
    r = await store(
        face,
        "alice",
        "Carol reviews the deploy scripts.",
        1,
        associations={
            "entities": [{"name": ""}, {"name": "Carol", "aliases": ["C", 7]}, "nope"],
            "relations": [
                {"subject": "Carol", "predicate": "", "object": "Bob"},
                {"subject": "mem:999999", "predicate": "supports", "object": "Carol"},
                {"subject": "Carol", "predicate": "knows"},
            ],
        },
    )
    assert r["result"] == "stored"
    dropped = {d["item"]: d["reason"] for d in r["associations"]["dropped"]}
    assert dropped == {
        "entities[0]": "name must be a nonempty string",
        "entities[1].aliases[1]": "must be a nonempty string",
        "entities[2]": "name must be a nonempty string",
        "relations[0]": "predicate must be a nonempty string",
        "relations[1].subject": "mem:999999 is not a record of this agent",
        "relations[2].object": "endpoint must be an entity name or a record ref",
    }
    got = await face.call("get_contents", {"agent_id": "alice", "refs": [f"mem:{r['id']}"]})
    assert got["items"][0]["content"] == "Carol reviews the deploy scripts."
    # An alias already naming another entity in scope is refused, item by item.
    d = await declare(face, "alice", associations={"entities": [{"name": "Dave", "aliases": ["carol"]}]})
    assert d["dropped"] == [{"item": "entities[0].aliases[0]", "reason": "already names another entity in this scope"}]
    # Another agent's record is not a record of this agent.
    d = await declare(face, "bob", anchor_ref=f"mem:{r['id']}", associations={"entities": [{"name": "X"}]})
    assert d["dropped"] == [{"item": "anchor_ref", "reason": f"mem:{r['id']} is not a record of this agent"}]
    assert d["mentions"] == 0


async def test_a1_retract_is_the_only_removal(face: Any) -> None:
    m = await store(face, "alice", "Carol reports to Bob since March.", 2)
    d = await declare(
        face,
        "alice",
        anchor_ref=f"mem:{m['id']}",
        associations={
            "entities": [{"name": "Carol"}, {"name": "Bob"}],
            "relations": [{"subject": "Carol", "predicate": "reports to", "object": "Bob"}],
        },
    )
    again = await declare(
        face, "alice", associations={"relations": [{"subject": "carol", "predicate": "REPORTS TO", "object": "bob"}]}
    )
    assert again["relations"] != d["relations"]  # another anchor ('' vs the memory): another relation
    carol = d["entities"][0]["id"]
    before = await face.call("traverse", {"agent_id": "alice", "entity": "Carol"})
    assert len(before["relations"]) == 2
    r = await declare(
        face,
        "alice",
        retract={
            "relations": [d["relations"][0], 424242, "x"],
            "mentions": [{"entity": carol, "ref": f"mem:{m['id']}"}],
        },
    )
    assert r["retracted"] == {"relations": 1, "mentions": 1}
    assert r["dropped"] == [{"item": "retract.relations[2]", "reason": "must be an integer id"}]
    after = await face.call("traverse", {"agent_id": "alice", "entity": "Carol"})
    assert [x["id"] for x in after["relations"]] == again["relations"]
    assert "mentions" not in after["entities"][0]
    # memstream: retracting an entity takes its aliases, mentions and relations with it.
    r = await declare(face, "alice", retract={"entities": [carol]})
    assert r["retracted"]["entities"] == 1
    gone = await face.call("traverse", {"agent_id": "alice", "entity": "Carol"})
    assert gone["reason"] == "no_such_entity"
    # Nothing declared: the empty report, and nothing appended.
    assert await declare(face, "alice") == {
        "ok": True,
        "result": "declared",
        "entities": [],
        "mentions": 0,
        "relations": [],
        "dropped": [],
    }


# -- A8 ------------------------------------------------------------------------------------------


async def test_a8_traverse_bfs_by_hops_both_directions_bounded(face: Any) -> None:
    # a chain A - B - C - D, declared with mixed directions, plus a spoke A - E
    await declare(
        face,
        "alice",
        associations={
            "relations": [
                {"subject": "alpha", "predicate": "feeds", "object": "beta"},
                {"subject": "gamma", "predicate": "reads", "object": "beta"},
                {"subject": "gamma", "predicate": "writes", "object": "delta"},
                {"subject": "epsilon", "predicate": "watches", "object": "alpha"},
            ]
        },
    )
    t = await face.call("traverse", {"agent_id": "alice", "entity": "Beta", "max_hops": 5})
    hops = {e["name"]: e["hops"] for e in t["entities"]}
    assert hops == {"beta": 0, "alpha": 1, "gamma": 1, "delta": 2, "epsilon": 2}
    assert [e["hops"] for e in t["entities"]] == sorted(e["hops"] for e in t["entities"])
    assert "bounds" not in t
    t1 = await face.call("traverse", {"agent_id": "alice", "entity": "beta", "max_hops": 1})
    assert {e["name"] for e in t1["entities"]} == {"beta", "alpha", "gamma"}
    assert t1["bounds"] == {"omitted": ["max_hops"]}
    t2 = await face.call("traverse", {"agent_id": "alice", "entity": "beta", "max_hops": 5, "limit": 2})
    assert len(t2["entities"]) == 2 and t2["entities_omitted"] == 3 and "limit" in t2["bounds"]["omitted"]
    assert all(r["subject"] in {e["id"] for e in t2["entities"]} for r in t2["relations"])
    bad = await face.call("traverse", {"agent_id": "alice", "entity": "beta", "max_hops": 6})
    assert bad["ok"] is False
    # another agent's graph is not read
    other = await face.call("traverse", {"agent_id": "bob", "entity": "beta"})
    assert other["reason"] == "no_such_entity"


# -- A2, A3 --------------------------------------------------------------------------------------

STORE = [
    "Bob owns the billing service and its invoices.",
    "The billing service runs on Postgres 16.",
    "Invoices for the billing service are sent monthly.",
    "The staging deploy key rotates every Tuesday.",
    "Green tea is preferred over coffee by the platform team.",
    "The printer on the third floor jams with glossy paper.",
]
QUERIES = [
    "billing service invoices",
    "who is Robert",
    "staging deploy key",
    "Robert billing invoices",
    "printer paper",
    "what is the of it",
]


async def answers(face: Any, agent: str) -> list[Any]:
    out = []
    for q in QUERIES:
        out.append(await face.call("recall", {"agent_id": agent, "query": q}))
        out.append(await face.call("reconstruct", {"agent_id": agent, "query": q}))
    return out


async def test_a2_declarations_change_no_recall_and_nothing_declared_changes_nothing(face: Any) -> None:
    ids = [(await store(face, "alice", text, i))["id"] for i, text in enumerate(STORE)]
    before = await answers(face, "alice")
    assert any(a.get("items") for a in before[1::2])  # the store answers something
    d = await declare(
        face,
        "alice",
        anchor_ref=f"mem:{ids[3]}",
        associations={
            "entities": [{"name": "deploy key", "aliases": ["staging key"]}],
            "relations": [{"subject": "deploy key", "predicate": "rotated by", "object": "ops"}],
        },
    )
    after = await answers(face, "alice")
    for q, b, a in zip(QUERIES, before[0::2], after[0::2], strict=True):
        assert b == a, q  # §11: what an agent declares changes no recall response
    await declare(face, "alice", retract={"entities": [e["id"] for e in d["entities"]]})
    assert await answers(face, "alice") == before


async def test_a3_an_alias_adds_a_vote_never_a_pass(face: Any) -> None:
    for i, text in enumerate(STORE):
        await store(face, "alice", text, i)
    bob = (await face.call("recall", {"agent_id": "alice", "query": "Bob"}))["messages"]
    assert [m["content"] for m in bob] == [STORE[0]]  # the lexical search can find it by name
    plain = await face.call("reconstruct", {"agent_id": "alice", "query": "who is Robert"})
    assert plain["items"] == []
    lift = {"agent_id": "alice", "query": "Robert billing service", "trace": True}
    base = await face.call("reconstruct", lift)
    await declare(face, "alice", associations={"entities": [{"name": "Bob", "aliases": ["Robert"]}]})
    # Found only through the alias: judged against the question as written, it stays out.
    aliased = await face.call("reconstruct", {"agent_id": "alice", "query": "who is Robert", "trace": True})
    assert aliased["items"] == [] and aliased["shortfall_reason"] == plain["shortfall_reason"]
    assert aliased["trace"]["cues"] == {"entities": ["Bob"], "terms": ["Bob"]}
    # Where the other search voted, the alias may reorder, never admit: the same pass set.
    lifted = await face.call("reconstruct", lift)
    assert len(base["trace"]["candidate_refs"]) >= 2
    assert sorted(base["trace"]["candidate_refs"]) == sorted(lifted["trace"]["candidate_refs"])
    assert lifted["trace"]["cues"] == {"entities": ["Bob"], "terms": ["Bob"]}


# -- A4 ------------------------------------------------------------------------------------------


async def test_a4_record_relation_bundles_and_role_words_label(face: Any) -> None:
    a = await store(face, "alice", "The billing service runs on Postgres 14.", 1)
    b = await store(face, "alice", "Correction: the billing service runs on Postgres 16 now.", 2)
    before = await face.call("reconstruct", {"agent_id": "alice", "query": "billing service Postgres"})
    assert len(before["items"]) == 2
    await declare(
        face,
        "alice",
        associations={
            "relations": [{"subject": f"mem:{b['id']}", "predicate": "corrects", "object": f"mem:{a['id']}"}]
        },
    )
    r = await face.call("reconstruct", {"agent_id": "alice", "query": "billing service Postgres"})
    assert len(r["items"]) == 1
    item = r["items"][0]
    claims = {c["ref"]: c for c in item["claims"]}
    assert set(claims) == {f"mem:{a['id']}", f"mem:{b['id']}"}
    assert item["independence_reason"] == "cluster:relation"
    assert claims[f"mem:{a['id']}"]["roles"] == [{"ref": f"mem:{b['id']}", "role": "corrects"}]
    assert {c.get("why") for c in item["claims"]} == {"relation:corrects"}
    assert [c["as_of"] for c in item["claims"]] == [T.format(2), T.format(1)]  # newest first
    assert item["excerpts"][0]["ref"] in claims


async def test_a4_entity_relations_add_evidence_with_hops_never_items(face: Any) -> None:
    seed = await store(face, "alice", "Ticket 4411: checkout latency spiked after the release.", 1)
    one = await store(face, "alice", "Gateway nodes were resized on Monday.", 2)
    two = await store(face, "alice", "The region eu-west had a network incident.", 3)
    await declare(face, "alice", anchor_ref=f"mem:{seed['id']}", associations={"entities": [{"name": "checkout"}]})
    await declare(face, "alice", anchor_ref=f"mem:{one['id']}", associations={"entities": [{"name": "gateway"}]})
    await declare(face, "alice", anchor_ref=f"mem:{two['id']}", associations={"entities": [{"name": "eu-west"}]})
    await declare(
        face,
        "alice",
        associations={
            "relations": [
                {"subject": "checkout", "predicate": "runs behind", "object": "gateway"},
                {"subject": "eu-west", "predicate": "hosts", "object": "gateway"},
            ]
        },
    )
    q = {"agent_id": "alice", "query": "checkout latency ticket 4411"}
    r = await face.call("reconstruct", q)
    assert len(r["items"]) == 1 and r["items"][0]["head_ref"] == f"mem:{seed['id']}"
    walked = [(c["ref"], c.get("why"), c.get("hops")) for c in r["items"][0]["claims"] if "hops" in c]
    assert sorted(walked, key=lambda w: w[2]) == [
        (f"mem:{one['id']}", "relation:runs behind", 1),
        (f"mem:{two['id']}", "relation:hosts", 2),
    ]
    assert "omitted" not in r["bounds"]
    one_hop = await face.call("reconstruct", {**q, "max_hops": 1})
    assert [c["ref"] for c in one_hop["items"][0]["claims"] if "hops" in c] == [f"mem:{one['id']}"]
    assert one_hop["bounds"]["omitted"] == ["max_hops"]
    none = await face.call("reconstruct", {**q, "max_hops": 0})
    assert [c["ref"] for c in none["items"][0]["claims"]] == [f"mem:{seed['id']}"]


# -- A5 ------------------------------------------------------------------------------------------


async def test_a5_shape_shortfalls_and_budgets(face: Any) -> None:
    for i, text in enumerate(STORE):
        await store(face, "alice", text, i)
    r = await face.call("reconstruct", {"agent_id": "alice", "query": "billing service invoices"})
    assert set(r) >= {"items", "effective_count", "returned_count", "bounds"}
    assert r["bounds"]["top_k"] == 20 and r["bounds"]["max_hops"] == 2
    for item in r["items"]:
        assert set(item) >= {"content", "head_ref", "claims"}
        for claim in item["claims"]:
            assert set(claim) <= {"ref", "as_of", "why", "hops", "roles"}
    assert r["returned_count"] == len(r["items"]) >= 2
    assert r["shortfall_reason"] == "exhausted_candidates"
    # Only function words in common with the store: never unrelated items.
    for q in ("what is the", "what is it that they would have been", "who is the one"):
        nothing = await face.call("reconstruct", {"agent_id": "alice", "query": q})
        assert nothing["items"] == [], q
        assert nothing["shortfall_reason"] in ("no_relevant_evidence", "below_quality_threshold"), q
    # A character budget (raised to one head quote, 800) that holds one long head: the window is
    # cut, and the response says so.
    for i in range(3):
        await store(face, "carol", f"billing invoices batch {i}. " * 25, i)
    whole = await face.call("reconstruct", {"agent_id": "carol", "query": "billing invoices batch"})
    assert whole["returned_count"] == 3 and "used_budget" not in whole
    cut = await face.call("reconstruct", {"agent_id": "carol", "query": "billing invoices batch", "budget": 1})
    assert cut["returned_count"] == 1 and cut["shortfall_reason"] == "budget_exhausted"
    assert cut["used_budget"] == len(cut["items"][0]["content"]) and cut["effective_budget"] == 800
    assert cut["items"][0] == {k: v for k, v in whole["items"][0].items() if k not in ("excerpts",)}
    # A token cap: the returned JSON, counted by the shipped WordPiece tokenizer.
    lite = await face.call("reconstruct", {"agent_id": "alice", "query": "billing service invoices", "mode": "lite"})
    assert lite["cap"] == 3000 and lite["mode"] == "lite"
    assert lite["used_tokens"] == json_tokens({k: v for k, v in lite.items() if k != "used_tokens"})
    assert lite["used_tokens"] <= 3000
    refused = await face.call("reconstruct", {"agent_id": "alice", "query": "tea", "mode": "pro", "lite": True})
    assert refused["ok"] is False and refused["items"] == []
    zero = await face.call("reconstruct", {"agent_id": "alice", "query": "tea", "count": 0})
    assert zero["items"] == [] and zero["shortfall_reason"] == "count_zero"
