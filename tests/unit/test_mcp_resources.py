"""The pure parts of the MCP resources (api/faces/mcp_resources.py): URIs, what an event touches,
and the watch over a stand-in feed: one feed subscription per watched agent, released with the
agent's last URI or the watch; updates coalesced per URI; a feed cut-off resumed where it was cut."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from memstream.api.faces.feed import FeedRequest, FeedUnavailable, PositionError
from memstream.api.faces.mcp_resources import (
    READY,
    ResourceWatch,
    memories_uri,
    memory_uri,
    parse_uri,
    source_changes,
    touched,
)
from memstream.api.services.feed import FeedCutOff
from memstream.api.tools.registry import Caller

CALLER = Caller("unit")


def _stored(agent: str, ident: int, kind: str = "memory.stored") -> dict[str, Any]:
    return {"type": kind, "scope": {"agent_id": agent}, "change": {"id": ident}}


class StandInFeed:
    """Per agent, a queue the test pushes events into; counts the subscriptions open."""

    def __init__(self) -> None:
        self.queues: dict[str, asyncio.Queue[Mapping[str, Any]]] = {}
        self.open: dict[str, int] = {}
        self.opened = 0

    async def changes(self, caller: Caller, agent: str) -> AsyncIterator[Mapping[str, Any]]:
        queue = self.queues.setdefault(agent, asyncio.Queue())
        self.open[agent] = self.open.get(agent, 0) + 1
        self.opened += 1
        try:
            yield {"type": READY}
            while True:
                yield await queue.get()
        finally:
            self.open[agent] -= 1

    def total(self) -> int:
        return sum(self.open.values())


async def _until(condition: Callable[[], object]) -> None:
    """Let the watch's tasks run until ``condition`` holds; fail past a deadline."""
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0)


