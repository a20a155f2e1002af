"""``GET /v1/events``: the change feed as Server-Sent Events (docs/feed.md).

One route for both modes: it takes what it streams as a ``FeedSource`` (the embedded engine's
fan-out here, the Kafka router's topic reader in api/kafka/router/feed.py), checks the caller's
grants before anything streams, and writes each item as ``id`` (its position), ``event`` (its
type) and ``data`` (its history entry as JSON). A subscriber cut off for falling behind gets a
last ``cutoff`` message saying where to resume, then the stream ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import orjson
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import SendTimeoutError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from memstream.api.faces.auth import PRINCIPAL_KEY
from memstream.api.services.acl import READ, AclConfig, Demand, denial, explain
from memstream.api.services.feed import Feed, FeedBatch, FeedCutOff, parse_types
from memstream.api.services.settings import Settings
from memstream.api.tools.dispatch import failure
from memstream.streams.log.sqlite import MAX_OFFSET

PATH = "/v1/events"
MAX_AGENTS = 1_000  # agent_id may repeat; past this a request is refused, not served


class PositionError(ValueError):
    """A ``from`` or ``Last-Event-ID`` that is not a position this feed gave out."""


class FeedUnavailable(Exception):
    """The feed cannot be read now (Kafka mode: the broker did not answer): a 503."""


class FeedEntry(Protocol):
    @property
    def position(self) -> str: ...

    @property
    def type(self) -> str: ...

    @property
    def data(self) -> str: ...

    @property
    def sse(self) -> bytes:
        """The SSE message (``frame`` of the three above), encoded once for every subscriber."""
        ...


class FeedStream(Protocol):
    """What the route reads: entries in log order, a batch at a time."""

    async def next_batch(self) -> Sequence[FeedEntry]:
        """What is ready (waiting for at least one); [] at the end; ``FeedCutOff`` when cut off."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class FeedRequest:
    """A subscription as asked for: agents and types (None: all), where to start
    (``at``: the first position delivered; ``after``: continue after that position; neither:
    live), and which agents the caller may read (None: all)."""

    agents: frozenset[str] | None
    types: frozenset[str] | None
    at: str | None
    after: str | None
    readable: Callable[[str], bool] | None
    buffer: int


class FeedSource(Protocol):
    async def open(self, request: FeedRequest) -> FeedStream:
        """Subscribe; ``PositionError`` for a position it cannot read, ``FeedUnavailable`` when
        the log cannot be read now."""
        ...


def parse_offset(text: str, what: str) -> int:
    """An embedded position: a log offset in decimal."""
    value = text.strip()
    if not value.isascii() or not value.isdigit() or len(value) > 19 or int(value) > MAX_OFFSET:
        raise PositionError(f"{what} must be a log offset (a decimal integer, 0 or more); got {text[:40]!r}")
    return int(value)


@dataclass(frozen=True)
class EngineFeed:
    """The embedded engine's fan-out as a ``FeedSource``: positions are log offsets."""

    feed: Feed

    async def open(self, request: FeedRequest) -> FeedStream:
        if request.after is not None:
            start: int | None = parse_offset(request.after, "Last-Event-ID") + 1
        elif request.at is not None:
            start = parse_offset(request.at, "from")
        else:
            start = None
        return self.feed.subscribe(
            agents=request.agents, types=request.types, start=start, buffer=request.buffer, readable=request.readable
        )


class KeepAlive(ServerSentEvent):
    """``: keep-alive`` on a line of its own. sse-starlette ends a comment with a blank line,
    which some clients (httpx-sse) take for an empty message once they have seen an id."""

    def __init__(self) -> None:
        super().__init__(comment="keep-alive")

    def encode(self) -> bytes:
        return b": keep-alive\n"


