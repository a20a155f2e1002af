"""Broker faults in Kafka mode: the broker crashed (SIGKILL) and restarted, down past the
router's deadline, frozen (SIGSTOP for 30 s), and restarted while a worker catches up, each
during a write storm through a router in front of two workers. Whatever the fault, no
acknowledged write is lost or applied twice, every call is answered within its deadline (a
result, or a clear 503), the same worker and router processes serve new writes and reads
afterwards, and a rebuild from the log gives the workers' live digests. The faults hit a
broker of the module's own (tests/support/broker_faults.py), so the other Kafka tests never
see them. What a client sees: docs/reliability.md, "Broker faults"."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator

import httpx
import orjson
import pytest

from memstream.api.kafka.router.app import Owners, Router
from memstream.streams.log.kafka import KafkaConfig, KafkaLog
from tests.support.broker import require_broker
from tests.support.broker_faults import (
    CALL_DEADLINE_S,
    LocalBroker,
    Storm,
    fill,
    log_problems,
    rebuilt_digests,
    stored_in_log,
)
from tests.support.deployment import Deployment
from tests.support.digests import live_digests
from tests.support.faces import HttpFace, McpFace

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 4
AGENTS = ["ada", "bob", "cy", "dee", "eve", "fay"]
FILL = 16_000  # memories stored before the catch-up test's fault, over the agents' partitions
RECOVERED = 5  # acknowledged stores each storm client needs after the fault to count as recovered


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A broker of this module's own, on free ports, purged at the end. It needs what the
    shared broker needs (Java, the cached jars), so it is skipped when that one is."""
    asyncio.run(require_broker())
    b = LocalBroker(tmp_path_factory.mktemp("kafka-faults"))
    b.start()
    try:
        yield b
    finally:
        b.purge()


@pytest.fixture
def faulty(broker: LocalBroker) -> Iterator[Deployment]:
    """Two workers and a router on the module's broker, under a prefix of the test's own."""
    d = Deployment(broker.config(f"memstream-faults-{uuid.uuid4().hex[:8]}", PARTITIONS))
    try:
        yield d
    finally:
        d.stop()


async def start(d: Deployment) -> None:
    d.worker()
    d.worker()
    d.router()
    await d.ready()


async def acked_by_each(storm: Storm, since: float, count: int, timeout_s: float) -> None:
    """Wait until every storm client had ``count`` stores acknowledged after ``since``."""
    async with asyncio.timeout(timeout_s):
        while True:
            per_client = {f"c{n}": 0 for n in range(storm.clients)}
            for a in storm.attempts:
                if a.stored and a.started >= since and a.client in per_client:
                    per_client[a.client] += 1
            if min(per_client.values()) >= count:
                return
            await asyncio.sleep(0.2)


async def through_fault(d: Deployment, fault: Callable[[], Awaitable[None]], storm: Storm | None = None) -> Storm:
    """Run a storm, inject ``fault`` once every client is writing, wait until every client
    is acknowledged again, stop the storm and retry what was never acknowledged."""
    storm = storm or Storm(d.url, AGENTS)
    running = asyncio.create_task(storm.run())
    try:
        await acked_by_each(storm, 0.0, 3, timeout_s=60)
        await fault()
        await acked_by_each(storm, time.monotonic(), RECOVERED, timeout_s=150)
    finally:
        storm.stop.set()
        await running
    await storm.settle()
    print(f"\n{storm.summary()}")
    return storm


async def check_after(d: Deployment, storm: Storm, killed: tuple[object, ...] = ()) -> None:
    """The rules every fault is held to (see the module docstring); ``killed``: the processes
    the test itself killed."""
    assert storm.problems() == [], storm.summary()
    assert all(p.poll() is None for p in d.procs if p not in killed), "a worker or the router exited"
    # the same processes take new writes and answer reads, on both faces
    for face in (HttpFace(d.url), McpFace(d.url)):
        try:
            async with asyncio.timeout(CALL_DEADLINE_S):
                stored = await face.call("store", {"agent_id": "ada", "content": f"after the fault, over {face.name}"})
                assert stored["result"] == "stored", stored
                listed = await face.call("list_memories", {"agent_id": "ada", "limit": 200})
                assert stored["id"] in [m["id"] for m in listed["memories"]]
        finally:
            await face.close()
    logged = await stored_in_log(d.cfg)
    assert log_problems(storm, logged) == []
    live = await live_digests(d.cfg)
    busy = sorted(p for p, v in live.items() if v["offset"] >= 0)
    rebuilt = await asyncio.to_thread(rebuilt_digests, d.kafka_args, busy)
    for p in busy:
        assert rebuilt[str(p)] == live[p], f"partition {p}"


