"""The change feed (``GET /v1/events``, Server-Sent Events) as an iterator of typed events.

A subscription is resumable by position: each message carries its event's position (``id``),
the client remembers the last one it delivered and, when the connection drops or the server
cuts a slow subscriber off (``event: cutoff`` with ``resume_from``), connects again from there:
``Last-Event-ID`` after a drop, ``from=resume_from`` after a cut-off. So the caller sees every
event once, in log order, across reconnections (docs/client.md, "The feed").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Generator
from types import TracebackType

import httpx
import orjson
from httpx_sse import ServerSentEvent, aconnect_sse, connect_sse

from .errors import MemstreamError, Unavailable
from .exchange import refusal
from .results import Event
from .retry import RETRY_STATUSES, RetryPolicy

PATH = "/v1/events"
# A connection that stayed up this long was healthy: the count of failures in a row starts over.
HEALTHY_S = 30.0


class FeedEvent(Event):
    """One event of the feed: ``history``'s entry for it, and ``position``, the opaque string
    to resume from (``events(after=position)`` continues with the event after it)."""

    position: str


class FeedCursor:
    """Where a subscription stands: what to ask for on the next connection."""

    def __init__(
        self,
        agent_id: str | list[str] | None,
        types: str | list[str] | None,
        start: str | int | None,
        after: str | None,
    ) -> None:
        self.agents = [agent_id] if isinstance(agent_id, str) else list(agent_id or [])
        self.types = types if isinstance(types, str) or types is None else ",".join(types)
        self.at = None if start is None else str(start)
        self.after = after  # the last position delivered (sent as Last-Event-ID)
        self.connections = 0  # how many times the stream was opened (1 + resumptions)
        self.cutoffs = 0  # how many times the server cut this subscriber off for falling behind

    def request(self) -> tuple[list[tuple[str, str]], dict[str, str]]:
        self.connections += 1
        params = [("agent_id", a) for a in self.agents]
        if self.types:
            params.append(("types", self.types))
        headers: dict[str, str] = {}
        if self.after is not None:
            headers["last-event-id"] = self.after
        elif self.at is not None:
            params.append(("from", self.at))
        return params, headers

    def take(self, sse: ServerSentEvent) -> FeedEvent | None:
        """The event a message carries (None for a cut-off, which moves the cursor instead)."""
        if sse.event == "cutoff":
            resume = orjson.loads(sse.data).get("resume_from")
            if not isinstance(resume, str):
                raise MemstreamError(f"the server cut the feed off without a position to resume from: {sse.data}")
            self.at, self.after = resume, None
            self.cutoffs += 1
            return None
        entry = orjson.loads(sse.data)
        if not isinstance(entry, dict):
            raise MemstreamError(f"a feed message that is not an event: {sse.data[:200]}")
        event = FeedEvent.model_validate({**entry, "position": sse.id or ""})
        if sse.id:
            self.after = sse.id
        return event


class Reconnects:
    """When a subscription connects again, and after how long: the decisions both streams share
    (their I/O apart). A connection that delivered nothing or failed counts as a failure; a
    run of more than ``policy.retries`` of them ends the stream with ``Unavailable``."""

    def __init__(self, policy: RetryPolicy, reconnect: bool) -> None:
        self.policy = policy
        self.reconnect = reconnect
        self.failures = 0  # connections in a row that failed or delivered nothing
        self.opened = 0.0
        self.delivered = False
        self.retry_after: str | None = None

    def opening(self) -> None:
        self.opened = time.monotonic()
        self.delivered = False
        self.retry_after = None

    def refused(self, response: httpx.Response, body: bytes) -> None:
        """A connection answered other than 200: raised unless worth trying again."""
        error = refusal(httpx.Response(response.status_code, content=body, headers=response.headers))
        retry = self.reconnect and self.failures < self.policy.retries
        if response.status_code not in RETRY_STATUSES or not retry:
            raise error
        self.retry_after = response.headers.get("retry-after")

    def lost(self, exc: httpx.TransportError) -> None:
        """A connection dropped: raised unless the stream resumes."""
        if not self.reconnect or (self.failures >= self.policy.retries and not self.delivered):
            raise Unavailable(f"the change feed was lost: {type(exc).__name__}: {exc}") from exc

    def pause(self) -> float:
        """After a connection ended: seconds to wait before the next (0: at once), or raised."""
        healthy = self.delivered or time.monotonic() - self.opened > HEALTHY_S
        self.failures = 0 if healthy else self.failures + 1
        if self.failures > self.policy.retries:
            raise Unavailable("the change feed keeps ending without delivering an event")
        return self.policy.delay(self.failures - 1, self.retry_after) if self.failures else 0.0


class EventStream:
    """The feed as a blocking iterator: ``for event in client.events(...)``; ``close()`` (or
    leaving ``with``) ends the subscription."""

    def __init__(self, events: Generator[FeedEvent, None, None], cursor: FeedCursor) -> None:
        self.cursor = cursor
        self._events = events

    @classmethod
    def over_http(cls, http: httpx.Client, policy: RetryPolicy, cursor: FeedCursor, reconnect: bool) -> EventStream:
        return cls(cls._run(http, policy, cursor, reconnect), cursor)

    @staticmethod
    def _run(
        http: httpx.Client, policy: RetryPolicy, cursor: FeedCursor, reconnect: bool
    ) -> Generator[FeedEvent, None, None]:
        tries = Reconnects(policy, reconnect)
        while True:
            params, headers = cursor.request()
            tries.opening()
            try:
                with connect_sse(http, "GET", PATH, params=params, headers=headers) as source:
                    if source.response.status_code != 200:
                        tries.refused(source.response, source.response.read())
                    else:
                        for sse in source.iter_sse():
                            event = cursor.take(sse)
                            if event is not None:
                                tries.delivered = True
                                yield event
            except httpx.TransportError as exc:
                tries.lost(exc)
            else:
                if not reconnect:  # the stream ended (a cut-off, or the server going away)
                    return
            wait = tries.pause()
            if wait:
                time.sleep(wait)

    def __iter__(self) -> EventStream:
        return self

    def __next__(self) -> FeedEvent:
        return next(self._events)

    def close(self) -> None:
        self._events.close()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncEventStream:
    """The feed as an async iterator: ``async for event in client.events(...)``; ``aclose()``
    (or leaving ``async with``) ends the subscription."""

    def __init__(self, events: AsyncGenerator[FeedEvent, None], cursor: FeedCursor) -> None:
        self.cursor = cursor
        self._events = events

    @classmethod
    def over_http(
        cls, http: httpx.AsyncClient, policy: RetryPolicy, cursor: FeedCursor, reconnect: bool
    ) -> AsyncEventStream:
        return cls(cls._run(http, policy, cursor, reconnect), cursor)

    @staticmethod
    async def _run(
        http: httpx.AsyncClient, policy: RetryPolicy, cursor: FeedCursor, reconnect: bool
    ) -> AsyncGenerator[FeedEvent, None]:
        tries = Reconnects(policy, reconnect)
        while True:
            params, headers = cursor.request()
            tries.opening()
            try:
                async with aconnect_sse(http, "GET", PATH, params=params, headers=headers) as source:
                    if source.response.status_code != 200:
                        tries.refused(source.response, await source.response.aread())
                    else:
                        async for sse in source.aiter_sse():
                            event = cursor.take(sse)
                            if event is not None:
                                tries.delivered = True
                                yield event
            except httpx.TransportError as exc:
                tries.lost(exc)
            else:
                if not reconnect:
                    return
            wait = tries.pause()
            if wait:
                await asyncio.sleep(wait)

    def __aiter__(self) -> AsyncEventStream:
        return self

    async def __anext__(self) -> FeedEvent:
        return await self._events.__anext__()

    async def aclose(self) -> None:
        await self._events.aclose()

    async def __aenter__(self) -> AsyncEventStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
