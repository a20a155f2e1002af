"""History, audit and point-in-time reads in Kafka mode answer as the embedded server does.

One script of calls runs against an embedded server and against `memstream serve --kafka` with
two `memstream worker` processes on the real broker; then `history` (per record and per agent),
`audit_log` and `as_of` reads (`get_contents`, `list_memories`, `recall`, by offset and by
instant) are compared answer for answer. Every write carries its command id, so the answers
differ only in clock readings, random event ids, and offsets: Kafka numbers each partition from
0, so an event's Kafka offset is its rank among its partition's events in the embedded log
(checked exactly, from the embedded log file). Agents are chosen so that two share a partition:
their events interleave in it, as a deployment's do.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from memstream.api.services.settings import Settings
from memstream.streams.log.sqlite import SqliteLog
from tests.support.answers import PARTITIONS, CommandIds, sharing, stable_without  # noqa: F401  (conftest's cfg reads PARTITIONS)
from tests.support.deployment import Deployment
from tests.support.faces import HttpFace, McpFace
from tests.support.servers import ServerThread

pytestmark = [pytest.mark.kafka]

AGENTS = ["ada", sharing("ada"), "bob", "cy"]
TOPICS = ["harbour gate code", "green tea mornings", "billing database", "printer paper jam", "vpn certificate"]
# Clock readings and random ids: the only fields two runs of one script may differ in.
VOLATILE = {"at", "event_id", "timestamp", "created_at", "updated_at", "as_of", "elapsed_ms"}


stable = stable_without(VOLATILE)


class Script(CommandIds):
    """The calls both runs make."""

    async def run(self) -> list[Any]:
        out: list[Any] = []
        for i in range(12):
            agent = AGENTS[i % len(AGENTS)]
            content = f"the {TOPICS[i % len(TOPICS)]} note {i}"
            out.append(await self.write("store", {"agent_id": agent, "content": content, "id": f"m{i}"}))
        ids = [r["id"] for r in out]
        ada, peer, bob, cy = AGENTS
        out.append(await self.write("store", {"agent_id": ada, "content": "again", "id": "m0"}))  # skipped
        out.append(await self.write("update_memory", {"agent_id": ada, "memory_id": ids[0], "content": "gate is 9876"}))
        out.append(await self.write("lock_memory", {"agent_id": peer, "memory_id": ids[1]}))
        locked = {"agent_id": peer, "memory_id": ids[1], "content": "no"}
        out.append(await self.write("update_memory", locked))  # refused: locked
        out.append(await self.write("unlock_memory", {"agent_id": peer, "memory_id": ids[1]}))
        out.append(await self.write("delete_memory", {"agent_id": ada, "memory_id": ids[4]}))
        out.append(await self.write("delete_memory", {"agent_id": bob, "memory_id": 987654}))  # not found
        out.append(await self.write("store", {"agent_id": bob, "content": 42}))  # invalid
        out.append(await self.write("store", {"agent_id": cy, "content": "x", "timestamp": "not-a-time"}))  # invalid
        out.append(await self.write("declare_standing", {"agent_id": peer, "ref": f"mem:{ids[5]}", "standing": "fact"}))
        out.append(await self.write("archive_episode", {"agent_id": ada, "summary": "we fixed the harbour gate"}))
        out.append(await self.write("store", {"agent_id": cy, "content": "the vpn certificate expires in May"}))
        out.append(await self.write("delete_agent_data", {"agent_id": bob}))
        out.append(await self.write("store", {"agent_id": ada, "content": "the green tea is oolong now"}))
        return out


def written(writes: list[Any]) -> list[str]:
    """The refs the script wrote: every stored memory and the episode."""
    mems = [f"mem:{w['id']}" for w in writes if w.get("result") == "stored"]
    return mems + [f"ep:{w['episode_id']}" for w in writes if w.get("episode_id")]


async def history_reads(face: HttpFace | McpFace, refs: list[str]) -> list[Any]:
    out = []
    for ref in refs:
        out.append(await face.call("history", {"ref": ref}))
    out.append(await face.call("history", {"ref": refs[0], "agent_id": AGENTS[1]}))  # not its owner
    out.append(await face.call("history", {"ref": "mem:999999"}))  # never existed
    for agent in AGENTS:
        out.append(await face.call("history", {"agent_id": agent}))
        out.append(await face.call("history", {"agent_id": agent, "limit": 2}))
    return out


async def audit_reads(face: HttpFace | McpFace) -> list[Any]:
    out = []
    for agent in AGENTS:
        for kind in ("refused", "skipped", "all"):
            out.append(await face.call("audit_log", {"agent_id": agent, "kind": kind}))
    return out


async def as_of_reads(face: HttpFace, agent: str, as_of: int | str, refs: list[str]) -> list[Any]:
    return [
        await face.call("list_memories", {"agent_id": agent, "as_of": as_of}),
        await face.call("get_contents", {"agent_id": agent, "refs": refs, "as_of": as_of}),
        await face.call("recall", {"agent_id": agent, "query": "harbour gate green tea", "as_of": as_of}),
        await face.call("list_episodes", {"agent_id": agent, "as_of": as_of}),
    ]


def ranks(records: list[Any]) -> dict[int, int]:
    """Embedded offset -> the record's offset in its Kafka partition (its rank in the partition)."""
    seen: dict[int, int] = {}
    out = {}
    for rec in records:
        out[rec.offset] = seen.get(rec.partition, 0)
        seen[rec.partition] = out[rec.offset] + 1
    return out


