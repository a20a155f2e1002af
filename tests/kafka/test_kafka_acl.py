"""Access control in Kafka mode (docs/security.md, api/kafka/router/gate.py): the embedded suite's
matrix (tests/system/test_acl.py) through `memstream serve --kafka` (HTTP and MCP at /mcp) and
`memstream mcp --kafka` (stdio) in front of two `memstream worker` processes on the real broker.

Same answers as embedded mode: grants per client × agent × read / write / admin, records checked
against their owner (asked of the worker holding them), 401 for unknown tokens, a denial
audited on the audit topic by the very record embedded mode writes while the events topic does
not move, `recall_fleet` across partitions within the caller's grants, a malformed ACL file
stopping start-up with embedded mode's message. Workers given MEMSTREAM_WORKER_TOKEN answer
only callers presenting it. One deployment serves the module.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.cookiejar import DefaultCookiePolicy
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from memstream.api.services.settings import load_settings
from memstream.streams.deciders.sealing import LazySealing
from memstream.streams.log.kafka import KafkaConfig, KafkaLog
from memstream.streams.log.port import partition_for
from memstream.streams.log.sqlite import SqliteLog
from tests.support.acl import (
    ACL,
    EPISODE_CALLS,
    EXPECTED,
    MEMORY_CALLS,
    TOKENS,
    TokenHttpFace,
    TokenMcpFace,
    assert_answered_as_missing,
    assert_denied,
    unique,
    write_acl,
)
from tests.support.broker import BOOTSTRAP, deployment_config, drop_topics, require_broker, stop_processes
from tests.support.deployment import until_every_partition_owned
from tests.support.servers import ServerThread, free_port

pytestmark = [pytest.mark.kafka]

PROCS = Path(__file__).resolve().parents[1] / "procs"
PARTITIONS = 6  # alice, bob and '-' (where an agent-less call lands) on three different partitions
WORKER_TOKEN = "worker-secret-0123456789abcdef"
# Fields of an audit record that differ between any two refusals (ids, clock).
VOLATILE = ("id", "command_id", "occurred_at")


@dataclass
class Deployment:
    cfg: KafkaConfig
    url: str
    acl_path: Path
    root: Path

    def kafka_args(self) -> list[str]:
        return [
            "--kafka", self.cfg.bootstrap, "--prefix", self.cfg.prefix,
            "--partitions", str(self.cfg.partitions), "--replication", str(self.cfg.replication),
        ]  # fmt: skip

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSTREAM_KAFKA_", "MEMSTREAM_ACL"))}
        env.update(MEMSTREAM_DATA_DIR=str(self.root / "no-data"), MEMSTREAM_WORKER_TOKEN=WORKER_TOKEN, **extra)
        return env


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    asyncio.run(require_broker())
    root = tmp_path_factory.mktemp("kafka-acl")
    cfg = deployment_config(PARTITIONS)
    assert len({partition_for(a, PARTITIONS) for a in ("alice", "bob", "-")}) == 3
    port = free_port()
    d = Deployment(cfg, f"http://127.0.0.1:{port}", write_acl(root / "acl.json", ACL), root)
    procs = [
        subprocess.Popen(
            [sys.executable, str(PROCS / "kafka_worker.py"), *d.kafka_args()],
            env=d.env(),
            stdout=subprocess.DEVNULL,
            stderr=(root / f"worker-{i}.log").open("w"),
        )
        for i in range(2)
    ]
    procs.append(
        subprocess.Popen(
            [sys.executable, "-m", "memstream.api.cli", "--log-level", "WARNING", "serve", *d.kafka_args(),
             "--port", str(port)],
            env=d.env(MEMSTREAM_ACL_FILE=str(d.acl_path)),
            stdout=subprocess.DEVNULL,
            stderr=(root / "router.log").open("w"),
        )
    )  # fmt: skip

    admin = {"authorization": f"Bearer {TOKENS['admin']}"}
    try:
        ready = until_every_partition_owned(d.url, cfg.partitions, headers=admin, procs=procs, log=root / "router.log")
        asyncio.run(ready)
        yield d
    finally:
        stop_processes(procs)
        asyncio.run(drop_topics(cfg.prefix))


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """An embedded server with the same ACL file: the answers Kafka mode must give."""
    root = tmp_path_factory.mktemp("acl-embedded")
    path = write_acl(root / "acl.json", ACL)
    settings = load_settings(env={}, data_dir=root / "data", sync="NORMAL", acl_file=path)
    with ServerThread(settings) as srv:
        yield srv


@pytest.fixture(params=["http", "mcp"])
def as_client(request: pytest.FixtureRequest, deployment: Deployment) -> Any:
    """``as_client("r-alice")``: a face (HTTP or MCP) on the router presenting that client's token."""
    kind = request.param

    def make(client: str | None, extra: dict[str, str] | None = None, url: str | None = None) -> Any:
        cls = TokenHttpFace if kind == "http" else TokenMcpFace
        return cls(url or deployment.url, TOKENS[client] if client else None, extra)

    make.kind = kind  # type: ignore[attr-defined]
    return make


