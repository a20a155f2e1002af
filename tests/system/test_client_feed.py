"""The change feed through memstream.client (``client.events``) against a real server on
loopback: typed events in log order, filters, resumption after a dropped connection (a relay
cuts it) and after the server cuts a subscriber off that stopped reading: every event once,
sync and async."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstream.api.services.settings import load_settings
from memstream.client import AsyncClient, Client, Invalid, PermissionDenied, Unavailable
from memstream.client.feed import FeedEvent
from tests.support.acl import ACL, TOKENS, write_acl
from tests.support.embedders import HashEmbedder
from tests.support.proxies import TcpRelay
from tests.support.servers import ServerThread

WAIT = 60.0  # a bound on a test that would otherwise hang, never a timing assertion


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    settings = load_settings(env={}, data_dir=tmp_path / "data", sync="NORMAL", feed_keepalive_s=0.2)
    with ServerThread(settings) as srv:
        yield srv


def test_events_in_log_order_typed_and_filtered(server: ServerThread) -> None:
    with Client(server.url, timeout=WAIT) as memory:
        a = memory.store("ann", "Ann plants tulips")
        memory.store("ben", "Ben paints the fence")
        assert a.id is not None
        memory.update_memory(a.id, "Ann plants tulips and daffodils")
        with memory.events(start=0) as stream:
            got = [next(stream) for _ in range(3)]
        assert all(isinstance(e, FeedEvent) for e in got)
        assert [e.position for e in got] == ["0", "1", "2"]
        assert [e.offset for e in got] == [0, 1, 2]
        assert [(e.type, e.agent_id) for e in got] == [
            ("memory.stored", "ann"),
            ("memory.stored", "ben"),
            ("memory.updated", "ann"),
        ]
        # the same entries history gives
        history = memory.history(agent_id="ann").events
        assert [e.model_dump(exclude={"position"}) for e in got if e.agent_id == "ann"] == [
            h.model_dump() for h in history
        ]
        with memory.events("ann", types=["memory.updated"], start=0) as stream:
            only = next(stream)
        assert (only.type, only.position) == ("memory.updated", "2")
        with memory.events(["ann", "ben"], types="memory.stored", after="0") as stream:
            assert next(stream).position == "1"
        with pytest.raises(Invalid) as info, memory.events(start="not-a-position") as stream:
            next(stream)
        assert info.value.status == 400


def test_a_dropped_connection_resumes_after_the_last_event(server: ServerThread) -> None:
    with TcpRelay(server.port) as relay, Client(relay.url, timeout=WAIT, backoff=0.05) as memory:
        for i in range(3):
            memory.store("cara", f"Cara's note {i}")
        with memory.events("cara", start=0) as stream:
            first = [next(stream) for _ in range(2)]
            relay.cut()  # both connections (this stream's and the writes') drop mid-stream
            for i in range(3, 6):
                memory.store("cara", f"Cara's note {i}")
            rest = [next(stream) for _ in range(4)]
        positions = [int(e.position) for e in first + rest]
        assert positions == list(range(6))  # nothing lost, nothing repeated
        assert stream.cursor.connections >= 2
        opened = [r.lower() for r in relay.sent if r.startswith(b"GET /v1/events")]
        assert len(opened) == stream.cursor.connections >= 2
        assert b"last-event-id" not in opened[0] and b"from=0" in opened[0]
        # resumed after the last event it had delivered when the drop surfaced
        assert all(b"last-event-id: " in r and b"from=" not in r for r in opened[1:])


def socket_buffer_max() -> int:
    """The most a TCP send buffer grows to on this machine (Linux), else 4 MiB."""
    try:
        return int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    except (OSError, ValueError, IndexError):
        return 2**22


def test_a_subscriber_cut_off_for_falling_behind_resumes_where_it_was_cut(tmp_path: Path) -> None:
    settings = load_settings(
        env={}, data_dir=tmp_path / "data", sync="NORMAL", feed_buffer=16, feed_send_timeout_s=300
    )
    with (
        ServerThread(settings) as server,
        Client(server.url, timeout=WAIT) as writer,
        Client(server.url, timeout=WAIT) as reader,
    ):
        with reader.events("busy") as stream:  # live: fanned out to at once, so it can fall behind
            arrived: list[FeedEvent] = []
            waiting = threading.Thread(target=lambda: arrived.append(next(stream)))
            waiting.start()
            for i in range(1000):  # until the subscription delivers: then it is live
                writer.store("busy", f"a note to see the feed is live {i}")
                if arrived:
                    break
            waiting.join()
            # It stops reading while far more is written than its buffer (16 events) and what
            # the sockets can hold: the server's send buffer grows to tcp_wmem's maximum.
            big = "x" * 15_000
            notes = (socket_buffer_max() + 2**21) // len(big) + 1
            last = None
            for i in range(notes):
                stored = writer.store("busy", f"note {i} {big}")  # writers are never held up
                assert stored.stored
            end = writer.history(agent_id="busy", since_offset=0, limit=2000).events[-1].offset
            got = list(arrived)
            while int(got[-1].position) < end:
                got.append(next(stream))
            last = got[-1]
        positions = [int(e.position) for e in got]
        assert positions == list(range(positions[0], end + 1))  # nothing lost, nothing repeated
        assert last is not None and last.change["content"].startswith(f"note {notes - 1} ")
        assert stream.cursor.cutoffs >= 1 and stream.cursor.connections == stream.cursor.cutoffs + 1


async def test_async_events_live_and_resumable(server: ServerThread) -> None:
    async with asyncio.timeout(WAIT), AsyncClient(server.url) as memory:
        await memory.store("dan", "Dan fixes bikes")
        stream = memory.events("dan", start=0)
        try:
            first = await stream.__anext__()
            assert (first.position, first.type) == ("0", "memory.stored")
            later = await memory.store("dan", "Dan fixes bikes and cars")
            assert later.id is not None
            second = await stream.__anext__()
            assert second.change["id"] == later.id and second.position == "1"
        finally:
            await stream.aclose()
        async with memory.events(after=first.position) as again:
            assert (await again.__anext__()).position == "1"
        seen = []
        async with memory.events("dan", start=0) as stream2:
            async for event in stream2:
                seen.append(event.position)
                if len(seen) == 2:
                    break
        assert seen == ["0", "1"]


@pytest.fixture
def acl_server(tmp_path: Path) -> Iterator[ServerThread]:
    settings = load_settings(
        env={}, data_dir=tmp_path / "data", sync="NORMAL", acl_file=write_acl(tmp_path / "acl.json", ACL)
    )
    with ServerThread(settings) as srv:
        yield srv


def test_acl_feed_shows_only_readable_agents(acl_server: ServerThread) -> None:
    with Client(acl_server.url, TOKENS["admin"], timeout=WAIT) as admin:
        admin.store("bob", "bob's secret")
        admin.store("alice", "alice's note")
    with Client(acl_server.url, TOKENS["r-alice"], timeout=WAIT) as reader:
        with reader.events(start=0) as stream:
            event = next(stream)
        assert (event.agent_id, event.position) == ("alice", "1")
        with pytest.raises(PermissionDenied) as info, reader.events("bob", start=0) as denied:
            next(denied)
        assert info.value.status == 403


def test_local_feed_sync(tmp_path: Path) -> None:
    with Client.local(tmp_path / "data", embedder=HashEmbedder(), settings={"sync": "NORMAL"}) as memory:
        first = memory.store("gil", "Gil tunes pianos")
        memory.store("hal", "Hal repairs clocks")
        with memory.events("gil", start=0) as stream:
            event = next(stream)
            assert (event.position, event.type, event.change["id"]) == ("0", "memory.stored", first.id)
            assert first.id is not None
            memory.update_memory(first.id, "Gil tunes pianos and organs")  # live, in process
            assert next(stream).type == "memory.updated"
        with pytest.raises(Invalid), memory.events(start="soon") as bad:
            next(bad)


async def test_local_feed_async_resumes_after_a_cut_off(tmp_path: Path) -> None:
    small = {"sync": "NORMAL", "feed_buffer": 4}
    memory = AsyncClient.local(tmp_path / "data", embedder=HashEmbedder(), settings=small)
    async with asyncio.timeout(WAIT), memory:
        await memory.store("ida", "Ida note 0")
        async with memory.events("ida") as stream:  # live
            waiting = asyncio.ensure_future(stream.__anext__())
            await memory.store("ida", "Ida note 1")
            first = await waiting
            for i in range(2, 20):  # far past its buffer (4) while it reads nothing
                await memory.store("ida", f"Ida note {i}")
            got = [first] + [await stream.__anext__() for _ in range(18)]
        assert [e.change["content"] for e in got] == [f"Ida note {i}" for i in range(1, 20)]
        assert [int(e.position) for e in got] == list(range(1, 20))
        assert stream.cursor.cutoffs >= 1 and stream.cursor.connections == stream.cursor.cutoffs + 1


async def test_without_reconnect_a_cut_off_ends_the_iteration_where_it_stood(tmp_path: Path) -> None:
    small = {"sync": "NORMAL", "feed_buffer": 4}
    memory = AsyncClient.local(tmp_path / "data", embedder=HashEmbedder(), settings=small)
    async with asyncio.timeout(WAIT), memory:
        async with memory.events("jo", reconnect=False) as stream:
            waiting = asyncio.ensure_future(stream.__anext__())
            await memory.store("jo", "Jo note 0")
            first = await waiting
            for i in range(1, 12):
                await memory.store("jo", f"Jo note {i}")
            rest = [event async for event in stream]  # what was queued, then the end
        positions = [int(e.position) for e in [first, *rest]]
        assert positions == list(range(positions[0], positions[0] + len(positions))) and len(positions) < 12
        assert stream.cursor.cutoffs == 1 and stream.cursor.at == str(positions[-1] + 1)
        async with memory.events("jo", start=stream.cursor.at) as resumed:
            following = [await resumed.__anext__() for _ in range(12 - len(positions))]
        assert [e.change["content"] for e in following][-1] == "Jo note 11"


def test_without_reconnect_a_drop_raises_unavailable(server: ServerThread) -> None:
    with TcpRelay(server.port) as relay, Client(relay.url, timeout=WAIT) as memory:
        memory.store("kim", "Kim's note")
        with memory.events("kim", start=0, reconnect=False) as stream:
            assert next(stream).position == "0"
            relay.cut()
            with pytest.raises(Unavailable):
                next(stream)
