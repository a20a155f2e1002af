"""The change feed's fan-out (api/services/feed.py) over an in-memory log: order, filters, the
seam between catching up and live delivery, cut-off, and the pure helpers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import orjson
import pytest

from memstream.api.services.feed import Feed, FeedCutOff, FeedFilter, FeedItem, parse_types, render
from memstream.streams.log.port import LogRecord

AGENTS = ("a1", "a2", "a3")
TYPES = ("memory.stored", "memory.updated")


class ListLog:
    """The feed's view of a log, in memory: offsets are list indexes."""

    def __init__(self) -> None:
        self.records: list[LogRecord] = []
        self.reads = 0

    def append(self, agent: str, type_: str = "memory.stored") -> int:
        offset = len(self.records)
        value = orjson.dumps(
            {
                "id": f"e{offset}",
                "type": type_,
                "occurred_at": "2026-01-01T00:00:00Z",
                "actor": {"client_id": "c"},
                "scope": {"agent_id": agent},
                "command_id": f"c{offset}",
                "payload": {"content": f"text {offset}", "embedding": {"model": "m", "dim": 2, "data": "x"}},
            }
        )
        self.records.append(LogRecord(offset, 0, agent, type_, value))
        return offset

    def end_offset(self) -> int:
        return len(self.records)

    def read(
        self,
        start: int = 0,
        stop: int | None = None,
        *,
        agent_id: str | None = None,
        limit: int = 10_000,
        vectors: bool = True,
        types: Sequence[str] | None = None,
    ) -> list[LogRecord]:
        self.reads += 1
        end = len(self.records) if stop is None else min(stop, len(self.records))
        out = [
            r
            for r in self.records[max(start, 0) : end]
            if (agent_id is None or r.agent_id == agent_id) and (types is None or r.type in types)
        ]
        return out[:limit]


def fill(log: ListLog, n: int) -> list[int]:
    return [log.append(AGENTS[i % 3], TYPES[i % 2]) for i in range(n)]


async def take(sub: object, n: int) -> list[FeedItem]:
    out = []
    async for item in sub:  # type: ignore[attr-defined]
        out.append(item)
        if len(out) == n:
            break
    return out


def test_filter_admits_agents_and_types() -> None:
    f = FeedFilter.of(["a1", "a2"], ["memory.stored"])
    assert f.admits("a1", "memory.stored")
    assert not f.admits("a3", "memory.stored")
    assert not f.admits("a1", "memory.updated")
    assert FeedFilter().admits("anyone", "anything")
    assert FeedFilter.of(None, ["memory.updated"]).admits("x", "memory.updated")
    readable = FeedFilter.of(None, None, lambda agent: agent != "secret")
    assert readable.admits("a1", "memory.stored") and not readable.admits("secret", "memory.stored")


def test_parse_types() -> None:
    assert parse_types(None) is None
    assert parse_types(" , ") is None
    assert parse_types("memory.stored, memory.updated,") == frozenset({"memory.stored", "memory.updated"})


def test_render_is_the_history_entry_and_its_json() -> None:
    log = ListLog()
    log.append("a1")
    item = render(log.records[0])
    assert item.position == "0"
    assert item.entry["offset"] == 0 and item.entry["type"] == "memory.stored"
    assert item.entry["change"]["embedding"] == {"model": "m", "dim": 2}  # summarised, never dumped
    assert orjson.loads(item.data) == item.entry
    assert item.sse == f"id: 0\nevent: memory.stored\ndata: {item.data}\n\n".encode()


async def test_past_then_live_in_order_without_gap_or_repeat() -> None:
    log = ListLog()
    fill(log, 25)
    feed = Feed(log, batch=4, poll_seconds=5.0)
    seen: list[int] = []
    async with feed.subscribe(start=3) as sub:
        async for item in sub:
            seen.append(item.offset)
            if item.offset % 5 == 0:  # appends while it is still reading the past, and once live
                fill(log, 3)
                feed.notify()
            if len(seen) == 40:
                break
    assert seen == list(range(3, 43))
    await feed.close()


async def test_two_subscribers_share_the_reader_and_see_the_same_events() -> None:
    log = ListLog()
    feed = Feed(log, poll_seconds=5.0)
    first = feed.subscribe()  # live subscribers are fanned out to from the moment they subscribe
    second = feed.subscribe(agents=["a2"], types=["memory.updated"])
    expected = fill(log, 12)
    feed.notify()
    got_all = await take(first, 12)
    got_some = await take(second, 2)
    assert [i.offset for i in got_all] == expected
    assert [i.offset for i in got_some] == [o for o in expected if o % 3 == 1 and o % 2 == 1]
    assert feed.subscribers == 2
    await feed.close()
    assert [i async for i in first] == []  # closing the feed ends every subscription


