"""Standings contracts S1–S3 (CONTRACTS.md, seed 003), through the HTTP face and the MCP face,
plus the standings and versions read models' rebuild-equals-live (H2)."""

from __future__ import annotations

from typing import Any

import pytest

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.rebuild import rebuild_all
from memstream.api.services.settings import Settings
from memstream.projections.runner import replay
from memstream.projections.standings import StandingsProjection
from tests.support.calls import call
from tests.support.embedders import HashEmbedder
from tests.support.faces import HttpFace, McpFace
from tests.support.servers import ServerThread, log_end


async def _store(face: Any, agent: str, content: str, **extra: Any) -> str:
    r = await face.call("store", {"agent_id": agent, "content": content, **extra})
    assert r["result"] == "stored", r
    return f"mem:{r['id']}"


# -- S1 -----------------------------------------------------------------------------------------


async def test_s1_last_declaration_is_current_and_earlier_ones_stay_in_history(face: Any) -> None:
    ref = await _store(face, "s1", "the build id is 7f3a91 per the nightly log")
    first = await face.call("declare_standing", {"agent_id": "s1", "ref": ref, "standing": "noise", "note": "flaky"})
    assert first == {"ok": True, "ref": ref, "standing": "noise", "note": "flaky"}
    second = await face.call("declare_standing", {"ref": ref, "standing": "fact"})  # owner found from the ref
    assert second == {"ok": True, "ref": ref, "standing": "fact"}
    body = await face.call("recall", {"agent_id": "s1", "query": "build id nightly log"})
    [row] = [m for m in body["messages"] if m.get("ref") == ref]
    assert row["standing"] == "fact"
    hist = await face.call("history", {"ref": ref})
    declared = [e["change"] for e in hist["events"] if e["type"] == "standing.declared"]
    assert [(d["standing"], d["note"]) for d in declared] == [("noise", "flaky"), ("fact", None)]


@pytest.mark.embedded_only("reads the embedded server's log end")
async def test_s1_bad_declarations_change_nothing(face: Any, http_server: ServerThread) -> None:
    ref = await _store(face, "s1b", "a memory to judge")
    other = await _store(face, "s1b-other", "someone else's memory")
    before = log_end(http_server)[0]
    bad = [
        ({"agent_id": "s1b", "ref": ref, "standing": "maybe"}, "standing"),
        ({"agent_id": "s1b", "ref": "memo:1", "standing": "fact"}, "not a ref"),
        ({"agent_id": "s1b", "ref": "mem:999999", "standing": "fact"}, "not found"),
        ({"agent_id": "s1b", "ref": other, "standing": "noise"}, "not found"),
        ({"agent_id": "s1b", "standing": "fact"}, "ref"),
        ({"agent_id": "s1b", "ref": ref, "standing": "fact", "note": "x" * 4001}, "note"),
    ]
    for args, words in bad:
        r = await face.call("declare_standing", args)
        assert r["ok"] is False and words in r["error"], (args, r)
    assert log_end(http_server)[0] == before
    body = await face.call("recall", {"agent_id": "s1b-other", "query": "someone else's memory"})
    assert all("standing" not in m for m in body["messages"])


async def test_s1_deleted_memories_drop_out_of_the_read_model(settings: Settings) -> None:
    engine = EmbeddedEngine(settings, embedder=HashEmbedder())
    await engine.start()
    try:
        a = (await call(engine, "store", agent_id="d", content="alpha value 1111"))["id"]
        b = (await call(engine, "store", agent_id="d", content="beta value 2222"))["id"]
        ep = (await call(engine, "archive_episode", agent_id="d", summary="an episode about 3333"))["episode_id"]
        for ref in (f"mem:{a}", f"mem:{b}", f"ep:{ep}"):
            assert (await call(engine, "declare_standing", agent_id="d", ref=ref, standing="open"))["ok"]
        await call(engine, "delete_memory", agent_id="d", memory_id=a)
        await call(engine, "delete_episode", agent_id="d", episode_id=ep)
        current = await engine.read(lambda: dict(engine.standings.current))
        assert set(current) == {f"mem:{b}"}
        await call(engine, "delete_agent_data", agent_id="d")
        assert await engine.read(lambda: dict(engine.standings.current)) == {}
    finally:
        await engine.close()


