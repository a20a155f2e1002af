"""The embedded engine's change feed: live fan-out of new log events to in-process subscribers.

Every face that pushes changes (the SSE route ``GET /v1/events``, MCP resource notifications,
the console) subscribes here, so the log is read and each event decoded once however many
subscribers there are. docs/feed.md describes the feed as clients see it.

Use::

    async with engine.feed.subscribe(agents={"a1"}, types={"memory.stored"}, start=None) as sub:
        async for item in sub:  # FeedItem: offset, position, agent_id, type, entry, data, sse
            ...
    # a subscriber that fell ``buffer`` events behind: after its queued items, iteration
    # raises FeedCutOff (resume_from: the offset of the first event it was not given)

``start``: the offset of the first event to deliver (None: live, from the log's end when
``subscribe`` is called; such a subscriber is fanned out to at once, even before it reads). Items
come in log order, strictly increasing offsets, each once: a subscriber starting in the past
reads the log in batches at its own pace, then joins the live fan-out where its reading ended.
``agents`` / ``types``: None for all; ``readable``: a predicate on agent ids (ACL mode: what
the caller may read). Closing the engine ends every subscription (the iteration stops).

Writers never wait on subscribers: a commit only calls ``notify`` (an event flag). One reader
task reads what was appended since (and, every ``poll_seconds``, what other processes sharing
the data directory appended), renders each event once, and offers it to every subscriber's
bounded queue without waiting; a full queue cuts that subscriber off instead of slowing anyone.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

import orjson

from memstream.api.services.entries import history_entry
from memstream.streams.log.port import LogRecord

DEFAULT_BUFFER = 1000  # events a subscriber may fall behind before it is cut off
READ_BATCH = 256  # below DEFAULT_BUFFER: one read never cuts off a subscriber that keeps up
POLL_SECONDS = 0.5  # how soon another process's appends are seen (this process's: at once)
# Under a write storm the reader reads at most once per interval (at once when the last read was
# longer ago, so a quiet feed adds no latency): each subscriber costs a wake-up and a socket write
# per batch, so the interval decides what the fan-out costs the writers. ``ReadPacer`` sets it
# (docs/feed.md, "Cost"): long enough that fanning out takes at most FANOUT_SHARE of the time,
# never below the floor (MEMSTREAM_FEED_INTERVAL_SECONDS) and, unless the floor is higher, never
# above MAX_READ_INTERVAL_S nor so long that the wait plus what a read and its fan-out take
# passes DELIVERY_BUDGET_S: delivery within the 100 ms goal (docs/benchmarks.md).
MIN_READ_INTERVAL_S = 0.025
MAX_READ_INTERVAL_S = 0.085
DELIVERY_BUDGET_S = 0.09
FANOUT_SHARE = 0.02


class FeedLog(Protocol):
    """What the feed reads: the embedded log (streams/log/sqlite.py)."""

    def end_offset(self) -> int: ...

    def read(
        self,
        start: int = 0,
        stop: int | None = None,
        *,
        agent_id: str | None = None,
        limit: int = 10_000,
        vectors: bool = True,
        types: Sequence[str] | None = None,
    ) -> list[LogRecord]: ...


@dataclass(frozen=True, slots=True)
class FeedItem:
    """One event as the feed delivers it: ``entry`` is the ``history`` entry, ``data`` its JSON,
    ``sse`` its Server-Sent Events message (encoded once, however many subscribers send it)."""

    offset: int
    agent_id: str
    type: str
    entry: dict[str, Any]
    data: str
    sse: bytes

    @property
    def position(self) -> str:
        """The event's position as a string (the SSE ``id``): its log offset in decimal."""
        return str(self.offset)


class FeedBatch(tuple[FeedItem, ...]):
    """Items in log order with ``sse``, their SSE messages as one write. The reader makes one
    per read and hands the same batch to every subscriber that takes all of it, so a batch's
    bytes are joined once however many subscribers send them."""

    sse: bytes

    def __new__(cls, items: Iterable[FeedItem] = (), sse: bytes | None = None) -> FeedBatch:
        batch = super().__new__(cls, items)
        batch.sse = b"".join(item.sse for item in batch) if sse is None else sse
        return batch


def frame(position: str, type_: str, data: str) -> bytes:
    """An SSE message: ``id`` the position, ``event`` the type, ``data`` the JSON (positions,
    types and compact JSON hold no line breaks, so each is one line)."""
    return f"id: {position}\nevent: {type_}\ndata: {data}\n\n".encode()


def render(rec: LogRecord, show: Callable[[LogRecord], dict[str, Any]] = history_entry) -> FeedItem:
    entry = show(rec)
    data = orjson.dumps(entry).decode()
    return FeedItem(rec.offset, rec.agent_id, rec.type, entry, data, frame(str(rec.offset), rec.type, data))


