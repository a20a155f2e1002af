"""``list_agents`` (memstream's own): the agents with their counts and last activity, through both
faces in both modes; as of an earlier offset; in ACL mode, only the agents the caller may read."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memstream.api.services.settings import load_settings
from tests.support.acl import ACL, TOKENS, TokenHttpFace, TokenMcpFace, write_acl
from tests.support.servers import ServerThread


def _by_id(listing: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["agent_id"]: a for a in listing["agents"]}


async def test_list_agents_counts_and_last_activity(face: Any) -> None:
    # Agent ids of this run's own: Kafka mode's deployment is shared by every test of the session.
    p = f"la{uuid.uuid4().hex[:6]}-"
    first = await face.call("store", {"agent_id": f"{p}one", "content": "the first fact of agent one"})
    await face.call("store", {"agent_id": f"{p}one", "content": "a second, unrelated fact"})
    gone = await face.call("store", {"agent_id": f"{p}one", "content": "a fact deleted at once"})
    await face.call("delete_memory", {"agent_id": f"{p}one", "memory_id": gone["id"]})
    await face.call("store", {"agent_id": f"{p}two", "content": "agent two remembers this"})
    await face.call("archive_episode", {"agent_id": f"{p}two", "summary": "a session of agent two"})
    edited = await face.call("update_memory", {"agent_id": f"{p}one", "memory_id": first["id"], "content": "edited"})
    assert edited.get("ok") is not False, edited

    listing = await face.call("list_agents", {"prefix": p})
    agents = _by_id(listing)
    assert set(agents) >= {f"{p}one", f"{p}two"}
    one, two = agents[f"{p}one"], agents[f"{p}two"]
    assert (one["memories"], one["episodes"]) == (2, 0)
    assert (two["memories"], two["episodes"]) == (1, 1)
    # The newest event touching a live record of la-one is the edit; its offset is the edit's.
    hist = await face.call("history", {"ref": f"mem:{first['id']}"})
    assert one["last_event"]["type"] == "memory.updated"
    assert one["last_event"]["offset"] == hist["events"][-1]["offset"]
    assert one["last_event"]["at"] == hist["events"][-1]["at"]
    assert two["last_event"]["type"] == "episode.archived"
    ids = [a["agent_id"] for a in listing["agents"]]
    assert ids == sorted(ids) and all(a.startswith(p) for a in ids)
    assert listing["count"] == len(ids)


async def test_list_agents_limit_and_bad_arguments(face: Any) -> None:
    p = f"lb{uuid.uuid4().hex[:6]}-"
    for name in ("a", "b", "c"):
        await face.call("store", {"agent_id": p + name, "content": f"fact of {name}"})
    cut = await face.call("list_agents", {"prefix": p, "limit": 2})
    assert [a["agent_id"] for a in cut["agents"]] == [p + "a", p + "b"] and cut["more"] is True
    assert (await face.call("list_agents", {"limit": 0}))["ok"] is False
    assert (await face.call("list_agents", {"prefix": 7}))["ok"] is False
    assert (await face.call("list_agents", {"agent_id": p + "a"}))["ok"] is False  # unknown field
    assert (await face.call("list_agents", {"as_of": "not a time"}))["ok"] is False


@pytest.mark.embedded_only("as_of as an offset is one partition's in Kafka mode (the router refuses it)")
async def test_list_agents_as_of_an_offset_shows_the_earlier_fleet(face: Any) -> None:
    await face.call("store", {"agent_id": "lt-early", "content": "written before the point"})
    end = (await face.call("check_health", {}))["stats"]["log_end_offset"]
    await face.call("store", {"agent_id": "lt-early", "content": "written after the point"})
    await face.call("store", {"agent_id": "lt-late", "content": "an agent born after the point"})
    then = _by_id(await face.call("list_agents", {"prefix": "lt-", "as_of": end - 1}))
    now = _by_id(await face.call("list_agents", {"prefix": "lt-"}))
    assert set(then) == {"lt-early"} and then["lt-early"]["memories"] == 1
    assert then["lt-early"]["last_event"]["offset"] == end - 1
    assert set(now) == {"lt-early", "lt-late"} and now["lt-early"]["memories"] == 2


# -- ACL mode --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    root: Path = tmp_path_factory.mktemp("agents-acl")
    settings = load_settings(env={}, data_dir=root / "data", sync="NORMAL", acl_file=write_acl(root / "acl.json", ACL))
    with ServerThread(settings) as srv:
        yield srv


@pytest.mark.parametrize("kind", ["http", "mcp"])
async def test_list_agents_names_only_the_agents_the_caller_may_read(acl_server: ServerThread, kind: str) -> None:
    admin = TokenHttpFace(acl_server.url, TOKENS["admin"])
    try:
        for agent in ("alice", "bob", "carol"):
            stored = await admin.call("store", {"agent_id": agent, "content": f"{agent}'s note"})
            assert stored["result"] in ("stored", "skipped"), stored  # skipped: the other face's run stored it
    finally:
        await admin.close()
    # What each client may read, written out by hand (tests/support/acl.py EXPECTED, plus carol).
    expected = {
        "admin": {"alice", "bob", "carol"},
        "r-alice": {"alice"},
        "star-r-no-alice": {"bob", "carol"},
        "star-none-bob-rw": {"bob"},
        "nogrants": set(),
    }
    cls = TokenHttpFace if kind == "http" else TokenMcpFace
    for client, agents in expected.items():
        f = cls(acl_server.url, TOKENS[client])
        try:
            listing = await f.call("list_agents", {})
        finally:
            await f.close()
        assert {a["agent_id"] for a in listing["agents"]} == agents, (client, listing)


# -- association_graph ----------------------------------------------------------------------------


async def test_association_graph_holds_entities_relations_mentions_and_previews(face: Any) -> None:
    agent = f"ag{uuid.uuid4().hex[:6]}"
    first = await face.call(
        "store",
        {
            "agent_id": agent,
            "content": "Dana owns the payments service.",
            "associations": {
                "entities": [{"name": "Dana", "aliases": ["D."]}, {"name": "payments service"}],
                "relations": [{"subject": "Dana", "predicate": "owns", "object": "payments service"}],
            },
        },
    )
    second = await face.call("store", {"agent_id": agent, "content": "The payments service moved to Go."})
    ref1, ref2 = f"mem:{first['id']}", f"mem:{second['id']}"
    declared = await face.call(
        "declare_associations",
        {"agent_id": agent, "associations": {"relations": [{"subject": ref2, "predicate": "updates", "object": ref1}]}},
    )
    assert declared["ok"] is True, declared
    g = await face.call("association_graph", {"agent_id": agent})
    names = {e["name"]: e for e in g["entities"]}
    assert set(names) == {"Dana", "payments service"} and g["count"] == 2
    assert names["Dana"]["aliases"] == ["D."] and names["Dana"]["mentions"] == [ref1]
    ids = {e["id"]: e["name"] for e in g["entities"]}
    def end(node: dict[str, Any]) -> str:
        return ids[node["entity"]] if "entity" in node else str(node["ref"])

    edges = {(end(r["subject"]), r["predicate"], end(r["object"])) for r in g["relations"]}
    assert edges == {("Dana", "owns", "payments service"), (ref2, "updates", ref1)}
    assert g["records"] == {ref1: "Dana owns the payments service.", ref2: "The payments service moved to Go."}
    # A deleted record leaves the drawing with its relations; limit cuts entities, oldest first.
    await face.call("delete_memory", {"agent_id": agent, "memory_id": second["id"]})
    g = await face.call("association_graph", {"agent_id": agent, "limit": 1})
    assert [e["name"] for e in g["entities"]] == ["Dana"] and g["entities_omitted"] == 1
    assert g["relations"] == [] and set(g["records"]) == {ref1}
    assert (await face.call("association_graph", {"agent_id": "nobody-" + agent}))["entities"] == []
    assert (await face.call("association_graph", {"agent_id": ""}))["ok"] is False