# -- the topics, read directly --------------------------------------------------------------------


async def ends(cfg: KafkaConfig) -> tuple[dict[int, int], dict[int, int]]:
    """(events end, audit end) per partition, as the broker reports them now."""
    consumer = AIOKafkaConsumer(bootstrap_servers=cfg.bootstrap, group_id=None)
    await consumer.start()
    try:
        tps = [TopicPartition(t, p) for t in (cfg.events_topic, cfg.audit_topic) for p in range(cfg.partitions)]
        got = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    events = {tp.partition: int(o) for tp, o in got.items() if tp.topic == cfg.events_topic}
    audit = {tp.partition: int(o) for tp, o in got.items() if tp.topic == cfg.audit_topic}
    return events, audit


async def audit_records(cfg: KafkaConfig, partition: int, start: int) -> list[dict[str, Any]]:
    opener = LazySealing(cfg)  # the audit topic is sealed: opened with the deployment's master key
    log = KafkaLog(cfg, opener)
    await log.start()
    try:
        return [json.loads(r.value or b"") for r in await log.read_records(cfg.audit_topic, partition, start)]
    finally:
        await log.close()
        opener.close()


async def seed(d: Deployment, agent: str, content: str) -> int:
    f = TokenHttpFace(d.url, TOKENS["admin"])
    try:
        body = await f.call("store", {"agent_id": agent, "content": content})
        assert body["result"] == "stored", body
        return int(body["id"])
    finally:
        await f.close()


# -- the matrix -------------------------------------------------------------------------------------


@pytest.mark.parametrize("client", sorted(EXPECTED))
async def test_isolation_matrix(as_client: Any, deployment: Deployment, client: str) -> None:
    """Each client × agent × (read, write, admin), as in embedded mode; a denied write appends
    no event and one audit record, in the agent's partition."""
    face = as_client(client)
    try:
        for agent in ("alice", "bob"):
            allowed = EXPECTED[client][agent]
            part = partition_for(agent, PARTITIONS)
            await seed(deployment, agent, unique(f"seed for {agent}"))
            body = await face.call("recall", {"agent_id": agent, "query": ""})
            if "r" in allowed:
                assert "error" not in body and body["messages"], body
            else:
                assert_denied(body, "recall", client)
                assert body["agent_id"] == agent and body["required"] == "read"

            events, audit = await ends(deployment.cfg)
            body = await face.call("store", {"agent_id": agent, "content": unique(f"{client} writes")})
            if "w" in allowed:
                assert body["result"] == "stored", body
            else:
                assert_denied(body, "store", client)
                assert body["result"] == "rejected" and body["required"] == "read-write"
                events_after, audit_after = await ends(deployment.cfg)
                assert events_after == events
                assert audit_after == {**audit, part: audit[part] + 1}

            victim = f"{agent}-scratch-{client}"
            await seed(deployment, victim, unique("scratch"))
            body = await face.call("delete_agent_data", {"agent_id": victim})
            if "a" in allowed:
                assert body["ok"] is True and body["deleted_memories"] == 1, body
            else:
                assert_denied(body, "delete_agent_data", client)
    finally:
        await face.close()


