"""Broker faults for the Kafka tests: a broker of the test's own (infra/kafka-local.sh on other
ports and another data directory, so the shared broker never sees the fault) that it crashes,
freezes and restarts, and a write storm through a router that records every call, to hold what
the callers were told against what the log holds."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
import orjson

from memstream.api.kafka.router.app import FORWARD_DEADLINE_S
from memstream.streams.deciders.sealing import LazySealing
from memstream.streams.events import decode
from memstream.streams.log.kafka import KafkaConfig, KafkaLog
from tests.support.servers import free_port

SCRIPT = Path(__file__).resolve().parents[2] / "infra" / "kafka-local.sh"
# What a caller of the router may wait at most: the router's forwarding deadline, plus its own
# work and the loopback hops. A call still unanswered then is a hang.
CALL_DEADLINE_S = FORWARD_DEADLINE_S + 5.0
# How long the client itself waits before it gives up on a call (and records a hang).
CLIENT_TIMEOUT_S = CALL_DEADLINE_S + 30.0


def _two_free_ports() -> tuple[int, int]:
    """Two distinct ports picked as ``free_port`` picks one (below the ephemeral range)."""
    first = free_port()
    second = free_port()
    while second == first:
        second = free_port()
    return first, second


class LocalBroker:
    """A single-node broker of ``infra/kafka-local.sh`` on free ports, in ``data_dir``."""

    def __init__(self, data_dir: Path) -> None:
        self.port, self.controller_port = _two_free_ports()
        self.env = {
            **os.environ,
            "KAFKA_PORT": str(self.port),
            "KAFKA_CONTROLLER_PORT": str(self.controller_port),
            "MEMSTREAM_KAFKA_DATA": str(data_dir),
            "MEMSTREAM_KAFKA_STOP_TIMEOUT": "20",
        }

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def config(self, prefix: str, partitions: int) -> KafkaConfig:
        return KafkaConfig(bootstrap=self.bootstrap, prefix=prefix, partitions=partitions, replication=1)

    def run(self, *args: str, timeout: float = 180) -> str:
        done = subprocess.run(["bash", str(SCRIPT), *args], env=self.env, capture_output=True, timeout=timeout)
        out = (done.stdout + done.stderr).decode(errors="replace")
        if done.returncode != 0:
            raise RuntimeError(f"kafka-local.sh {' '.join(args)} exited {done.returncode}:\n{out[-3000:]}")
        return out

    def start(self) -> None:
        self.run("start")

    def kill(self) -> None:
        """SIGKILL: a crash; the data stays for the next ``start``."""
        self.run("kill")

    def pause(self) -> None:
        self.run("pause")

    def resume(self) -> None:
        self.run("resume")

    def restart(self) -> None:
        """A clean stop (SIGTERM, controlled shutdown), then a start on the same data."""
        self.run("restart")

    def purge(self) -> None:
        self.run("stop", "--purge")


@dataclass(slots=True)
class Attempt:
    """One call of the storm: what the caller was told, and how long it waited."""

    client: str
    command_id: str
    started: float
    seconds: float
    status: int | None  # None: no HTTP answer (the client gave up, or the connection failed)
    body: dict[str, Any] | None
    error: str = ""
    read: bool = False  # a read (``list_memories``), not a store

    @property
    def stored(self) -> bool:
        return self.status == 200 and self.body is not None and self.body.get("result") == "stored"

    @property
    def answered(self) -> bool:
        """A read's answer: the agent's memories."""
        return self.status == 200 and self.body is not None and isinstance(self.body.get("memories"), list)


class Caller(Protocol):
    async def __call__(self, agent: str, content: str, command_id: str) -> tuple[int | None, dict[str, Any] | None]: ...


def http_caller(client: httpx.AsyncClient, *, header: bool) -> Caller:
    """``store`` over the HTTP face; the command id in the body, or (``header``) as
    ``Idempotency-Key``, its HTTP spelling."""

    async def call(agent: str, content: str, command_id: str) -> tuple[int | None, dict[str, Any] | None]:
        args: dict[str, Any] = {"agent_id": agent, "content": content}
        headers = {"content-type": "application/json"}
        if header:
            headers["idempotency-key"] = command_id
        else:
            args["command_id"] = command_id
        r = await client.post("/v1/tools/store", content=orjson.dumps(args), headers=headers)
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else None
        return r.status_code, body

    return call


def mcp_caller(base_url: str) -> Caller:
    """``store`` over MCP (streamable HTTP, the SDK's client), one client per call."""

    async def call(agent: str, content: str, command_id: str) -> tuple[int | None, dict[str, Any] | None]:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        args = {"agent_id": agent, "content": content, "command_id": command_id}
        async with (
            httpx2.AsyncClient(headers={"x-client-id": "storm"}, timeout=httpx2.Timeout(CLIENT_TIMEOUT_S)) as http,
            Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as client,
        ):
            result = await client.call_tool("store", args)
        from mcp.types import TextContent

        texts = [c.text for c in result.content if isinstance(c, TextContent)]
        body: dict[str, Any] = json.loads(texts[0]) if len(texts) == 1 else {"error": f"odd result {result!r}"}
        # MCP has no status code: a failure is an answer carrying `error`; 503 is what the
        # HTTP face gives log_unavailable, 200 a result.
        status = 200 if "error" not in body else 503 if str(body["error"]).startswith("log_unavailable") else 500
        return status, body

    return call


@dataclass
class Storm:
    """Clients storing as fast as they are answered, through one router: two over HTTP with
    the command id in the body, two with ``Idempotency-Key``, one over MCP; and ``readers``
    listing an agent's memories over HTTP. A client retries a failed command under the same
    command id until it is acknowledged, as W9 tells clients to."""

    url: str
    agents: list[str]
    clients: int = 5
    readers: int = 1
    attempts: list[Attempt] = field(default_factory=list)
    acked: dict[str, dict[str, Any]] = field(default_factory=dict)  # command id -> first ack body
    issued: dict[str, tuple[str, str]] = field(default_factory=dict)  # command id -> (agent, content)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=CLIENT_TIMEOUT_S) as http:
            callers: list[Caller] = [
                http_caller(http, header=False),
                http_caller(http, header=True),
                mcp_caller(self.url),
            ]
            writers = [self._client(i, callers[i % len(callers)]) for i in range(self.clients)]
            await asyncio.gather(*writers, *(self._reader(i, http) for i in range(self.readers)))

    async def _reader(self, n: int, http: httpx.AsyncClient) -> None:
        i = 0
        while not self.stop.is_set():
            agent = self.agents[(n + i) % len(self.agents)]
            started = time.monotonic()
            status: int | None = None
            body: dict[str, Any] | None = None
            error = ""
            try:
                r = await http.post("/v1/tools/list_memories", json={"agent_id": agent, "limit": 5})
                status, body = r.status_code, r.json()
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            self.attempts.append(Attempt(f"r{n}", "", started, time.monotonic() - started, status, body, error, True))
            i += 1
            await asyncio.sleep(0.05)  # the readers' pace: load the storm applies, not a wait

    async def _client(self, n: int, call: Caller) -> None:
        i = 0
        while not self.stop.is_set():
            command_id = f"storm-c{n}-{i}"
            agent = self.agents[(n + i) % len(self.agents)]
            await self.until_acked(f"c{n}", call, agent, command_id, f"storm note {command_id}", stop=self.stop)
            i += 1

    async def until_acked(
        self, client: str, call: Caller, agent: str, command_id: str, content: str, *, stop: asyncio.Event | None
    ) -> bool:
        self.issued[command_id] = (agent, content)
        while True:
            started = time.monotonic()
            status: int | None = None
            body: dict[str, Any] | None = None
            error = ""
            try:
                status, body = await call(agent, content, command_id)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            attempt = Attempt(client, command_id, started, time.monotonic() - started, status, body, error)
            self.attempts.append(attempt)
            if attempt.stored:
                self.acked.setdefault(command_id, attempt.body or {})
                return True
            if stop is not None and stop.is_set():
                return False
            await asyncio.sleep(0.5)  # a client's pause before it retries; ``stop`` or the caller's timeout ends it

    async def settle(self, timeout_s: float = 120.0) -> None:
        """Retry every command id not yet acknowledged until it is (over HTTP, in the body)."""
        missing = [cid for cid in self.issued if cid not in self.acked]
        async with httpx.AsyncClient(base_url=self.url, timeout=CLIENT_TIMEOUT_S) as http, asyncio.timeout(timeout_s):
            call = http_caller(http, header=False)
            for cid in missing:
                agent, content = self.issued[cid]
                await self.until_acked("settle", call, agent, cid, content, stop=None)

    def problems(self, deadline_s: float = CALL_DEADLINE_S) -> list[str]:
        """Every call that hung past its deadline, failed with anything but a clear 503, or
        answered something other than the first outcome of its command id."""
        out = []
        for a in self.attempts:
            if a.seconds > deadline_s:
                out.append(f"{a.client} {a.command_id}: answered after {a.seconds:.1f} s (deadline {deadline_s:.0f} s)")
            if a.status is None:
                out.append(f"{a.client} {a.command_id}: no answer: {a.error}")
            elif a.status == 503:
                error = str((a.body or {}).get("error", ""))
                if not error.startswith("log_unavailable"):
                    out.append(f"{a.client} {a.command_id}: 503 without log_unavailable: {a.body}")
            elif a.read:
                if not a.answered:
                    out.append(f"{a.client} read: HTTP {a.status}: {a.body}")
            elif a.status != 200 or not a.stored:
                out.append(f"{a.client} {a.command_id}: HTTP {a.status}: {a.body}")
            elif a.body is not None and a.body.get("id") != self.acked[a.command_id].get("id"):
                first = self.acked[a.command_id].get("id")
                out.append(f"{a.client} {a.command_id}: answered id {a.body.get('id')}, first {first}")
        return out

    def summary(self) -> str:
        out = []
        for what, read in (("stores", False), ("reads", True)):
            calls = [a for a in self.attempts if a.read == read]
            statuses = dict(Counter(a.status for a in calls))
            slowest = max((a.seconds for a in calls), default=0.0)
            out.append(f"{len(calls)} {what} (HTTP {statuses}, slowest {slowest:.1f} s)")
        return f"{', '.join(out)}; {len(self.acked)} command ids acknowledged"


async def stored_in_log(cfg: KafkaConfig) -> dict[str, list[int]]:
    """Command id -> the ids of the memories its ``memory.stored`` events created, read from
    every partition of the events topic."""
    opener = LazySealing(cfg)  # the events topic is sealed: opened with the deployment's master key
    kafka = KafkaLog(cfg, opener)
    await kafka.start()
    out: dict[str, list[int]] = {}
    try:
        for p in range(cfg.partitions):
            for rec in await kafka.read(p, 0, limit=10_000_000, vectors=False):
                if rec.type == "memory.stored":
                    event = decode(rec.value)
                    out.setdefault(str(event["command_id"]), []).append(int(event["payload"]["id"]))
    finally:
        await kafka.close()
        opener.close()
    return out


def log_problems(storm: Storm, logged: dict[str, list[int]]) -> list[str]:
    """Acknowledged stores missing from the log or stored twice, and storm stores in the log
    under more than one event."""
    out = []
    for cid, body in storm.acked.items():
        ids = logged.get(cid, [])
        if len(ids) != 1:
            out.append(f"{cid}: acknowledged as memory {body.get('id')}, {len(ids)} stored events in the log: {ids}")
        elif str(ids[0]) != str(body.get("id")):
            out.append(f"{cid}: acknowledged as memory {body.get('id')}, the log stored {ids[0]}")
    out += [f"{cid}: {len(ids)} stored events" for cid, ids in logged.items() if len(ids) > 1]
    return out


def rebuilt_digests(kafka_args: list[str], partitions: list[int]) -> dict[str, Any]:
    """``memstream rebuild --kafka`` of ``partitions``: each one's digests, folded from offset 0."""
    import sys

    args = [sys.executable, "-m", "memstream.api.cli", "rebuild", *kafka_args]
    args += [a for p in partitions for a in ("--partition", str(p))]
    done = subprocess.run(args, capture_output=True, timeout=180)
    if done.returncode != 0:
        raise RuntimeError(f"rebuild exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    parts: dict[str, Any] = orjson.loads(done.stdout)["partitions"]
    return parts


async def fill(cfg: KafkaConfig, agents: list[str], count: int, chunk: int = 1000) -> dict[str, int]:
    """Store ``count`` memories spread over ``agents`` by submitting the commands the store
    tool would (with the tests' hash embedding) straight to the commands topic, ``chunk`` at a
    time: long partitions in seconds, decided by the deployment's deciders like any write.
    Returns command id -> the memory id each was stored as."""
    from datetime import UTC, datetime

    from memstream.streams.buses.kafka import KafkaCommandBus
    from memstream.streams.commands import StoreMemory
    from memstream.streams.events import Actor, Embedding, Scope
    from tests.support.embedders import HashEmbedder

    embedder = HashEmbedder()
    bus = KafkaCommandBus(cfg, reply_timeout_s=60)
    await bus.start()
    out: dict[str, int] = {}
    try:
        for first in range(0, count, chunk):
            commands = []
            for i in range(first, min(first + chunk, count)):
                agent, content = agents[i % len(agents)], f"filler note {i} about {agents[i % len(agents)]}"
                commands.append(
                    StoreMemory(
                        command_id=f"fill-{i}",
                        scope=Scope(agent_id=agent),
                        actor=Actor(client_id="filler", agent_id=agent),
                        received_at=datetime.now(UTC),
                        content=content,
                        embedding=Embedding.from_vector(embedder.model_id, embedder.embed([content])[0]),
                    )
                )
            for cmd, committed in zip(commands, await asyncio.gather(*(bus.submit(c) for c in commands)), strict=True):
                assert committed.outcome.result == "applied" and committed.outcome.id is not None, committed
                out[cmd.command_id] = committed.outcome.id
    finally:
        await bus.close()
    return out