async def test_a_worker_held_by_the_cluster_gets_a_503_at_the_routers_deadline() -> None:
    """A worker whose write waits on a dead or frozen broker holds the forwarded request open:
    the router answers 503 at its own deadline, not whenever its HTTP client gives up."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # read the request, never answer

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    router = Router(KafkaConfig(partitions=1), deadline_s=1.0)
    router.owners.urls[0] = f"http://127.0.0.1:{port}"
    try:
        async with asyncio.timeout(20):  # the HTTP client's own limit is 60 s
            status, body = await router.post(0, "/v1/tools/store", b"{}", {"content-type": "application/json"})
        assert status == 503 and orjson.loads(body)["error"].startswith("log_unavailable"), body
    finally:
        await router.close()
        for w in held:
            w.close()
        server.close()
        await server.wait_closed()


async def test_broker_sigkill_during_a_write_storm_then_restart(broker: LocalBroker, faulty: Deployment) -> None:
    await start(faulty)
    # Idempotency-Key is the HTTP spelling of a command id in Kafka mode too: a retry is
    # answered with the first outcome and appends nothing (the storm's retries rely on it).
    async with httpx.AsyncClient(base_url=faulty.url, timeout=CALL_DEADLINE_S) as client:
        args = {"agent_id": "eve", "content": "stored once, whatever the retries"}
        key = {"idempotency-key": "retried-key"}
        first = (await client.post("/v1/tools/store", json=args, headers=key)).json()
        again = (await client.post("/v1/tools/store", json=args, headers=key)).json()
    assert first["result"] == "stored" and again == first
    assert (await stored_in_log(faulty.cfg)).get("retried-key") == [int(first["id"])]

    async def crash_and_restart() -> None:
        await asyncio.to_thread(broker.kill)
        await asyncio.sleep(5)  # the fault itself: the storm goes on against no broker
        await asyncio.to_thread(broker.start)

    storm = await through_fault(faulty, crash_and_restart)
    await check_after(faulty, storm)


async def test_broker_down_past_the_routers_deadline(broker: LocalBroker, faulty: Deployment) -> None:
    """Longer than the router's forwarding deadline: stores sent meanwhile get a clear 503 at
    the deadline, and their retries under the same command ids land once."""
    await start(faulty)

    async def long_crash() -> None:
        await asyncio.to_thread(broker.kill)
        await asyncio.sleep(CALL_DEADLINE_S + 5)  # the fault itself: an outage past the router's deadline
        await asyncio.to_thread(broker.start)

    storm = await through_fault(faulty, long_crash)
    assert any(a.status == 503 and not a.read for a in storm.attempts), storm.summary()
    await check_after(faulty, storm)


async def test_broker_frozen_for_30_s(broker: LocalBroker, faulty: Deployment) -> None:
    await start(faulty)

    async def freeze() -> None:
        await asyncio.to_thread(broker.pause)
        try:
            await asyncio.sleep(30)  # the fault itself: the 30 s freeze
        finally:
            await asyncio.to_thread(broker.resume)

    storm = await through_fault(faulty, freeze)
    await check_after(faulty, storm)


async def test_broker_restart_while_a_worker_catches_up(broker: LocalBroker, faulty: Deployment) -> None:
    await start(faulty)
    # long partitions first: a worker gaining one folds it from offset 0 (no checkpoint yet)
    filled = await fill(faulty.cfg, AGENTS, FILL)
    owners = Owners(faulty.cfg)
    await owners.start()
    try:
        async with asyncio.timeout(30):
            while len(set(owners.urls.values())) < 2:  # both workers' announcements read
                await owners.wait_change(0.2)
        known = set(owners.urls.values())
        killed = faulty.workers[0]

        async def restart_worker_then_broker() -> None:
            kafka = KafkaLog(faulty.cfg)
            await kafka.start()
            try:
                ends = await kafka.end_offsets()
            finally:
                await kafka.close()
            killed.kill()  # SIGKILL: its partitions move to the survivor and the newcomer
            killed.wait(timeout=30)
            faulty.worker()
            async with asyncio.timeout(60):
                while not set(owners.urls.values()) - known:
                    await owners.wait_change(0.05)
            # the newcomer announced its partitions: it folds them from offset 0 now
            await asyncio.to_thread(broker.kill)
            newcomer = next(iter(set(owners.urls.values()) - known))
            async with httpx.AsyncClient(timeout=5) as client:
                folded = (await client.get(f"{newcomer}/health")).json()["partitions"]
            behind = {p: f"{int(off) + 1}/{ends[int(p)]}+" for p, off in folded.items()}
            print(f"\nthe newcomer's partitions when the broker died (events folded / in the log): {behind}")
            await asyncio.sleep(3)  # the fault itself: the broker stays down while the newcomer folds
            await asyncio.to_thread(broker.start)

        storm = await through_fault(faulty, restart_worker_then_broker)
    finally:
        await owners.close()
    storm.acked.update({cid: {"result": "stored", "id": mid} for cid, mid in filled.items()})
    await check_after(faulty, storm, killed=(killed,))