async def test_denial_is_audited_exactly_as_in_embedded_mode(
    as_client: Any, deployment: Deployment, embedded: ServerThread
) -> None:
    """The same denied call answers the same body (403 on HTTP) in both modes, and leaves the
    same audit record: on the audit topic, in the refused agent's partition."""
    args = {"agent_id": "alice", "profile": "overwrite", "session_key": "sk-1"}
    claim = {"x-client-id": "admin"}  # a claimed client id counts for nothing
    kafka, local = as_client("r-alice", claim), as_client("r-alice", claim, embedded.url)
    part = partition_for("alice", PARTITIONS)
    try:
        events, audit = await ends(deployment.cfg)
        db = SqliteLog(embedded.app.state.engine.settings.log_path)
        try:
            audit_start = db.audit_end_offset()
        finally:
            db.close()

        body = await kafka.call("update_profile", args)
        expected = await local.call("update_profile", args)
        assert body == expected
        assert_denied(body, "update_profile", "r-alice")
        if as_client.kind == "http":
            assert kafka.status == local.status == 403

        events_after, audit_after = await ends(deployment.cfg)
        assert events_after == events and audit_after == {**audit, part: audit[part] + 1}
        [record] = await audit_records(deployment.cfg, part, audit[part])
        db = SqliteLog(embedded.app.state.engine.settings.log_path)
        try:
            [row] = db.read_audit(audit_start)
        finally:
            db.close()
        reference = json.loads(row.value)
        assert record["kind"] == "refused" and record["actor"]["client_id"] == "r-alice"
        assert record["outcome"]["error"] == "permission_denied" and record["scope"]["agent_id"] == "alice"
        assert {k: v for k, v in record.items() if k not in VOLATILE} == {
            k: v for k, v in reference.items() if k not in VOLATILE
        }
        assert TOKENS["r-alice"] not in json.dumps(record)
    finally:
        await kafka.close()
        await local.close()


async def test_records_are_checked_against_their_owner(as_client: Any, deployment: Deployment) -> None:
    """rw-alice cannot touch bob's records by id (their owner is asked of bob's partition's
    worker), whether it names no agent or names alice, nor tell them from ids nobody owns,
    deleted records included: the same answer as for a missing id, as in embedded mode. The
    denials are on bob's partition's audit topic, for operators."""
    bob_mem = await seed(deployment, "bob", unique("bob's private note"))
    gone = await seed(deployment, "bob", unique("bob's deleted note"))
    admin, face, bob_rw = as_client("admin"), as_client("rw-alice"), as_client("star-none-bob-rw")
    missing = 10**12
    bob_part = partition_for("bob", PARTITIONS)
    try:
        episode = await admin.call("archive_episode", {"agent_id": "bob", "summary": unique("bob episode")})
        ep_id = episode["episode_id"]
        assert (await admin.call("delete_memory", {"memory_id": gone}))["ok"] is True
        events, audit = await ends(deployment.cfg)
        calls = [(t, make, real) for real in (bob_mem, gone) for t, make in MEMORY_CALLS]
        calls += [(t, make, ep_id) for t, make in EPISODE_CALLS]
        for extra in ({}, {"agent_id": "alice"}):
            for tool, make, real in calls:
                body = await assert_answered_as_missing(face, tool, make, extra, real, missing)
                if extra:  # alice's own call: it finds no such record
                    assert body["ok"] is False and body["error"] != "permission_denied", body
                else:  # an id nobody owns needs every agent
                    assert_denied(body, tool, "rw-alice")
                    assert body["agent_id"] == "*", body  # the owner's name is not echoed
        assert (await ends(deployment.cfg))[0] == events
        records = await audit_records(deployment.cfg, bob_part, audit[bob_part])
        denials = [r for r in records if r["actor"]["client_id"] == "rw-alice"]
        assert len(denials) == 2 * len(calls), records
        assert {r["outcome"]["reason"] for r in denials} == {
            "permission_denied: the record named belongs to an agent this client may not reach at this level"
        }
        body = await admin.call("delete_memory", {"memory_id": missing})
        assert body["ok"] is False and body["error"] != "permission_denied"
        # The owner may, without naming itself.
        mine = await seed(deployment, "alice", unique("alice's own"))
        assert await face.call("lock_memory", {"memory_id": mine}) == {"ok": True, "locked_id": mine}
        note = await admin.call("get_contents", {"agent_id": "bob", "refs": [f"mem:{bob_mem}"]})
        assert note["items"][0]["content"].startswith("bob's private note")
        # A deleted record's owner is found through its history: bob's writer reaches it (and
        # is refused on the merits).
        body = await bob_rw.call("delete_memory", {"memory_id": gone})
        assert body["ok"] is False and body["error"] != "permission_denied", body
    finally:
        for f in (admin, face, bob_rw):
            await f.close()


