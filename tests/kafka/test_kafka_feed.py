"""The change feed in Kafka mode (issue 18, docs/feed.md): ``GET /v1/events`` on the router, read
from the events topic, through a real SSE client; the cut-off of a subscriber that stops reading,
on a stream over the real broker; ACL filtering and the 403."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import ServerSentEvent, aconnect_sse

from memstream.api.faces.feed import FeedRequest, PositionError
from memstream.api.kafka.router.feed import KafkaFeed, encode_position, parse_position
from memstream.api.services.feed import FeedCutOff
from memstream.streams.deciders.sealing import LazySealing
from memstream.streams.log.kafka import KafkaConfig
from memstream.streams.log.port import partition_for
from tests.support.acl import ACL, TOKENS, write_acl
from tests.support.broker import deployment_config, drop_topics, require_broker, stop_processes
from tests.support.deployment import until_every_partition_owned
from tests.support.servers import free_port

pytestmark = pytest.mark.kafka

PARTITIONS = 4
PROCS = Path(__file__).resolve().parents[1] / "procs"
WAIT = 60.0  # bounds a test that would otherwise hang; never a timing assertion


class Router:
    def __init__(self, cfg: KafkaConfig, url: str) -> None:
        self.cfg = cfg
        self.url = url

    def client(self, who: str = "admin") -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url, headers={"authorization": f"Bearer {TOKENS[who]}"}, timeout=httpx.Timeout(WAIT)
        )


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    """One worker and an ACL-mode router of this module's own deployment."""
    asyncio.run(require_broker())
    root = tmp_path_factory.mktemp("kafka-feed")
    cfg = deployment_config(PARTITIONS)
    assert partition_for("alice", PARTITIONS) != partition_for("bob", PARTITIONS)
    args = ["--kafka", cfg.bootstrap, "--prefix", cfg.prefix, "--partitions", str(PARTITIONS)]
    args += ["--replication", str(cfg.replication)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSTREAM_KAFKA_", "MEMSTREAM_ACL"))}
    env["MEMSTREAM_DATA_DIR"] = str(root / "no-data")
    port = free_port()
    procs = [
        subprocess.Popen([sys.executable, str(PROCS / "kafka_worker.py"), *args], env=env,
                         stdout=subprocess.DEVNULL, stderr=(root / "worker.log").open("w")),
        subprocess.Popen(
            [sys.executable, "-m", "memstream.api.cli", "--log-level", "WARNING", "serve", *args, "--port", str(port)],
            env={**env, "MEMSTREAM_ACL_FILE": str(write_acl(root / "acl.json", ACL)),
                 "MEMSTREAM_FEED_KEEPALIVE_SECONDS": "0.2"},
            stdout=subprocess.DEVNULL, stderr=(root / "router.log").open("w"),
        ),
    ]  # fmt: skip
    r = Router(cfg, f"http://127.0.0.1:{port}")
    admin = {"authorization": f"Bearer {TOKENS['admin']}"}
    try:
        asyncio.run(until_every_partition_owned(r.url, PARTITIONS, headers=admin, procs=procs, log=root / "router.log"))
        yield r
    finally:
        stop_processes(procs)
        asyncio.run(drop_topics(cfg.prefix))


async def store(http: httpx.AsyncClient, agent: str, content: str) -> None:
    r = await http.post("/v1/tools/store", json={"agent_id": agent, "content": content})
    assert r.status_code == 200 and r.json()["result"] == "stored", r.text


async def events(http: httpx.AsyncClient, n: int, params: Any = None, last: str | None = None) -> list[ServerSentEvent]:
    headers = {} if last is None else {"last-event-id": last}
    out: list[ServerSentEvent] = []
    async with aconnect_sse(http, "GET", "/v1/events", params=params, headers=headers) as source:
        assert source.response.status_code == 200, await source.response.aread()
        async for sse in source.aiter_sse():
            out.append(sse)
            if len(out) == n:
                break
    return out


def agent_of(sse: ServerSentEvent) -> str:
    return str(json.loads(sse.data)["scope"]["agent_id"])


def test_positions_round_trip_and_bad_ones_are_refused() -> None:
    assert parse_position(encode_position({3: 18, 0: 2}), 4, "id") == {0: 2, 3: 18}
    assert parse_position("7", 3, "from") == {0: 7, 1: 7, 2: 7}
    for bad in ("4:1", "0:1,0:2", "x", "-1", "1:-1", "1:1_0", "", "1:"):
        with pytest.raises(PositionError):
            parse_position(bad, 4, "from")


async def test_events_arrive_per_partition_in_order_as_history_shows_them(router: Router) -> None:
    async with router.client() as http:
        got: list[ServerSentEvent] = []
        params = [("agent_id", "alice"), ("agent_id", "bob")]
        async with aconnect_sse(http, "GET", "/v1/events", params=params) as source:
            assert source.response.status_code == 200
            writes = asyncio.gather(*(store(http, ("alice", "bob")[i % 2], f"ordered {i}") for i in range(12)))
            async for sse in source.aiter_sse():
                got.append(sse)
                if len(got) == 12:
                    break
            await writes
        for agent in ("alice", "bob"):
            mine = [json.loads(e.data) for e in got if agent_of(e) == agent]
            offsets = [e["offset"] for e in mine]
            assert len(mine) == 6 and offsets == list(range(offsets[0], offsets[0] + 6))  # partition order
            r = await http.post("/v1/tools/history", json={"agent_id": agent})
            history = {e["offset"]: e for e in r.json()["events"]}
            assert all(history[e["offset"]] == e for e in mine)  # exactly what history shows
        for sse in got:  # an id is the cursor just after its event
            data = json.loads(sse.data)
            assert parse_position(sse.id, PARTITIONS, "id")[data["partition"]] == data["offset"] + 1


async def test_resuming_with_last_event_id_loses_nothing_and_repeats_nothing(router: Router) -> None:
    async with router.client() as http:
        for i in range(5):
            await store(http, "carol", f"carol before {i}")
        first = await events(http, 3, params={"agent_id": "carol", "from": "0"})
        for i in range(5):
            await store(http, "carol", f"carol while away {i}")
        rest = await events(http, 7, params={"agent_id": "carol"}, last=first[-1].id)
        contents = [json.loads(e.data)["change"]["content"] for e in first + rest]
        assert contents == [f"carol before {i}" for i in range(5)] + [f"carol while away {i}" for i in range(5)]
        r = await http.get("/v1/events", params={"from": "9:9"})
        assert r.status_code == 400 and r.json()["ok"] is False


async def test_acl_a_client_sees_only_the_agents_it_may_read(router: Router) -> None:
    async with router.client() as admin, router.client("r-alice") as alice:
        for i in range(2):
            await store(admin, "bob", f"bob acl {i}")
            await store(admin, "alice", f"alice acl {i}")
        mine = await events(alice, 4, params={"from": "0"})
        assert {agent_of(e) for e in mine} == {"alice"}
        r = await alice.get("/v1/events", params={"agent_id": "bob"})
        assert r.status_code == 403 and r.json()["error"] == "permission_denied" and r.json()["agent_id"] == "bob"
    async with httpx.AsyncClient(base_url=router.url) as nobody:
        assert (await nobody.get("/v1/events")).status_code == 401


async def test_keep_alive_comments_come_while_nothing_happens(router: Router) -> None:
    async with router.client() as http, http.stream("GET", "/v1/events", params={"agent_id": "quiet"}) as response:
        assert response.status_code == 200
        lines = []
        async for line in response.aiter_lines():
            lines.append(line)
            if lines.count(": keep-alive") == 2:
                break
        assert set(lines) <= {": keep-alive", ""}


def _contents(items: list[Any]) -> list[str]:
    return [json.loads(i.data)["change"]["content"] for i in items]


async def _read_until_cut(stream: Any) -> tuple[list[Any], FeedCutOff]:
    """Everything a stream hands out, then the cut-off that ends it (closed either way)."""
    got: list[Any] = []
    try:
        async with asyncio.timeout(WAIT):
            with pytest.raises(FeedCutOff) as cut:
                while True:
                    batch = await stream.next_batch()
                    assert batch, "the stream ended without a cut-off"
                    got.extend(batch)
    finally:
        stream.close()
    return got, cut.value


async def _resumed(source: KafkaFeed, agent: str, after: str, n: int) -> list[str]:
    """The contents of the first ``n`` events of ``agent`` after position ``after``."""
    again = await source.open(FeedRequest(frozenset({agent}), None, None, after, None, buffer=100))
    rest: list[Any] = []
    try:
        async with asyncio.timeout(WAIT):
            while len(rest) < n:
                rest.extend(await again.next_batch())
    finally:
        again.close()
    return _contents(rest)


async def test_a_stream_that_is_not_read_is_cut_off_with_its_resume_position(
    router: Router, request: pytest.FixtureRequest
) -> None:
    """The router's stream over the real broker, driven in process: it reads ahead into its
    buffer of 3 while nobody takes anything, then is cut off; resuming there gives the rest."""
    source = KafkaFeed(router.cfg)
    request.addfinalizer(source.close)  # its key store (opened at the first sealed event)
    wanted = FeedRequest(frozenset({"dave"}), None, None, None, None, buffer=3)
    stream = await source.open(wanted)
    async with router.client() as http:
        for i in range(8):
            await store(http, "dave", f"dave {i}")
    async with asyncio.timeout(WAIT):
        while stream.cut is None:  # nobody reads: it fills its buffer and is cut off
            await asyncio.sleep(0.05)
    got, cut = await _read_until_cut(stream)
    assert _contents(got) == ["dave 0", "dave 1", "dave 2"]
    assert cut.position == got[-1].position
    assert await _resumed(source, "dave", cut.position, 5) == [f"dave {i}" for i in range(3, 8)]


class FailingOnce:
    """Opens as the router does, except that the ``fail_at``-th record it is asked for fails
    once (a key store that did not answer, say)."""

    def __init__(self, inner: LazySealing, fail_at: int) -> None:
        self.inner = inner
        self.seen = 0
        self.fail_at = fail_at

    def open(self, partition: int, value: bytes, vector: bytes | None) -> tuple[bytes, bytes | None]:
        self.seen += 1
        if self.seen == self.fail_at:
            raise RuntimeError("the key store did not answer")
        return self.inner.open(partition, value, vector)


async def test_a_record_that_cannot_be_read_cuts_the_stream_off_where_it_is(
    router: Router, request: pytest.FixtureRequest
) -> None:
    """A failed read is a cut-off at the record, with the reason, never a plain end (which a
    subscriber takes for the server closing): resuming there reads that record again."""
    sealing = LazySealing(router.cfg)
    request.addfinalizer(sealing.close)
    source = KafkaFeed(router.cfg, opener=FailingOnce(sealing, fail_at=3))
    stream = await source.open(FeedRequest(frozenset({"erin"}), None, None, None, None, buffer=100))
    async with router.client() as http:
        for i in range(5):
            await store(http, "erin", f"erin {i}")
    got, cut = await _read_until_cut(stream)
    assert "could not be read" in cut.reason and "did not answer" in cut.reason
    assert _contents(got) == ["erin 0", "erin 1"]
    assert cut.position == got[-1].position
    assert await _resumed(source, "erin", cut.position, 3) == [f"erin {i}" for i in range(2, 5)]