async def test_subscribers_taking_everything_share_one_batch_and_its_bytes() -> None:
    log = ListLog()
    feed = Feed(log, poll_seconds=5.0, min_read_interval_s=0.0)
    first, second = feed.subscribe(), feed.subscribe()
    some = feed.subscribe(agents=["a1"])
    expected = fill(log, 6)
    feed.notify()
    a, b, c = await first.next_batch(), await second.next_batch(), await some.next_batch()
    assert a is b  # one object for every unfiltered subscriber: its SSE bytes joined once
    assert [i.offset for i in a] == expected and a.sse == b"".join(i.sse for i in a)
    assert [i.offset for i in c] == [0, 3] and c.sse == b"".join(i.sse for i in c)
    await feed.close()
    assert len(await first.next_batch()) == 0  # ended


async def test_next_batch_after_iteration_takes_the_rest_of_every_batch_in_order() -> None:
    log = ListLog()
    feed = Feed(log, poll_seconds=5.0, min_read_interval_s=0.0)
    sub = feed.subscribe()
    fill(log, 4)
    feed.notify()
    assert [i.offset for i in await take(sub, 1)] == [0]  # the reader's first batch is 0..3
    fill(log, 3)
    feed.notify()
    deadline = time.monotonic() + 30
    while sub._queued < 6:  # until the second read (4..6) has reached the subscriber
        assert time.monotonic() < deadline, "the reader never offered the second batch"
        await asyncio.sleep(0.001)
    rest = await sub.next_batch()
    assert [i.offset for i in rest] == [1, 2, 3, 4, 5, 6]
    assert rest.sse == b"".join(i.sse for i in rest) and sub.last_offset == 6
    await feed.close()


async def test_a_subscriber_that_stops_reading_is_cut_off_with_its_resume_offset() -> None:
    log = ListLog()
    feed = Feed(log, poll_seconds=5.0)
    slow = feed.subscribe(buffer=3)
    fast = feed.subscribe()
    fill(log, 2)
    feed.notify()
    assert [i.offset for i in await take(slow, 1)] == [0]  # joined at 0 (the log was empty)
    assert [i.offset for i in await take(fast, 2)] == [0, 1]
    fill(log, 10)  # offsets 2..11: slow holds 1, 2, 3 and is cut off at 4
    feed.notify()
    assert [i.offset for i in await take(fast, 10)] == list(range(2, 12))
    got = []
    with pytest.raises(FeedCutOff) as cut:
        async for item in slow:
            got.append(item.offset)
    assert got == [1, 2, 3]
    assert cut.value.resume_from == 4 and cut.value.position == "4"
    assert feed.subscribers == 1  # the fast one is still served
    # resuming at the offset it was given loses nothing and repeats nothing
    async with feed.subscribe(start=cut.value.resume_from) as again:
        assert [i.offset for i in await take(again, 8)] == list(range(4, 12))
    await feed.close()


async def test_a_filtered_subscriber_starting_in_the_past_reads_only_its_events() -> None:
    log = ListLog()
    fill(log, 30)
    feed = Feed(log, batch=5, poll_seconds=5.0)
    async with feed.subscribe(agents=["a1", "a3"], types=["memory.stored"], start=0) as sub:
        got = [i.offset for i in await take(sub, 10)]
    assert got == [o for o in range(30) if o % 3 in (0, 2) and o % 2 == 0]
    async with feed.subscribe(agents=["a2"], start=10) as sub:
        assert [i.offset for i in await take(sub, 3)] == [10, 13, 16]
    async with feed.subscribe(start=0, readable=lambda agent: agent == "a3") as sub:
        assert [i.offset for i in await take(sub, 4)] == [2, 5, 8, 11]
    await feed.close()


async def test_a_start_past_the_end_waits_for_that_offset() -> None:
    log = ListLog()
    fill(log, 3)
    feed = Feed(log, poll_seconds=5.0)
    async with feed.subscribe(start=6) as sub:
        waiter = asyncio.create_task(take(sub, 2))
        fill(log, 6)  # 3..8
        feed.notify()
        assert [i.offset for i in await waiter] == [6, 7]
    await feed.close()


def test_a_buffer_must_hold_an_event() -> None:
    with pytest.raises(ValueError):
        Feed(ListLog()).subscribe(buffer=0)
