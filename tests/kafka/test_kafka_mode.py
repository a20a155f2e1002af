"""Kafka mode end to end: `memstream serve --kafka` routing to two `memstream worker` processes
on a real broker. The same script of calls gives the same answers as the embedded server, and
after one worker is killed with SIGKILL every agent is still answered (by the other worker,
once the partitions have moved), with nothing acknowledged lost."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from memstream.api.services.settings import Settings
from tests.support.deployment import Deployment
from tests.support.digests import live_digests
from tests.support.faces import HttpFace, McpFace
from tests.support.fleet import AGENTS, TOPICS, reads, stable
from tests.support.servers import ServerThread

pytestmark = [pytest.mark.kafka]

PARTITIONS = 16  # the embedded default, so ids are allocated identically in both modes


async def script(face: HttpFace) -> list[Any]:
    """A fleet's day: stores, duplicates, an update, a delete, a lock, then reads."""
    out: list[Any] = []
    for i in range(30):
        agent = AGENTS[i % len(AGENTS)]
        out.append(await face.call("store", {"agent_id": agent, "content": f"{TOPICS[i % 5]} note {i}", "id": f"m{i}"}))
    out.append(await face.call("store", {"agent_id": "ada", "content": "dup", "id": "m0"}))  # same msg_id: skipped
    first = out[0]["id"]
    out.append(await face.call("update_memory", {"agent_id": "ada", "memory_id": first, "content": "tea is oolong"}))
    out.append(await face.call("delete_memory", {"agent_id": "bob", "memory_id": out[1]["id"]}))
    out.append(await face.call("lock_memory", {"agent_id": "cy", "memory_id": out[2]["id"]}))
    out.append(await face.call("delete_memory", {"agent_id": "cy", "memory_id": out[2]["id"]}))  # locked
    out.append(await face.call("archive_episode", {"agent_id": "dee", "summary": "we fixed the printer"}))
    out.extend(await reads(face))
    return out


async def test_kafka_mode_answers_as_the_embedded_server(deployment: Deployment, settings: Settings) -> None:
    deployment.worker()
    deployment.worker()
    deployment.router()
    with ServerThread(settings) as embedded:
        local = HttpFace(embedded.url)
        expected = await script(local)
        await local.close()
    await deployment.ready()
    face = HttpFace(deployment.url)
    try:
        async with asyncio.timeout(240):
            got = await script(face)
        assert stable(got) == stable(expected)
        # the MCP face of the router answers the reads exactly as its HTTP face
        mcp = McpFace(deployment.url)
        async with asyncio.timeout(240):
            assert stable(await reads(mcp)) == stable(await reads(face))
            stored = await mcp.call("store", {"agent_id": "fay", "content": "stored over MCP in Kafka mode"})
            assert stored["result"] == "stored", stored
            listed = await face.call("list_memories", {"agent_id": "fay", "limit": 50})
            assert stored["id"] in [m["id"] for m in listed["memories"]]
            # check_health is the deployment's verdict, answered by the router on both faces
            for f in (face, mcp):
                health = await f.call("check_health", {})
                assert health["status"] == "healthy", health
                assert health["stats"]["partitions_with_owner"] == PARTITIONS
                assert health["stats"]["workers_answering"] == 2
    finally:
        await face.close()


async def test_every_agent_is_answered_after_a_worker_is_killed(deployment: Deployment) -> None:
    first = deployment.worker()
    deployment.worker()
    deployment.router()
    await deployment.ready()
    face = HttpFace(deployment.url)
    try:
        async with asyncio.timeout(240):
            stored = []
            for i in range(24):
                agent = AGENTS[i % len(AGENTS)]
                body = await face.call("store", {"agent_id": agent, "content": f"{TOPICS[i % 5]} fact {i}"})
                assert body["result"] == "stored", body
                stored.append((agent, body["id"]))
            before = await reads(face)
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=30)
            after = await reads(face)  # answered through the rebalance, by the survivor
            assert stable(after) == stable(before)
            for agent, mid in stored:
                listed = await face.call("list_memories", {"agent_id": agent, "limit": 50})
                assert mid in [m["id"] for m in listed["memories"]], (agent, mid)
            # and writes go on: the survivor decides the moved partitions
            body = await face.call("store", {"agent_id": "ada", "content": "written after the failover"})
            assert body["result"] == "stored", body
    finally:
        await face.close()


async def test_replay_from_offset_zero_equals_the_workers_live_state(deployment: Deployment) -> None:
    deployment.worker()
    deployment.worker()
    deployment.router()
    await deployment.ready()
    face = HttpFace(deployment.url)
    try:
        async with asyncio.timeout(240):
            await script(face)
            await face.call("declare_standing", {"agent_id": "eve", "ref": "mem:1", "standing": "noise"})
    finally:
        await face.close()
    live = await live_digests(deployment.cfg)
    busy = sorted(p for p, v in live.items() if v["offset"] >= 0)
    assert len(busy) >= 3, "the script should have written to several partitions"
    args = [sys.executable, "-m", "memstream.api.cli", "rebuild", *deployment.kafka_args]
    args += [a for p in busy for a in ("--partition", str(p))]
    done = subprocess.run(args, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    rebuilt = orjson.loads(done.stdout)
    assert rebuilt["events"] == sum(live[p]["offset"] + 1 for p in busy)
    for p in busy:
        assert rebuilt["partitions"][str(p)] == live[p], f"partition {p}"
    # the same fold in one process (the default splits partitions over one process per CPU)
    serial = subprocess.run([*args, "--jobs", "1"], capture_output=True, timeout=120)
    assert serial.returncode == 0, serial.stderr.decode()[-2000:]
    assert orjson.loads(serial.stdout)["partitions"] == rebuilt["partitions"]
    # point in time: the same fold stopped at an offset of one partition
    p = max(busy, key=lambda q: live[q]["offset"])
    first_arg = args.index("--partition")
    early_args = [*args[:first_arg], "--partition", str(p), "--to-offset", "2"]
    early = subprocess.run(early_args, capture_output=True, timeout=120)
    assert early.returncode == 0, early.stderr.decode()[-2000:]
    part = orjson.loads(early.stdout)["partitions"][str(p)]
    assert part["offset"] == 1 and part["digests"] != live[p]["digests"]


async def test_mcp_over_stdio_in_kafka_mode(deployment: Deployment, tmp_path: Path) -> None:
    """`memstream mcp --kafka`: an agent host's stdio MCP server with no data directory of its
    own; every call goes to the worker owning its agent."""
    import json

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    deployment.worker()
    deployment.worker()
    deployment.router()
    await deployment.ready()
    args = ["-m", "memstream.api.cli", "mcp", *deployment.kafka_args]
    # Its environment, not the MCP client's default one: it carries the deployment's master key.
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(tmp_path), env=dict(os.environ))
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with asyncio.timeout(120), Client(stdio_client(params, errlog=errlog)) as client:

            async def call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
                result = await client.call_tool(tool, arguments)
                body: dict[str, Any] = json.loads(result.content[0].text)
                return body

            stored = await call("store", {"agent_id": "ada", "content": "the stdio host remembers the blue door"})
            assert stored["result"] == "stored", stored
            recalled = await call("recall", {"agent_id": "ada", "query": "blue door", "limit": 3})
            assert recalled["messages"][-1]["content"] == "the stdio host remembers the blue door"
    # the same memory, seen through the router's HTTP face
    face = HttpFace(deployment.url)
    try:
        listed = await face.call("list_memories", {"agent_id": "ada"})
        assert stored["id"] in [m["id"] for m in listed["memories"]]
    finally:
        await face.close()
