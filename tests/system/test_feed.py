"""The change feed, ``GET /v1/events`` (issue 18, docs/feed.md), through a real SSE client
(httpx + httpx-sse) against a real server on loopback: order and offsets, resume with
Last-Event-ID and ``from``, filters, keep-alive, the cut-off of a subscriber that stops reading
(while writers keep completing), ACL filtering and the 403."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import ServerSentEvent, aconnect_sse

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import SettingsError, load_settings
from tests.support.acl import ACL, TOKENS, write_acl
from tests.support.embedders import HashEmbedder
from tests.support.servers import ServerThread

WAIT = 30.0  # a bound on a test that would otherwise hang, never a timing assertion


def client(server: ServerThread, token: str | None = None, **kwargs: Any) -> httpx.AsyncClient:
    headers = {"x-client-id": "feed-test"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return httpx.AsyncClient(base_url=server.url, headers=headers, timeout=httpx.Timeout(WAIT), **kwargs)


async def store(http: httpx.AsyncClient, agent: str, content: str) -> dict[str, Any]:
    r = await http.post("/v1/tools/store", json={"agent_id": agent, "content": content})
    body: dict[str, Any] = r.json()
    assert r.status_code == 200 and body["result"] == "stored", body
    return body


async def events(
    http: httpx.AsyncClient, n: int, params: Any = None, headers: dict[str, str] | None = None
) -> list[ServerSentEvent]:
    """The first ``n`` messages of a subscription (the writes that produce them must already be
    done, or be started by the caller after ``subscribed``)."""
    out: list[ServerSentEvent] = []
    async with aconnect_sse(http, "GET", "/v1/events", params=params, headers=dict(headers or {})) as source:
        assert source.response.status_code == 200
        assert source.response.headers["content-type"].startswith("text/event-stream")
        async for sse in source.aiter_sse():
            out.append(sse)
            if len(out) == n:
                break
    return out


async def history(http: httpx.AsyncClient, agent: str) -> list[dict[str, Any]]:
    r = await http.post("/v1/tools/history", json={"agent_id": agent})
    return list(r.json()["events"])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    with ServerThread(load_settings(env={}, data_dir=tmp_path / "data", sync="NORMAL", feed_keepalive_s=0.2)) as srv:
        yield srv


@pytest.fixture
def small_buffer_server(tmp_path: Path) -> Iterator[ServerThread]:
    """A subscriber may fall 16 events behind; a send to one that stopped reading waits long."""
    settings = load_settings(
        env={}, data_dir=tmp_path / "data", sync="NORMAL", feed_buffer=16, feed_send_timeout_s=300
    )
    with ServerThread(settings) as srv:
        yield srv


async def test_live_events_arrive_in_log_order_with_their_offsets_as_history_shows_them(server: ServerThread) -> None:
    async with client(server) as http:
        got: list[ServerSentEvent] = []
        async with aconnect_sse(http, "GET", "/v1/events") as source:
            # the headers are sent once the subscription exists: every later write reaches it
            writes = asyncio.gather(*(store(http, f"agent-{i % 3}", f"note number {i}") for i in range(24)))
            async for sse in source.aiter_sse():
                got.append(sse)
                if len(got) == 24:
                    break
            await writes
        offsets = [int(sse.id) for sse in got]
        assert offsets == sorted(offsets) and len(set(offsets)) == 24
        assert offsets == list(range(offsets[0], offsets[0] + 24))  # nothing else was written
        assert all(sse.event == "memory.stored" for sse in got)
        by_offset = {e["offset"]: e for a in range(3) for e in await history(http, f"agent-{a}")}
        for sse in got:
            assert json.loads(sse.data) == by_offset[int(sse.id)]  # exactly what history shows


async def test_resuming_with_last_event_id_loses_nothing_and_repeats_nothing(server: ServerThread) -> None:
    async with client(server) as http:
        for i in range(10):
            await store(http, "resumer", f"before {i}")
        first = await events(http, 4, params={"from": "0"})
        assert [int(e.id) for e in first] == [0, 1, 2, 3]
        for i in range(10):  # written while the subscriber is away
            await store(http, "resumer", f"while away {i}")
        rest = await events(http, 16, headers={"last-event-id": first[-1].id})
        seen = [int(e.id) for e in first + rest]
        assert seen == list(range(20))
        # Last-Event-ID wins over from; the event AT from is the first delivered
        again = await events(http, 1, params={"from": "2"}, headers={"last-event-id": "7"})
        assert again[0].id == "8"
        assert (await events(http, 1, params={"from": "13"}))[0].id == "13"


async def test_filters_by_agent_and_type(server: ServerThread) -> None:
    async with client(server) as http:
        ids = {}
        for agent in ("f-a", "f-b", "f-c"):
            ids[agent] = (await store(http, agent, f"{agent} first"))["id"]
        for agent in ("f-a", "f-b", "f-c"):
            r = await http.post(
                "/v1/tools/update_memory", json={"agent_id": agent, "memory_id": ids[agent], "content": f"{agent} new"}
            )
            assert r.json()["ok"] is not False, r.text
        params = [("from", "0"), ("agent_id", "f-a"), ("agent_id", "f-c"), ("types", "memory.updated")]
        got = await events(http, 2, params=params)
        assert [(json.loads(e.data)["scope"]["agent_id"], e.event) for e in got] == [
            ("f-a", "memory.updated"),
            ("f-c", "memory.updated"),
        ]
        both = await events(http, 2, params={"from": "0", "agent_id": "f-b", "types": "memory.stored, memory.updated"})
        assert [e.event for e in both] == ["memory.stored", "memory.updated"]


async def test_keep_alive_comments_come_while_nothing_happens(server: ServerThread) -> None:
    async with client(server) as http, http.stream("GET", "/v1/events") as response:
        lines = []
        async for line in response.aiter_lines():
            lines.append(line)
            if lines.count(": keep-alive") == 2:
                break
        assert all(line in (": keep-alive", "") for line in lines)


async def test_bad_positions_and_agent_ids_are_refused_before_streaming(server: ServerThread) -> None:
    async with client(server) as http:
        for params, headers in (
            ({"from": "-1"}, {}),
            ({"from": "ten"}, {}),
            ({"from": str(2**64)}, {}),
            ({}, {"last-event-id": "1.5"}),
            ({"agent_id": ""}, {}),
        ):
            r = await http.get("/v1/events", params=params, headers=headers)
            assert r.status_code == 400, (params, headers, r.text)
            assert r.headers["content-type"] == "application/json" and r.json()["ok"] is False


async def test_a_subscriber_that_stops_reading_is_cut_off_and_writers_keep_completing(
    small_buffer_server: ServerThread,
) -> None:
    server = small_buffer_server
    feed = server.app.state.engine.feed  # the server runs in this process: its subscriber count is visible
    async with client(server) as writer, client(server) as reader:
        async with aconnect_sse(reader, "GET", "/v1/events", params={"agent_id": "busy"}) as source:
            stream = source.aiter_sse()
            assert feed.subscribers == 1
            # The subscriber reads nothing while 8 writers store until the server has cut it off
            # (past its buffer of 16 and what the sockets hold): every write completes.
            big = "x" * 8000

            async def write(w: int) -> int:
                done = 0
                while feed.subscribers and done < 1000:
                    await store(writer, "busy", f"writer {w} note {done} {big}")
                    done += 1
                return done

            written = sum(await asyncio.gather(*(write(w) for w in range(8))))
            assert feed.subscribers == 0, "never cut off"
            got = [sse async for sse in stream]  # now it reads: what was queued, the cut-off, the end
        delivered = [int(e.id) for e in got if e.event == "memory.stored"]
        assert got[-1].event == "cutoff" and all(e.event == "memory.stored" for e in got[:-1])
        assert delivered == list(range(len(delivered)))  # the log holds only these writes
        assert 16 < len(delivered) < written
        cut = json.loads(got[-1].data)
        assert cut["resume_from"] == str(delivered[-1] + 1) and "behind" in cut["reason"]
        # resuming where it was cut off gives the rest: nothing lost, nothing repeated
        rest = await events(writer, written - len(delivered), headers={"last-event-id": got[-2].id})
        assert [int(e.id) for e in rest] == list(range(len(delivered), written))


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    root = tmp_path_factory.mktemp("feed-acl")
    settings = load_settings(
        env={}, data_dir=root / "data", sync="NORMAL", acl_file=write_acl(root / "acl.json", ACL), feed_keepalive_s=0.2
    )
    with ServerThread(settings) as srv:
        yield srv


async def test_acl_a_client_sees_only_the_agents_it_may_read(acl_server: ServerThread) -> None:
    async with client(acl_server, TOKENS["admin"]) as admin, client(acl_server, TOKENS["r-alice"]) as alice:
        for i in range(3):
            await store(admin, "bob", f"bob {i}")
            await store(admin, "alice", f"alice {i}")
        mine = await events(alice, 3, params={"from": "0"})
        assert [json.loads(e.data)["scope"]["agent_id"] for e in mine] == ["alice"] * 3
        named = await events(alice, 3, params={"from": "0", "agent_id": "alice"})
        assert [e.id for e in named] == [e.id for e in mine]
        everyone = await events(admin, 6, params={"from": "0"})
        assert {json.loads(e.data)["scope"]["agent_id"] for e in everyone} == {"alice", "bob"}


async def test_acl_naming_an_agent_the_client_may_not_read_is_a_403_before_streaming(acl_server: ServerThread) -> None:
    async with client(acl_server, TOKENS["r-alice"]) as alice, client(acl_server) as nobody:
        r = await alice.get("/v1/events", params=[("agent_id", "alice"), ("agent_id", "bob")])
        assert r.status_code == 403
        body = r.json()
        assert body["ok"] is False and body["error"] == "permission_denied"
        assert body["agent_id"] == "bob" and body["client_id"] == "r-alice" and body["required"] == "read"
        r = await nobody.get("/v1/events")
        assert r.status_code == 401


async def test_memstream_tail_follow_still_prints_new_events(server: ServerThread) -> None:
    """``memstream tail -f`` reads the log file itself, beside the feed: new events appear as lines."""
    env = {**os.environ, "MEMSTREAM_DATA_DIR": str(server.app.state.engine.settings.data_dir)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memstream.api.cli", "tail", "-f", "--from", "0",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        async with client(server) as http:
            for i in range(3):
                await store(http, "tailed", f"tailed {i}")
        assert proc.stdout is not None
        async with asyncio.timeout(WAIT):
            lines = [json.loads(await proc.stdout.readline()) for _ in range(3)]
        assert [line["change"]["content"] for line in lines] == [f"tailed {i}" for i in range(3)]
    finally:
        proc.terminate()
        await proc.wait()


def test_the_read_interval_is_a_setting(tmp_path: Path) -> None:
    """MEMSTREAM_FEED_INTERVAL_SECONDS reaches the engine's fan-out as the read interval's floor
    (above the rule's cap: the interval, fixed); out of range is refused."""
    env = {"MEMSTREAM_FEED_INTERVAL_SECONDS": "0.2"}
    settings = load_settings(env=env, data_dir=tmp_path / "data", sync="NORMAL")
    pacer = EmbeddedEngine(settings, embedder=HashEmbedder()).feed.pacer
    assert pacer.floor == 0.2 and pacer.interval == 0.2
    default = load_settings(env={}, data_dir=tmp_path / "d2")
    assert default.feed_interval_s == 0.025
    assert EmbeddedEngine(default, embedder=HashEmbedder()).feed.pacer.floor == 0.025
    with pytest.raises(SettingsError, match="MEMSTREAM_FEED_INTERVAL_SECONDS"):
        load_settings(env={"MEMSTREAM_FEED_INTERVAL_SECONDS": "5"}, data_dir=tmp_path / "d3")