# -- S3 -----------------------------------------------------------------------------------------


async def test_s3_recall_rows_show_standing_only_when_declared(face: Any) -> None:
    refs = [await _store(face, "s3", f"printer on floor {i} jams with glossy paper item{i}") for i in range(4)]
    query = {"agent_id": "s3", "query": "printer floor jams glossy paper", "limit": 10}
    ctx = {**query, "external_context": [{"role": "user", "content": "hi", "timestamp": "2020-01-01T00:00:00Z"}]}
    before = await face.call("recall", query)
    before_ctx = await face.call("recall_with_context", ctx)
    assert before["messages"] and all("standing" not in m for m in before["messages"])

    await face.call("declare_standing", {"agent_id": "s3", "ref": refs[1], "standing": "ruled-out"})
    after = await face.call("recall", query)
    after_ctx = await face.call("recall_with_context", ctx)
    marked = [m for m in after["messages"] if "standing" in m]
    assert [(m["ref"], m["standing"]) for m in marked] == [(refs[1], "ruled-out")]
    # Everything else is exactly what it was: dropping the one key gives the old answer back.
    for body in (after, after_ctx):
        for m in body["messages"]:
            m.pop("standing", None)
    assert after == before and after_ctx == before_ctx


async def test_s3_reconstruct_claims_show_standing_only_when_declared(face: Any) -> None:
    refs = [await _store(face, "s3r", f"the billing export job failed on night {i} with a timeout") for i in range(3)]
    query = {"agent_id": "s3r", "query": "billing export job failed timeout"}
    before = await face.call("reconstruct", query)
    claims = [c for item in before["items"] for c in item.get("claims", [])]
    assert claims and all("standing" not in c for c in claims)

    await face.call("declare_standing", {"agent_id": "s3r", "ref": refs[0], "standing": "noise"})
    after = await face.call("reconstruct", query)
    marked = [(c["ref"], c["standing"]) for item in after["items"] for c in item.get("claims", []) if "standing" in c]
    assert marked == [(refs[0], "noise")]
    for item in after["items"]:
        for c in item.get("claims", []):
            c.pop("standing", None)
    assert after == before


# -- S2 -----------------------------------------------------------------------------------------


async def test_s2_contingent_only_when_every_carrier_is_set_aside(face: Any) -> None:
    agent = "s2"
    a = await _store(face, agent, "the relay address is 0xEF0101 according to the probe")
    b = await _store(face, agent, "probe two also saw ef0101 on the bus")
    c = await _store(face, agent, "the timeout was 1423 ms, and the port 8080")
    d = await _store(face, agent, "port 8080 confirmed by the operator")
    await face.call("declare_standing", {"agent_id": agent, "ref": a, "standing": "noise"})
    await face.call("declare_standing", {"agent_id": agent, "ref": b, "standing": "open"})
    await face.call("declare_standing", {"agent_id": agent, "ref": c, "standing": "ruled-out"})

    values: list[Any] = [
        {"value": "0xEF0101", "forms": ["0xef0101", "ef0101"]},  # both carriers set aside
        "ef0101",  # the same value in another spelling: one row per value
        "8080",  # one undeclared carrier (d): it stands
        "42",  # carried by nothing ("1423" does not carry it)
        "1423",  # carried only by c (ruled-out)
    ]
    r = await face.call("check_contingent", {"agent_id": agent, "values": values})
    rows = {row["value"]: row for row in r["contingent"]}
    assert set(rows) == {"0xEF0101", "1423"}, r
    assert rows["0xEF0101"]["carriers"] == [{"ref": a, "standing": "noise"}, {"ref": b, "standing": "open"}]
    assert rows["1423"]["carriers"] == [{"ref": c, "standing": "ruled-out"}]
    assert r["unjudged"] == [] and r["corpus"] == {"size": 4, "truncated": False}

    # One fact carrier and the value stands; declaring d set aside makes 8080 contingent.
    await face.call("declare_standing", {"agent_id": agent, "ref": b, "standing": "fact"})
    await face.call("declare_standing", {"agent_id": agent, "ref": d, "standing": "noise"})
    r = await face.call("check_contingent", {"agent_id": agent, "values": values})
    assert {row["value"] for row in r["contingent"]} == {"8080", "1423"}

    # refs: only this turn's results carry: with d alone, 8080 rests on d (noise) only.
    r = await face.call("check_contingent", {"agent_id": agent, "values": ["8080", "ef0101"], "refs": [d, "mem:9x"]})
    assert [row["value"] for row in r["contingent"]] == ["8080"] and r["missing"] == ["mem:9x"]