@dataclass(frozen=True, slots=True)
class FeedFilter:
    """Which events a subscriber gets: of these agents and these types (None: all), and only of
    agents ``readable`` admits (ACL mode: the agents the caller may read)."""

    agents: frozenset[str] | None = None
    types: frozenset[str] | None = None
    readable: Callable[[str], bool] | None = None

    @classmethod
    def of(
        cls,
        agents: Collection[str] | None = None,
        types: Collection[str] | None = None,
        readable: Callable[[str], bool] | None = None,
    ) -> FeedFilter:
        return cls(
            None if agents is None else frozenset(agents), None if types is None else frozenset(types), readable
        )

    @property
    def everything(self) -> bool:
        """Admits every event: such a subscriber takes the reader's batches as they are."""
        return self.agents is None and self.types is None and self.readable is None

    def admits(self, agent_id: str, type_: str) -> bool:
        return (
            (self.agents is None or agent_id in self.agents)
            and (self.types is None or type_ in self.types)
            and (self.readable is None or self.readable(agent_id))
        )


def parse_types(text: str | None) -> frozenset[str] | None:
    """``types=memory.stored,memory.updated`` as a set; None or blank: every type."""
    if text is None:
        return None
    names = frozenset(t.strip() for t in text.split(",") if t.strip())
    return names or None


class FeedCutOff(Exception):
    """The subscriber stopped keeping up: it got everything before ``position``, nothing after.
    ``resume_from``: that position as a log offset (the embedded feed; None where positions are
    not offsets)."""

    def __init__(self, position: str, reason: str, resume_from: int | None = None) -> None:
        super().__init__(f"cut off at {position}: {reason}")
        self.position = position
        self.reason = reason
        self.resume_from = resume_from


class Subscription:
    """An async iterator of FeedItems (see the module docstring); ``close`` (or leaving its
    ``async with``) unsubscribes."""

    def __init__(self, feed: Feed, filter_: FeedFilter, start: int, buffer: int) -> None:
        if buffer < 1:
            raise ValueError("a subscriber's buffer holds at least one event")
        self._feed = feed
        self.filter = filter_
        self._start = max(start, 0)
        self._buffer = buffer
        self._cursor = -1  # catching up: the next offset to read from the log; joined: the dedupe floor
        self._backlog: deque[FeedItem] = deque()  # read from the log while catching up
        self._live: deque[FeedBatch] = deque()  # offered by the feed's reader once joined
        self._head = 0  # items of ``_live[0]`` already handed out
        self._queued = 0  # items in ``_live`` not handed out (what the cut-off bounds)
        self._ready = asyncio.Event()
        self._joined = False
        self._closed = False
        self._cut: FeedCutOff | None = None
        self.last_offset: int | None = None  # the last item handed out

    @property
    def joined(self) -> bool:
        """Caught up with the log: further items come from the live fan-out."""
        return self._joined

    def __aiter__(self) -> Subscription:
        return self

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._feed._leave(self)
            self._ready.set()

    async def __anext__(self) -> FeedItem:
        await self._wait()
        if self._joined:
            batch = self._live[0]
            item = batch[self._head]
            self._head += 1
            self._queued -= 1
            if self._head == len(batch):
                self._live.popleft()
                self._head = 0
        else:
            item = self._backlog.popleft()
        self.last_offset = item.offset
        return item

    async def next_batch(self, limit: int = READ_BATCH) -> FeedBatch:
        """What is ready at once (waiting for at least one item), for a face that writes it as
        one message: live, whole batches as the reader made them (one batch: the very object
        every other subscriber gets, its bytes joined once) up to about ``limit`` items; an empty
        batch once the subscription has ended. Raises FeedCutOff as iteration does."""
        try:
            await self._wait()
        except StopAsyncIteration:
            return FeedBatch()
        if not self._joined:
            taken = [self._backlog.popleft() for _ in range(min(limit, len(self._backlog)))]
            out = FeedBatch(taken)
        elif self._head == 0 and len(self._live) == 1:
            out = self._live.popleft()
            self._queued = 0
        else:
            parts: list[FeedBatch] = []
            count = 0
            while self._live and (count == 0 or count + len(self._live[0]) - self._head <= limit):
                batch = self._live.popleft()
                part = batch if self._head == 0 else FeedBatch(batch[self._head :])
                self._head = 0
                parts.append(part)
                count += len(part)
            self._queued -= count
            out = parts[0] if len(parts) == 1 else FeedBatch(
                (item for part in parts for item in part), b"".join(part.sse for part in parts)
            )
        self.last_offset = out[-1].offset
        return out

    async def _wait(self) -> None:
        """Until an item is ready; StopAsyncIteration once closed, FeedCutOff once cut off."""
        while True:
            if self._live if self._joined else self._backlog:
                return
            if self._cut is not None:
                raise self._cut
            if self._closed:
                raise StopAsyncIteration
            if self._joined:
                self._ready.clear()
                await self._ready.wait()
            else:
                await self._catch_up()

    async def _catch_up(self) -> None:
        """Read one batch of the log's past, or join the live fan-out where the past ends.

        Whether the reader has passed ``_cursor`` is decided with no await between the check
        and the join, so every event at or after the join point reaches this subscriber live
        and nothing before it does (the floor drops what the reader offers twice)."""
        feed = self._feed
        if self._cursor < 0:
            self._cursor = self._start
        bound = feed._next
        if bound is None:
            bound = await feed._log_end()
            if feed._next is not None:
                bound = feed._next
        if self._closed or self._cut is not None:
            return
        if self._cursor >= bound:
            feed._join(self, bound)
            self._joined = True
            return
        records, items = await feed._read(self._cursor, bound, self.filter)
        self._backlog.extend(items)
        self._cursor = records[-1].offset + 1 if len(records) >= feed.batch else bound

    def _offer(self, batch: FeedBatch) -> None:
        """From the feed's reader, a batch in log order: queue what this subscriber takes
        without waiting (all of it: the batch itself, shared), or cut it off at the first item
        its buffer cannot hold."""
        if not batch or batch[-1].offset < self._cursor:
            return
        items: Sequence[FeedItem] = batch
        if batch[0].offset < self._cursor:  # joined inside this batch: only what is past the floor
            items = [i for i in batch if i.offset >= self._cursor]
        if not self.filter.everything:
            admits = self.filter.admits
            items = [i for i in items if admits(i.agent_id, i.type)]
        if not items:
            return
        room = self._buffer - self._queued
        if len(items) > room:
            first = items[room]
            self._cut = FeedCutOff(
                first.position, f"the subscriber fell more than {self._buffer} events behind", first.offset
            )
            self._feed._leave(self)
            items = items[:room]
        if items:
            self._live.append(items if isinstance(items, FeedBatch) else FeedBatch(items))
            self._queued += len(items)
        self._ready.set()