class FeedResponse(EventSourceResponse):
    """sse-starlette's response with one watchdog per subscriber instead of a timer per send.

    A subscriber that stops reading must not hold its connection (and what is queued for it)
    for ever: a send that has waited ``stall_s`` ends the response with ``SendTimeoutError``,
    as sse-starlette's ``send_timeout`` does. That option arms a timeout scope around every
    send, a measurable share of the fan-out's CPU with 100 subscribers (docs/feed.md, "Cost");
    here each send only notes when it began and a watchdog task looks every second or so."""

    def __init__(self, content: AsyncIterator[bytes | ServerSentEvent], *, ping: float, stall_s: float) -> None:
        super().__init__(content, ping=ping, ping_message_factory=KeepAlive, data_sender_callable=self._watch)
        self.stall_s = stall_s
        self._sending_since: float | None = None  # when the send in progress began (loop time)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        loop = asyncio.get_running_loop()

        async def noted(message: Message) -> None:
            self._sending_since = loop.time()
            try:
                await send(message)
            finally:
                self._sending_since = None

        await super().__call__(scope, receive, noted)

    async def _send_with_timeout(self, send: Send, message: Message) -> None:
        # No send_timeout is given, so sse-starlette's own version would only open a scope with no
        # deadline around each send; skipping it is all this does (were the hook renamed upstream,
        # that scope would come back and the watchdog would still bound a stalled send).
        await send(message)

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        period = min(1.0, self.stall_s / 4)
        while True:
            await asyncio.sleep(period)
            since = self._sending_since
            if since is not None and loop.time() - since >= self.stall_s:
                raise SendTimeoutError(f"a send to this subscriber waited {self.stall_s} s")


def _json(body: object, status: int) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def add_feed_route(
    app: Starlette, source: Callable[[Request], FeedSource], settings: Settings, acl: AclConfig | None
) -> None:
    """Serve ``GET /v1/events`` from the source ``source(request)`` names (the app's engine)."""

    async def events(request: Request) -> Response:
        agents = request.query_params.getlist("agent_id")
        if len(agents) > MAX_AGENTS or any(not a or len(a) > 256 for a in agents):
            return _json(failure(f"agent_id: 1 to 256 characters each, at most {MAX_AGENTS} of them"), 400)
        readable: Callable[[str], bool] | None = None
        if acl is not None:
            client_id = request.scope.get(PRINCIPAL_KEY)
            client = acl.client(client_id) if isinstance(client_id, str) else None
            for agent in agents:
                demand = Demand(agent, READ)
                if client is None or not client.permits(demand):
                    return _json(denial("events", str(client_id), demand, explain(client, demand)), 403)
            if client is None:  # a token the ACL knows always has a row; refuse rather than guess
                return _json(denial("events", str(client_id), Demand("*", READ), explain(None, Demand("*", READ))), 403)
            reader = client

            def readable(agent: str) -> bool:
                return reader.permits(Demand(agent, READ))

        types_text = request.query_params.get("types")
        wanted = FeedRequest(
            agents=frozenset(agents) if agents else None,
            types=parse_types(types_text),
            at=request.query_params.get("from"),
            after=request.headers.get("last-event-id"),
            readable=readable,
            buffer=settings.feed_buffer,
        )
        try:
            stream = await source(request).open(wanted)
        except PositionError as exc:
            return _json(failure(str(exc)), 400)
        except FeedUnavailable as exc:
            return _json(failure(f"log_unavailable: {exc}"), 503)
        return FeedResponse(_messages(stream), ping=settings.feed_keepalive_s, stall_s=settings.feed_send_timeout_s)

    app.router.routes.append(Route(PATH, events, methods=["GET"], include_in_schema=False))


async def _messages(stream: FeedStream) -> AsyncIterator[bytes | ServerSentEvent]:
    """What is ready goes out as one write: a subscriber's cost is per batch, not per event (the
    embedded feed's batches carry their bytes, joined once for all subscribers)."""
    try:
        while batch := await stream.next_batch():
            yield batch.sse if isinstance(batch, FeedBatch) else b"".join(entry.sse for entry in batch)
    except FeedCutOff as cut:
        body = orjson.dumps({"resume_from": cut.position, "reason": cut.reason}).decode()
        yield ServerSentEvent(data=body, event="cutoff")
    finally:
        stream.close()
