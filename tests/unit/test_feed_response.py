"""The change feed's SSE response (api/faces/feed.py ``FeedResponse``) driven as an ASGI app with
a scripted client: a send that stops completing (a subscriber that stopped reading) ends the
response and closes what it streams; a client that reads gets every message and the end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sse_starlette.sse import SendTimeoutError
from starlette.types import Message

from memstream.api.faces.feed import FeedResponse

SCOPE = {"type": "http", "method": "GET", "path": "/v1/events", "headers": []}
MESSAGE = b"id: 1\nevent: memory.stored\ndata: {}\n\n"


async def never_disconnects() -> Message:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def test_a_send_that_never_completes_ends_the_response_and_closes_the_stream() -> None:
    closed = asyncio.Event()

    async def messages() -> AsyncIterator[bytes]:
        try:
            while True:  # the feed has more than the client takes
                yield MESSAGE
        finally:
            closed.set()

    sent: list[Message] = []
    stalled = asyncio.Event()

    async def send(message: Message) -> None:
        sent.append(message)
        if len(sent) == 4:  # the head and two messages went out; then the client stops reading
            stalled.set()
            await asyncio.Event().wait()

    response = FeedResponse(messages(), ping=15, stall_s=0.2)
    with pytest.raises(SendTimeoutError):
        # the bound is for a broken watchdog (the test fails instead of hanging), not a timing claim
        await asyncio.wait_for(response(SCOPE, never_disconnects, send), 60)
    assert stalled.is_set() and closed.is_set()
    assert [m["type"] for m in sent] == ["http.response.start"] + ["http.response.body"] * 3


async def test_a_reading_client_gets_every_message_then_the_end() -> None:
    async def messages() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield MESSAGE

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)
        await asyncio.sleep(0)  # a send that takes a turn of the loop, as a socket write may

    response = FeedResponse(messages(), ping=15, stall_s=30)
    await asyncio.wait_for(response(SCOPE, never_disconnects, send), 60)
    bodies = [m["body"] for m in sent if m["type"] == "http.response.body"]
    assert bodies == [MESSAGE] * 5 + [b""] and sent[-1]["more_body"] is False