async def test_health_of_one_agent_shows_that_agents_figures_only(as_client: Any, deployment: Deployment) -> None:
    """check_health with an agent_id, answered by the router: a client that may not read every
    agent gets the verdict without the deployment's figures (partitions, workers, their
    addresses); a client that may sweep gets them all."""
    store_wide = "a store-wide check: its figures go only to clients that may read every agent"
    for client, whole in (("rw-alice", False), ("r-alice", False), ("admin", True), ("rw-all-not-admin", True)):
        face = as_client(client)
        try:
            body = await face.call("check_health", {"agent_id": "alice"})
            assert body["status"] in ("healthy", "degraded"), body
            if whole:
                assert body["stats"]["partitions_with_owner"] == PARTITIONS, body
            else:
                assert body["stats"] == {"mode": "kafka"}, body
                assert all(i["detail"] == store_wide for i in body["issues"]), body
        finally:
            await face.close()
    face = as_client("star-r-no-alice")
    try:
        assert_denied(await face.call("check_health", {"agent_id": "alice"}), "check_health", "star-r-no-alice")
    finally:
        await face.close()


async def test_fleet_recall_spans_partitions_within_grants(as_client: Any, deployment: Deployment) -> None:
    """recall_fleet over agents of different partitions answers each agent's rows (the router
    splits it per agent), and only for agents the caller may read: one agent outside its grants
    refuses the whole call."""
    a, b = unique("fleet alice row"), unique("fleet bob row")
    await seed(deployment, "alice", a)
    await seed(deployment, "bob", b)
    admin, limited = as_client("admin"), as_client("star-none-bob-rw")
    try:
        body = await admin.call("recall_fleet", {"agent_ids": ["alice", "bob", "alice"], "query": "", "limit": 50})
        by_agent = {r["agent_id"]: [m["content"] for m in r["messages"]] for r in body["results"]}
        assert list(by_agent) == ["alice", "bob"]
        assert a in by_agent["alice"] and b not in by_agent["alice"]
        assert b in by_agent["bob"] and a not in by_agent["bob"]
        assert body["count"] == sum(len(v) for v in by_agent.values())
        events, audit = await ends(deployment.cfg)
        body = await limited.call("recall_fleet", {"agent_ids": ["bob", "alice"], "query": ""})
        assert_denied(body, "recall_fleet", "star-none-bob-rw")
        assert body["agent_id"] == "alice" and "results" not in body
        part = partition_for("alice", PARTITIONS)
        assert await ends(deployment.cfg) == (events, {**audit, part: audit[part] + 1})
        body = await limited.call("recall_fleet", {"agent_ids": ["bob"], "query": "", "limit": 50})
        assert [r["agent_id"] for r in body["results"]] == ["bob"]
        assert b in [m["content"] for m in body["results"][0]["messages"]]
        body = await limited.call("recall_fleet", {"agent_ids": ["bob", ""], "query": ""})  # '' is not a way round
        assert_denied(body, "recall_fleet", "star-none-bob-rw")
    finally:
        await admin.close()
        await limited.close()


async def test_sweeps_need_every_agent(as_client: Any, deployment: Deployment) -> None:
    for client in ("r-alice", "star-r-no-alice"):
        face = as_client(client)
        try:
            for tool in ("list_memories", "check_health", "audit_log", "reembed_status"):
                body = await face.call(tool, {})
                assert_denied(body, tool, client)
                assert body["required"] == "read" and body["agent_id"] == "*", body
            body = await face.call("list_memories", {"agent_id": "alice"})
            assert ("error" not in body) == (client != "star-r-no-alice"), body
        finally:
            await face.close()
    admin = as_client("admin")
    try:
        assert (await admin.call("check_health", {}))["status"] == "healthy"
        assert "error" not in await admin.call("list_memories", {})
    finally:
        await admin.close()


