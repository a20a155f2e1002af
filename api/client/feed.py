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

from .errors import MemstreamError, Unavailable, code_of_answer, error_for
from .remote import decode
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


def _refusal(response: httpx.Response, body: bytes) -> MemstreamError:
    answer = httpx.Response(response.status_code, content=body, headers=response.headers)
    content = decode(answer)
    return error_for(code_of_answer(response.status_code, content), content, response.status_code)


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
        failures = 0  # connections in a row that failed or delivered nothing
        while True:
            params, headers = cursor.request()
            opened = time.monotonic()
            delivered = False
            retry_after: str | None = None
            try:
                with connect_sse(http, "GET", PATH, params=params, headers=headers) as source:
                    response = source.response
                    if response.status_code != 200:
                        error = _refusal(response, response.read())
                        if response.status_code not in RETRY_STATUSES or not reconnect or failures >= policy.retries:
                            raise error
                        retry_after = response.headers.get("retry-after")
                    else:
                        for sse in source.iter_sse():
                            event = cursor.take(sse)
                            if event is not None:
                                delivered = True
                                yield event
            except httpx.TransportError as exc:
                if not reconnect or (failures >= policy.retries and not delivered):
                    raise Unavailable(f"the change feed was lost: {type(exc).__name__}: {exc}") from exc
            else:
                if not reconnect:  # the stream ended (a cut-off, or the server going away)
                    return
            failures = 0 if delivered or time.monotonic() - opened > HEALTHY_S else failures + 1
            if failures > policy.retries:
                raise Unavailable("the change feed keeps ending without delivering an event")
            if failures:
                time.sleep(policy.delay(failures - 1, retry_after))

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
        failures = 0
        while True:
            params, headers = cursor.request()
            opened = time.monotonic()
            delivered = False
            retry_after: str | None = None
            try:
                async with aconnect_sse(http, "GET", PATH, params=params, headers=headers) as source:
                    response = source.response
                    if response.status_code != 200:
                        error = _refusal(response, await response.aread())
                        if response.status_code not in RETRY_STATUSES or not reconnect or failures >= policy.retries:
                            raise error
                        retry_after = response.headers.get("retry-after")
                    else:
                        async for sse in source.aiter_sse():
                            event = cursor.take(sse)
                            if event is not None:
                                delivered = True
                                yield event
            except httpx.TransportError as exc:
                if not reconnect or (failures >= policy.retries and not delivered):
                    raise Unavailable(f"the change feed was lost: {type(exc).__name__}: {exc}") from exc
            else:
                if not reconnect:
                    return
            failures = 0 if delivered or time.monotonic() - opened > HEALTHY_S else failures + 1
            if failures > policy.retries:
                raise Unavailable("the change feed keeps ending without delivering an event")
            if failures:
                await asyncio.sleep(policy.delay(failures - 1, retry_after))

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