class ReadPacer:
    """When the feed's reader may read again: the interval grows with what a fan-out costs.

    ``fanned_out`` measures each fan-out (offering a batch and the woken subscribers' writes,
    which grow with their number) in the loop thread's CPU time (``cpu_clock``: what it costs,
    however long other processes held the core meanwhile); ``cost`` is the median of the last
    few. The interval is that cost over ``share`` (writing at most that share of the time), at
    most ``cap`` and at most ``budget`` less the ``overhead`` (by ``clock``, wall time: the median
    of how late each read began and how long it took until its fan-out ended, what a loaded
    machine adds to the wait), and at least ``floor`` (which wins when it is the higher: a fixed
    interval). ``clock``: seconds, monotonic."""

    WINDOW = 9  # fan-outs the cost and the overhead are the medians of

    def __init__(
        self,
        floor: float = MIN_READ_INTERVAL_S,
        *,
        cap: float = MAX_READ_INTERVAL_S,
        budget: float = DELIVERY_BUDGET_S,
        share: float = FANOUT_SHARE,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        if floor < 0 or cap < 0 or budget < 0 or not 0 < share <= 1:
            raise ValueError("a read interval's floor, cap and budget are 0 or more, the share in (0, 1]")
        self.floor = floor
        self.cap = cap
        self.budget = budget
        self.share = share
        self.clock = clock
        self.cpu_clock = cpu_clock
        self.cost = 0.0  # seconds a fan-out takes (0 until one is measured)
        self.overhead = 0.0  # seconds a read adds to the wait: its lateness, the read, the fan-out
        self._spent: deque[float] = deque(maxlen=self.WINDOW)
        self._overheads: deque[float] = deque(maxlen=self.WINDOW)
        self._last_read: float | None = None
        self._due: float | None = None  # when the read being waited for was due
        self._late = 0.0  # how late the last read began

    @property
    def interval(self) -> float:
        return max(self.floor, min(self.cap, self.budget - self.overhead, self.cost / self.share))

    def delay(self) -> float:
        """Seconds to wait before reading (0: read now, as after a quiet spell)."""
        if self._last_read is None:
            return 0.0
        wait = self._last_read + self.interval - self.clock()
        if wait <= 0:
            return 0.0
        self._due = self._last_read + self.interval
        return wait

    def reading(self) -> None:
        """A read starts now: the next may start an interval later."""
        self._last_read = now = self.clock()
        self._late = 0.0 if self._due is None else max(0.0, now - self._due)
        self._due = None

    def fanning_out(self) -> float:
        """A fan-out begins: the mark to give ``fanned_out`` (by ``cpu_clock``)."""
        return self.cpu_clock()

    def fanned_out(self, started: float) -> None:
        """The fan-out ``fanning_out`` marked has ended (its subscribers have written)."""
        now = self.clock()
        self._spent.append(max(0.0, self.cpu_clock() - started))
        self.cost = statistics.median(self._spent)
        if self._last_read is not None:
            self._overheads.append(self._late + max(0.0, now - self._last_read))
            self.overhead = statistics.median(self._overheads)


@dataclass(eq=False)
class Feed:
    """The fan-out of one engine's log (see the module docstring)."""

    log: FeedLog
    batch: int = READ_BATCH
    poll_seconds: float = POLL_SECONDS
    min_read_interval_s: float = MIN_READ_INTERVAL_S
    _subs: set[Subscription] = field(default_factory=set)
    _next: int | None = None  # the next offset the reader reads; None while nobody is joined
    _signal: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None
    _closed: bool = False
    pacer: ReadPacer = field(init=False)

    def __post_init__(self) -> None:
        self.pacer = ReadPacer(self.min_read_interval_s)

    def subscribe(
        self,
        *,
        agents: Collection[str] | None = None,
        types: Collection[str] | None = None,
        start: int | None = None,
        buffer: int = DEFAULT_BUFFER,
        readable: Callable[[str], bool] | None = None,
    ) -> Subscription:
        live = start is None
        if start is None:  # from the end as of now (one indexed lookup), not as of the first read
            start = self.log.end_offset()
        sub = Subscription(self, FeedFilter.of(agents, types, readable), start, buffer)
        if self._closed:
            sub.close()
        elif live:  # nothing to catch up with: joins now (the floor drops what the reader has not passed)
            sub._cursor = start
            sub._joined = True
            self._join(sub, start)
        return sub

    def notify(self) -> None:
        """The log gained events (called by the engine after a commit that appended)."""
        self._signal.set()

    @property
    def subscribers(self) -> int:
        """Joined subscribers (those still catching up are not counted)."""
        return len(self._subs)

    async def close(self) -> None:
        self._closed = True
        for sub in list(self._subs):
            sub.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # -- for subscriptions ------------------------------------------------------------------

    def _join(self, sub: Subscription, at: int) -> None:
        if self._closed:
            sub.close()
            return
        if self._next is None:
            self._next = at
        self._subs.add(sub)
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="memstream-feed")
        self._signal.set()  # read what may have landed since ``at`` was learnt

    def _leave(self, sub: Subscription) -> None:
        self._subs.discard(sub)
        if not self._subs:
            self._next = None  # idle: nothing reads the log until someone joins again

    async def _log_end(self) -> int:
        return await asyncio.to_thread(self.log.end_offset)

    async def _read(self, start: int, stop: int | None, filter_: FeedFilter) -> tuple[list[LogRecord], list[FeedItem]]:
        """A batch of ``[start, stop)`` and its items that pass ``filter_``, off the event loop."""

        def work() -> tuple[list[LogRecord], list[FeedItem]]:
            one = next(iter(filter_.agents)) if filter_.agents is not None and len(filter_.agents) == 1 else None
            types = sorted(filter_.types) if filter_.types is not None else None
            records = self.log.read(start, stop, agent_id=one, limit=self.batch, vectors=False, types=types)
            return records, [render(r) for r in records if filter_.admits(r.agent_id, r.type)]

        return await asyncio.to_thread(work)

    # -- the reader -------------------------------------------------------------------------

    async def _run(self) -> None:
        everything = FeedFilter()
        pacer = self.pacer
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._signal.wait(), self.poll_seconds)
            if self._next is not None and (delay := pacer.delay()) > 0:
                await asyncio.sleep(delay)
            pacer.reading()
            self._signal.clear()
            while (start := self._next) is not None:
                records, items = await self._read(start, None, everything)
                if self._next != start:
                    continue  # everyone left (or the reader was re-aimed) meanwhile: drop the batch
                started = pacer.fanning_out()
                if items:
                    batch = FeedBatch(items)  # one object, its bytes joined once, for every subscriber
                    for sub in list(self._subs):
                        sub._offer(batch)
                if records:
                    self._next = records[-1].offset + 1 if self._subs else None
                if items:
                    # the subscribers woken above run (and write) before this task resumes: what
                    # the fan-out cost, measured where it is paid, the event loop's time
                    await asyncio.sleep(0)
                    pacer.fanned_out(started)
                if len(records) < self.batch:
                    break