async def test_admin_tools_need_the_admin_grant(as_client: Any, deployment: Deployment) -> None:
    face = as_client("rw-all-not-admin")
    try:
        body = await face.call("delete_agent_data", {"agent_id": "alice"})
        assert_denied(body, "delete_agent_data", "rw-all-not-admin")
        assert body["required"] == "admin"
    finally:
        await face.close()


async def test_erasure_needs_the_grants_of_embedded_mode(as_client: Any, deployment: Deployment) -> None:
    """Forwarded like any write after the router's grant check (docs/erasure.md, "Who may erase"):
    erase_agent_data needs the admin grant, erase_memory write access to the agent."""
    not_admin, reader, writer = as_client("rw-all-not-admin"), as_client("r-alice"), as_client("rw-alice")
    try:
        body = await not_admin.call("erase_agent_data", {"agent_id": "alice", "reason": "account closed"})
        assert_denied(body, "erase_agent_data", "rw-all-not-admin")
        assert body["required"] == "admin"
        stored = await writer.call("store", {"agent_id": "alice", "content": unique("a note to erase")})
        request = {"agent_id": "alice", "memory_id": stored["id"], "reason": "data subject request"}
        assert_denied(await reader.call("erase_memory", request), "erase_memory", "r-alice")
        erased = await writer.call("erase_memory", request)
        assert erased["ok"] is True and erased["erased"] == [f"mem:{stored['id']}"], erased
    finally:
        for f in (not_admin, reader, writer):
            await f.close()


async def test_file_transfers_need_the_admin_grant(as_client: Any, deployment: Deployment) -> None:
    """export / import / merge are answered by the router itself (api/kafka/router/transfers.py), after
    the same grant check as every call: denied and audited without the admin grant; an admin's
    calls work, the file under the router's export directory."""
    kind = as_client.kind
    name = f"acl-{kind}.jsonl"
    calls = [
        ("export_memories", {"agent_id": "alice", "output_path": name}),
        ("import_memories", {"input_path": name, "target_agent_id": f"acl-import-{kind}"}),
        ("merge_memories", {"source_agent_id": "alice", "target_agent_id": f"acl-merge-{kind}"}),
    ]
    await seed(deployment, "alice", unique("a memory to transfer"))
    for client in ("rw-all-not-admin", "rw-alice"):
        face = as_client(client)
        try:
            for tool, args in calls:
                events, audit = await ends(deployment.cfg)
                body = await face.call(tool, args)
                assert_denied(body, tool, client)
                assert body["required"] == "admin", body
                events_after, audit_after = await ends(deployment.cfg)
                assert events_after == events and sum(audit_after.values()) == sum(audit.values()) + 1
        finally:
            await face.close()
    admin = as_client("admin")
    try:
        exported = await admin.call(*calls[0])
        assert exported["ok"] is True and exported["memories"] >= 1, exported
        lines = (deployment.root / "no-data" / "exports" / name).read_bytes().splitlines()
        assert json.loads(lines[0])["memory_count"] == exported["memories"]
        assert len(lines) == 1 + exported["memories"] + exported["episodes"] + exported["profiles"]
        imported = await admin.call(*calls[1])
        assert imported["ok"] is True and imported["imported_memories"] == exported["memories"], imported
        merged = await admin.call(*calls[2])
        assert merged["ok"] is True and merged["merged_memories"] >= exported["memories"], merged
    finally:
        await admin.close()