async def test_s2_truncated_carriers_or_corpus_judge_nothing(settings: Settings) -> None:
    with ServerThread(settings.model_copy(update={"contingent_max_carriers": 2})) as srv:
        face = HttpFace(srv.url)
        refs = [await _store(face, "tr", f"reading {i} says 5150 volts") for i in range(3)]
        for ref in refs:
            await face.call("declare_standing", {"agent_id": "tr", "ref": ref, "standing": "noise"})
        r = await face.call("check_contingent", {"agent_id": "tr", "values": ["5150"]})
        assert r["contingent"] == [] and r["unjudged"] == [{"value": "5150", "reason": "carriers_truncated"}]
        # Under the cap the same question is judged: the rule, not the data, said nothing.
        r = await face.call("check_contingent", {"agent_id": "tr", "values": ["5150"], "refs": refs[:2]})
        assert [row["value"] for row in r["contingent"]] == ["5150"]
        await face.close()
    with ServerThread(settings.model_copy(update={"contingent_max_scan": 2})) as srv:
        face = McpFace(srv.url)
        r = await face.call("check_contingent", {"agent_id": "tr", "values": ["5150"]})
        assert r["contingent"] == [] and r["corpus"]["truncated"] is True
        assert r["unjudged"] == [{"value": "5150", "reason": "corpus_truncated"}]


async def test_s2_bad_input_is_refused(face: Any) -> None:
    for args in (
        {"agent_id": "x", "values": []},
        {"agent_id": "x"},
        {"agent_id": "x", "values": [5]},
        {"agent_id": "x", "values": ["v"], "refs": "mem:1"},
        {"agent_id": "", "values": ["v"]},
    ):
        r = await face.call("check_contingent", args)
        assert r["ok"] is False and r["error"], (args, r)


# -- rebuild equals live -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["standings", "versions"])
async def test_new_read_models_rebuild_equal_live(settings: Settings, name: str) -> None:
    engine = EmbeddedEngine(settings, embedder=HashEmbedder())
    await engine.start()
    ids = []
    for i in range(12):
        r = await call(
            engine, "store", agent_id="rb", content=f"note {i} value {i * 7}", id=f"m{i % 9}", project_id="P"
        )
        if r["result"] == "stored":
            ids.append(r["id"])
    await call(engine, "store", agent_id="rb", content="global copy of m1", id="m1")  # a newer version of m1
    for i, mid in enumerate(ids):
        await call(
            engine, "declare_standing", agent_id="rb", ref=f"mem:{mid}", standing=["open", "fact", "noise"][i % 3]
        )
    await call(engine, "declare_standing", agent_id="rb", ref=f"mem:{ids[0]}", standing="ruled-out")
    await call(engine, "update_memory", agent_id="rb", memory_id=ids[1], content="rewritten")
    await call(engine, "verify_memory", agent_id="rb", memory_id=ids[2])
    await call(engine, "delete_memory", agent_id="rb", memory_id=ids[3])
    live = await engine.read(lambda: engine.runner.digests())
    model = next(p for p in engine.runner.projections if p.name == name)
    snapshot = await engine.read(lambda: model.to_snapshot())
    await engine.close()
    assert snapshot != type(model)().to_snapshot(), "the workload must leave state to compare"

    report = rebuild_all(settings)
    assert report["equal"], report
    assert report["projections"][name]["rebuilt"] == live[name]
    # A snapshot round-trip is the same state too.
    fresh = StandingsProjection() if name == "standings" else type(model)()
    fresh.load_snapshot(snapshot)
    assert fresh.to_snapshot() == snapshot
    from memstream.streams.log.sqlite import SqliteLog

    log = SqliteLog(settings.log_path)
    try:
        replayed = next(p for p in replay(log, [type(fresh)]).projections if p.name == name)
    finally:
        log.close()
    assert replayed.to_snapshot() == snapshot