async def _turns() -> None:
    """A few turns of the loop, for a check that something does NOT happen: the watch's tasks
    get the chance to do it wrongly before the test looks (a positive wait uses ``_until``)."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_uris_round_trip_and_bad_ones_are_refused() -> None:
    for agent in ("a1", "agent with spaces/and slash", "ü"):
        assert parse_uri(memories_uri(agent)).agent_id == agent
        ref = parse_uri(memory_uri(agent, 42))
        assert (ref.agent_id, ref.kind, ref.memory_id) == (agent, "memory", 42)
    assert memories_uri("a/b") == "memstream://agents/a%2Fb/memories"
    for bad in (
        "file:///etc/passwd",
        "memstream://agents/",
        "memstream://agents/a1",
        "memstream://agents/a1/memories/x",
        "memstream://agents/a1/memories/0",
        "memstream://agents/a1/secrets",
        "memstream://agents/a1/memories/1/extra",
    ):
        with pytest.raises(MCPError) as err:
            parse_uri(bad)
        assert err.value.error.code == types.INVALID_PARAMS and "unknown resource" in err.value.error.message


def test_touched_names_the_resources_an_event_changes() -> None:
    def entry(kind: str, change: dict[str, Any]) -> dict[str, Any]:
        return {"type": kind, "scope": {"agent_id": "a1"}, "change": change}

    assert touched(entry("memory.stored", {"id": 7})) == {memories_uri("a1"), memory_uri("a1", 7)}
    assert touched(entry("memory.verified", {"id": 7})) == {memory_uri("a1", 7)}
    assert touched(entry("memory.reembedded", {"id": 7, "kind": "ep"})) == set()
    assert touched(entry("episode.archived", {"id": 3})) == {"memstream://agents/a1/episodes"}
    assert touched(entry("profile.updated", {})) == {"memstream://agents/a1/profile"}
    assert touched(entry("agent_data.deleted", {"memory_ids": [3], "episode_ids": [], "profile": False})) == {
        memories_uri("a1"),
        memory_uri("a1", 3),
    }
    assert touched(entry("standing.declared", {"ref": "mem:9"})) == {memory_uri("a1", 9)}
    assert touched(entry("recall_precision.set", {})) == set()
    assert touched({"type": "memory.stored", "scope": {}, "change": {"id": 1}}) == set()


async def test_one_feed_subscription_per_agent_released_with_its_last_uri() -> None:
    feed = StandInFeed()
    watch = ResourceWatch(feed.changes)
    await watch.add(CALLER, parse_uri(memories_uri("a1")))
    await watch.add(CALLER, parse_uri(memory_uri("a1", 1)))
    await watch.add(CALLER, parse_uri(memories_uri("a2")))
    await _until(lambda: feed.open == {"a1": 1, "a2": 1})
    assert watch.feeds == 2
    assert watch.remove(memories_uri("a1"))
    await _turns()
    assert feed.open["a1"] == 1  # a1's memory 1 is still watched
    assert watch.remove(memory_uri("a1", 1))
    assert not watch.remove(memory_uri("a1", 1))
    await _until(lambda: feed.open == {"a1": 0, "a2": 1})
    await watch.close()
    assert feed.total() == 0 and watch.feeds == 0
    with pytest.raises(MCPError):
        await watch.add(CALLER, parse_uri(memories_uri("a1")))


async def test_updates_are_coalesced_per_uri_and_only_for_watched_uris() -> None:
    feed = StandInFeed()
    watch = ResourceWatch(feed.changes)
    await watch.add(CALLER, parse_uri(memory_uri("a1", 1)))
    await _until(lambda: "a1" in feed.queues)
    queue = feed.queues["a1"]
    for ident in (2, 1, 3, 1, 1):
        queue.put_nowait(_stored("a1", ident, "memory.updated"))
    await _until(queue.empty)  # the watch took (and coalesced) all five
    updates = watch.updates()
    async with asyncio.timeout(5):
        assert await anext(updates) == memory_uri("a1", 1)
    queue.put_nowait(_stored("a1", 1, "memory.locked"))
    async with asyncio.timeout(5):
        assert await anext(updates) == memory_uri("a1", 1)  # one per change seen since the last
    await watch.close()
    assert feed.total() == 0


async def test_a_watch_holds_a_bounded_number_of_uris() -> None:
    feed = StandInFeed()
    watch = ResourceWatch(feed.changes, limit=2)
    await watch.add(CALLER, parse_uri(memory_uri("a1", 1)))
    await watch.add(CALLER, parse_uri(memory_uri("a1", 2)))
    await watch.add(CALLER, parse_uri(memory_uri("a1", 2)))  # again: no new URI
    with pytest.raises(MCPError, match="too many subscriptions"):
        await watch.add(CALLER, parse_uri(memory_uri("a1", 3)))
    await watch.close()


class Item:
    def __init__(self, ident: int) -> None:
        self.data = json.dumps(_stored("a1", ident))


DONE = StopAsyncIteration()  # a stream that ends (the feed closed)


class Stream:
    def __init__(self, batches: list[list[Item]], end: BaseException | None) -> None:
        self.batches = batches
        self.end = end
        self.closed = False

    gate: asyncio.Event | None = None  # when set: the stream waits for it before anything

    async def next_batch(self) -> list[Item]:
        if self.gate is not None:
            await self.gate.wait()
        if self.batches:
            return self.batches.pop(0)
        if self.end is DONE:
            return []
        if self.end is not None:
            raise self.end
        await asyncio.Event().wait()  # live and quiet
        return []

    def close(self) -> None:
        self.closed = True


class ScriptedSource:
    """A FeedSource whose streams play a script: (batches, how the stream ends) per open."""

    def __init__(self, *script: tuple[list[list[Item]], BaseException | None]) -> None:
        self.script = list(script)
        self.requests: list[FeedRequest] = []
        self.streams: list[Stream] = []
        self.gate: asyncio.Event | None = None  # for the next stream opened

    async def open(self, request: FeedRequest) -> Stream:
        self.requests.append(request)
        batches, end = self.script.pop(0)
        stream = Stream(batches, end)
        stream.gate, self.gate = self.gate, None
        self.streams.append(stream)
        return stream


async def test_source_changes_resume_at_the_position_the_feed_cut_them_off() -> None:
    source = ScriptedSource(
        ([[Item(4)]], FeedCutOff("5", "fell behind", resume_from=5)),
        ([[Item(5), Item(6)]], DONE),
    )
    async with asyncio.timeout(5):
        seen = [e async for e in source_changes(source)(CALLER, "a1")]
    assert [e["type"] for e in seen] == [READY, "memory.stored", READY, "memory.stored", "memory.stored"]
    assert [e["change"]["id"] for e in seen if e["type"] != READY] == [4, 5, 6]
    assert [(r.agents, r.at, r.after) for r in source.requests] == [
        (frozenset({"a1"}), None, None),
        (frozenset({"a1"}), "5", None),
    ]
    assert all(stream.closed for stream in source.streams)


async def test_a_cut_off_that_cannot_resume_resyncs_every_watched_uri() -> None:
    """The position the feed cut at cannot be read any more: the watch resubscribes live and
    announces every URI it watches of that agent, since any of them may have changed meanwhile."""

    class Expiring(ScriptedSource):
        async def open(self, request: FeedRequest) -> Stream:
            if request.at is not None:
                self.requests.append(request)
                raise PositionError("gone")
            return await super().open(request)

    source = Expiring(([], FeedCutOff("p:1", "fell behind")), ([], None))
    gate = source.gate = asyncio.Event()
    watch = ResourceWatch(source_changes(source))
    await watch.add(CALLER, parse_uri(memory_uri("a1", 1)))
    await watch.add(CALLER, parse_uri(memories_uri("a1")))
    gate.set()  # both watched: now the feed cuts the subscription off
    updates = watch.updates()
    async with asyncio.timeout(5):
        got = {await anext(updates), await anext(updates)}
    assert got == {memory_uri("a1", 1), memories_uri("a1")}
    assert [r.at for r in source.requests] == [None, "p:1", None]
    await watch.close()
    assert all(stream.closed for stream in source.streams)


async def test_a_subscribe_whose_feed_cannot_be_opened_is_refused_and_the_next_one_opens_it() -> None:
    """The feed refuses the subscription (Kafka mode: the router's consumer could not read the
    events topic): the subscribe fails with the reason instead of being answered with a watch
    that nobody feeds; a later subscribe to the agent opens the feed again."""

    class Refusing(ScriptedSource):
        async def open(self, request: FeedRequest) -> Stream:
            if not self.requests:
                self.requests.append(request)
                raise FeedUnavailable("the events topic could not be read: KafkaTimeoutError")
            return await super().open(request)

    source = Refusing(([[Item(7)]], None))
    watch = ResourceWatch(source_changes(source))
    with pytest.raises(MCPError, match=r"change feed of agent 'a1' is unavailable \(.*KafkaTimeoutError\)"):
        await watch.add(CALLER, parse_uri(memory_uri("a1", 7)))
    assert watch.watched == set() and watch.feeds == 0
    await watch.add(CALLER, parse_uri(memory_uri("a1", 7)))
    async with asyncio.timeout(5):
        assert await anext(watch.updates()) == memory_uri("a1", 7)
    assert len(source.requests) == 2
    await watch.close()


async def test_a_feed_cut_off_again_where_it_was_is_reopened_after_growing_pauses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A record the feed cannot read cuts every reopened stream off at the same position: the
    subscription keeps trying (nothing is skipped) but pauses longer each time instead of spinning."""
    pauses: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float) -> None:
        pauses.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    stuck = FeedCutOff("7", "a record of the events topic could not be read")
    source = ScriptedSource(
        ([[Item(6)]], stuck), ([], stuck), ([], stuck), ([], stuck), ([[Item(7)]], FeedCutOff("8", "fell behind")),
        ([[Item(8)]], DONE),
    )  # fmt: skip
    async with asyncio.timeout(5):
        seen = [e async for e in source_changes(source)(CALLER, "a1")]
    assert [e["change"]["id"] for e in seen if e["type"] != READY] == [6, 7, 8]
    assert [r.at for r in source.requests] == [None, "7", "7", "7", "7", "8"]
    assert pauses == [0.25, 0.5, 1.0]  # none before the first reopen, nor after a cut that moved on