# -- authentication ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer not-a-known-token"},
        {"authorization": f"Basic {TOKENS['admin']}"},
        {"x-client-id": "admin"},
        {"authorization": f"Bearer {TOKENS['admin']}x"},
    ],
    ids=["none", "unknown", "basic", "claimed-id", "longer"],
)
async def test_unknown_or_missing_token_is_401(deployment: Deployment, headers: dict[str, str]) -> None:
    before = await ends(deployment.cfg)
    async with httpx.AsyncClient(base_url=deployment.url, headers=headers) as client:
        for path, body in (
            ("/v1/tools/recall", {"agent_id": "alice", "query": "x"}),
            ("/v1/tools/store", {"agent_id": "alice", "content": "x"}),
            ("/context/packet", {"agent_id": "alice", "query": "x"}),
            ("/context/package", {"agent_id": "alice", "query": "x"}),
            ("/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        ):
            r = await client.post(path, json=body)
            assert r.status_code == 401, (path, r.status_code, r.text)
            assert r.json() == {"ok": False, "error": "unauthorized"}
            assert r.headers["www-authenticate"] == "Bearer"
        assert (await client.get("/health")).status_code == 401
    assert await ends(deployment.cfg) == before


async def test_health_and_context_routes_are_subject_to_grants(deployment: Deployment) -> None:
    async with httpx.AsyncClient(base_url=deployment.url) as client:
        r = await client.get("/health", headers={"authorization": f"Bearer {TOKENS['r-alice']}"})
        assert r.status_code == 403 and r.json()["error"] == "permission_denied"
        headers = {"authorization": f"bearer {TOKENS['star-r-no-alice']}"}  # scheme case-insensitive
        r = await client.post("/context/packet", json={"agent_id": "alice", "query": "seed"}, headers=headers)
        assert r.status_code == 403 and r.json()["error"] == "permission_denied"
        r = await client.post("/context/packet", json={"agent_id": "bob", "query": "seed"}, headers=headers)
        assert r.status_code == 200, r.text


async def test_workers_answer_only_callers_with_the_worker_token(deployment: Deployment) -> None:
    """Defence in depth: a worker with MEMSTREAM_WORKER_TOKEN refuses whoever goes around the
    router (and its grant checks); the router presents the token."""
    from memstream.api.kafka.router.app import Owners

    owners = Owners(deployment.cfg)
    await owners.start()
    try:
        deadline = time.monotonic() + 30
        while len(owners.urls) < PARTITIONS:
            assert time.monotonic() < deadline, owners.urls
            await owners.wait_change(0.5)
        url = owners.urls[partition_for("alice", PARTITIONS)]
    finally:
        await owners.close()
    call = {"agent_id": "alice", "query": ""}
    async with httpx.AsyncClient(base_url=url) as client:
        for headers in ({"x-client-id": "admin"}, {"x-memstream-worker-token": WORKER_TOKEN + "x"}):
            for path, body in (("/v1/tools/recall", call), ("/v1/owner", {"ref": "mem:1"})):
                r = await client.post(path, json=body, headers=headers)
                assert r.status_code == 401 and r.json() == {"ok": False, "error": "unauthorized"}
        r = await client.post("/v1/tools/recall", json=call, headers={"x-memstream-worker-token": WORKER_TOKEN})
        assert r.status_code == 200 and "messages" in r.json()


# -- stdio ------------------------------------------------------------------------------------------


async def test_stdio_in_kafka_mode_is_the_local_principal(deployment: Deployment) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = deployment.env(MEMSTREAM_ACL_FILE=str(deployment.acl_path), MEMSTREAM_CLIENT_ID="admin")  # a claim
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memstream.api.cli", "mcp", *deployment.kafka_args()],
        env=env,
        cwd=str(deployment.root),
    )
    part = partition_for("alice", PARTITIONS)
    events, audit = await ends(deployment.cfg)
    with (deployment.root / "stdio.log").open("w") as errlog:
        async with asyncio.timeout(90), Client(stdio_client(params, errlog=errlog), mode="legacy") as client:

            async def call(tool: str, args: dict[str, Any]) -> dict[str, Any]:
                result = await client.call_tool(tool, args)
                body: dict[str, Any] = json.loads(str(getattr(result.content[0], "text", "")))
                return body

            assert_denied(await call("store", {"agent_id": "alice", "content": "from stdio"}), "store", "local")
            assert "error" not in await call("recall", {"agent_id": "alice", "query": "anything"})
            assert_denied(await call("recall", {"agent_id": "bob", "query": "anything"}), "recall", "local")
    events_after, audit_after = await ends(deployment.cfg)
    assert events_after == events and audit_after[part] == audit[part] + 1
    [record] = await audit_records(deployment.cfg, part, audit[part])
    assert record["actor"]["client_id"] == "local" and record["command"] == "store"


# -- start-up ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["serve", "mcp"])
def test_malformed_acl_file_stops_startup_as_in_embedded_mode(tmp_path: Path, command: str) -> None:
    bad = write_acl(
        tmp_path / "acl.json", {"clients": [{"client_id": "c", "token": "SECRET-token-1", "grants": {"a": "admin"}}]}
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_KAFKA_")}
    env.update(MEMSTREAM_DATA_DIR=str(tmp_path / "data"), MEMSTREAM_ACL_FILE=str(bad), MEMSTREAM_EMBEDDER="none")
    base = [sys.executable, "-m", "memstream.api.cli", command]
    if command == "serve":
        base += ["--port", str(free_port())]
    kafka = ["--kafka", BOOTSTRAP, "--prefix", "memstream-it-never-created", "--partitions", "2"]
    errors = []
    for args in (base + kafka, base):  # Kafka mode, then embedded mode for the reference message
        out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert out.returncode == 1, out.stderr
        assert "refusing to start" in out.stderr and "unknown permission 'admin'" in out.stderr, out.stderr
        assert "SECRET-token-1" not in out.stderr + out.stdout and "Traceback" not in out.stderr
        errors.append([line for line in out.stderr.splitlines() if "refusing to start" in line])
    assert errors[0] == errors[1]
    assert not (tmp_path / "data").exists()


def test_kafka_router_bind_warning(deployment: Deployment) -> None:
    """`serve --kafka` on a routable interface without an ACL file warns as embedded mode does."""
    port = free_port()
    log_path = deployment.root / f"exposed-{port}.log"
    with log_path.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memstream.api.cli", "serve", *deployment.kafka_args(), "--host", "0.0.0.0",
             "--port", str(port)],
            env=deployment.env(),
            stdout=subprocess.DEVNULL,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while "NETWORK-EXPOSED" not in log_path.read_text():
                assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.1)
        finally:
            stop_processes([proc])
    assert "NETWORK-EXPOSED WITHOUT TOKENS: binding 0.0.0.0 with no MEMSTREAM_ACL_FILE" in log_path.read_text()