def per_partition(body: Any, events: dict[int, int], audits: dict[int, int]) -> Any:
    """An embedded answer with its log offsets as Kafka numbers them (see ``ranks``)."""
    if isinstance(body, list):
        return [per_partition(v, events, audits) for v in body]
    if not isinstance(body, dict):
        return body
    out = {k: per_partition(v, events, audits) for k, v in body.items()}
    if "event_id" in body:
        out["offset"] = events[body["offset"]]
    if "audit_offset" in body:
        out["audit_offset"] = audits[body["audit_offset"]]
    return out


async def test_history_audit_and_as_of_answer_as_the_embedded_server(
    deployment: Deployment, settings: Settings
) -> None:
    deployment.worker()
    deployment.worker()
    deployment.router()
    with ServerThread(settings) as embedded:
        local = HttpFace(embedded.url)
        try:
            expected_writes = await Script(local).run()
            refs = written(expected_writes)
            expected_history = await history_reads(local, refs)
            expected_audit = await audit_reads(local)
            expected_points = {a: (await local.call("history", {"agent_id": a}))["events"] for a in AGENTS}
            expected_as_of = {
                (a, i, how): await as_of_reads(local, a, e["offset"] if how == "offset" else e["at"], refs)
                for a in AGENTS
                for i, e in enumerate(expected_points[a])
                for how in ("offset", "at")
            }
        finally:
            await local.close()
    # the points differ: the comparisons below see the state change over time
    assert len({repr(stable(v)) for k, v in expected_as_of.items() if k[0] == AGENTS[0]}) >= 4
    log = SqliteLog(settings.log_path)
    try:
        events = ranks(log.read(0, limit=100_000, vectors=False))
        audits = ranks(log.read_audit(0, limit=100_000))
    finally:
        log.close()

    await deployment.ready()
    face = HttpFace(deployment.url)
    mcp = McpFace(deployment.url)
    try:
        async with asyncio.timeout(300):
            writes = await Script(face).run()
            assert stable(writes) == stable(expected_writes)
            assert written(writes) == refs
            got_history = await history_reads(face, refs)
            assert stable(got_history) == stable(per_partition(expected_history, events, audits))
            # the partition's offsets: the first store of ada's peer follows ada's in their partition
            ada_first, peer_first = got_history[0]["events"][0], got_history[1]["events"][0]
            assert ada_first["partition"] == peer_first["partition"] and peer_first["offset"] == 1
            got_audit = await audit_reads(face)
            assert stable(got_audit) == stable(per_partition(expected_audit, events, audits))
            assert {r["tool"] for a in got_audit for r in a["records"]} >= {"update_memory", "delete_memory", "store"}
            # the MCP face of the router answers as its HTTP face (the audit first: refused
            # history reads are audited too)
            assert stable(await audit_reads(mcp)) == stable(got_audit)
            assert stable(await history_reads(mcp, refs[:3])) == stable(await history_reads(face, refs[:3]))

            for a in AGENTS:
                points = (await face.call("history", {"agent_id": a}))["events"]
                assert [events[e["offset"]] for e in expected_points[a]] == [e["offset"] for e in points]
                for i, e in enumerate(points):
                    for how in ("offset", "at"):
                        got = await as_of_reads(face, a, e["offset"] if how == "offset" else e["at"], refs)
                        assert stable(got) == stable(expected_as_of[(a, i, how)]), (a, i, how)
                # an agent's history from an offset of its partition
                tail = await face.call("history", {"agent_id": a, "since_offset": points[-1]["offset"]})
                assert [e["event_id"] for e in tail["events"]] == [points[-1]["event_id"]]
            before = await face.call("list_memories", {"agent_id": AGENTS[0], "as_of": "2000-01-01T00:00:00Z"})
            assert before["memories"] == []
    finally:
        await face.close()
        await mcp.close()


async def test_kafka_mode_read_refusals_say_why(deployment: Deployment) -> None:
    """What Kafka mode answers differently, and clearly: an audit trail is read per agent, and
    offsets are checked against the agent's partition."""
    deployment.worker()
    deployment.router()
    await deployment.ready()
    face = HttpFace(deployment.url)
    try:
        async with asyncio.timeout(120):
            await face.call("store", {"agent_id": "ada", "content": "one"})
            everyone = await face.call("audit_log", {})
            assert everyone["ok"] is False and "agent_id" in everyone["error"]
            beyond = await face.call("list_memories", {"agent_id": "ada", "as_of": 1})
            assert beyond["ok"] is False and "partition" in beyond["error"] and "(0)" in beyond["error"]
            assert (await face.call("list_memories", {"agent_id": "ada", "as_of": 0}))["count"] == 1
    finally:
        await face.close()