def test_kafka_list_agents_and_the_console_session_are_scoped_to_the_caller(deployment: Deployment) -> None:
    """``list_agents`` through the router names only the agents the caller may read (the router
    filters the workers' lists); the console's login works on the router, and its cookie, with
    the session's CSRF token, calls the tools as the session's client."""
    with httpx.Client(base_url=deployment.url, timeout=60) as http:
        http.cookies.jar.set_policy(DefaultCookiePolicy(allowed_domains=[]))  # only the cookies given
        for agent in ("alice", "bob"):
            r = http.post(
                "/v1/tools/store",
                json={"agent_id": agent, "content": f"{agent} listed by list_agents"},
                headers={"authorization": f"Bearer {TOKENS['admin']}"},
            )
            assert r.json()["result"] in ("stored", "skipped"), r.text
        # Of alice and bob, what each client may read (other tests of the module write other agents).
        expected = {"admin": {"alice", "bob"}, "rw-alice": {"alice"}, "star-r-no-alice": {"bob"}, "nogrants": set()}
        for client, agents in expected.items():
            r = http.post("/v1/tools/list_agents", json={}, headers={"authorization": f"Bearer {TOKENS[client]}"})
            assert r.status_code == 200, r.text
            listed = {a["agent_id"] for a in r.json()["agents"]}
            assert listed & {"alice", "bob"} == agents, (client, r.text)
            if client in ("rw-alice", "nogrants"):  # grants on named agents only
                assert listed == agents, (client, r.text)
        # The console's login on the router.
        form = http.get("/console/login")
        nonce = form.headers["set-cookie"].split(";", 1)[0].split("=", 1)[1]
        token = re.search(r"name='csrf' value='([^']+)'", form.text)
        assert token is not None
        login = http.post(
            "/console/login",
            data={"csrf": token.group(1), "token": TOKENS["rw-alice"]},
            headers={"cookie": f"memstream_console_login={nonce}"},
        )
        assert login.status_code == 303, login.text
        cookie = {"cookie": login.headers["set-cookie"].split(";", 1)[0]}
        page = http.get("/", headers=cookie)
        csrf = re.search(r"<meta name='memstream-csrf' content='([^']+)'>", page.text)
        assert page.status_code == 200 and csrf is not None
        assert http.post("/v1/tools/list_agents", json={}, headers=cookie).status_code == 403  # no CSRF header
        r = http.post("/v1/tools/list_agents", json={}, headers={**cookie, "x-csrf-token": csrf.group(1)})
        assert r.status_code == 200 and [a["agent_id"] for a in r.json()["agents"]] == ["alice"], r.text
