"""A tool call's body is bounded: over ``MAX_BODY_BYTES`` it is refused with 413 (``too_large``),
audited, and nothing is written, whether its length is declared or it arrives chunked, on the
lean path and on FastAPI's; at the limit it is served. The MCP face's limit is the same."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE

from memstream.api.faces.tool_route import MAX_BODY_BYTES, BodyTooLarge, read_body
from tests.support.servers import ServerThread

HEAD = b'{"agent_id": "big", "content": "a memory padded with spaces"}'


def padded(size: int) -> bytes:
    """A valid store call of exactly ``size`` bytes."""
    return HEAD + b" " * (size - len(HEAD))


def chunked(body: bytes, piece: int = 256 * 1024) -> Iterator[bytes]:
    """The body as a stream: httpx sends it chunked, with no Content-Length."""
    for i in range(0, len(body), piece):
        yield body[i : i + piece]


def post(client: httpx.Client, body: bytes, stream: bool) -> httpx.Response:
    content: Any = chunked(body) if stream else body
    return client.post("/v1/tools/store", content=content, headers={"content-type": "application/json"})


def stored_count(client: httpx.Client) -> int:
    listed = client.post("/v1/tools/list_memories", json={"agent_id": "big"}).json()
    return len(listed["memories"])


def test_the_http_and_mcp_faces_share_one_limit() -> None:
    assert MAX_BODY_BYTES == DEFAULT_MAX_REQUEST_BODY_SIZE


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "fastapi"])
@pytest.mark.parametrize("stream", [False, True], ids=["declared", "chunked"])
def test_a_body_over_the_limit_is_refused_and_audited(http_server: ServerThread, lean: bool, stream: bool) -> None:
    fast_path = http_server.app.lean
    http_server.app.lean = fast_path if lean else None
    try:
        with httpx.Client(base_url=http_server.url, timeout=60) as client:
            refused = post(client, padded(MAX_BODY_BYTES + 1), stream)
            assert refused.status_code == 413
            assert refused.headers["memstream-error"] == "too_large"
            answer = refused.json()
            assert answer["ok"] is False and answer["result"] == "rejected"
            assert f"over {MAX_BODY_BYTES} bytes" in answer["reason"]
            assert stored_count(client) == 0
            audit = client.post("/v1/tools/audit_log", json={"kind": "refused"}).json()
            assert any(f"over {MAX_BODY_BYTES} bytes" in str(r) for r in audit["records"]), audit

            served = post(client, padded(MAX_BODY_BYTES), stream)
            assert served.status_code == 200, served.text
            assert served.json()["result"] == "stored"
            assert stored_count(client) == 1
    finally:
        http_server.app.lean = fast_path


async def test_a_long_body_is_not_buffered_past_the_limit() -> None:
    """Chunks without end: the read stops once past the limit, holding at most one chunk more."""
    piece = 1024 * 1024
    received = 0

    async def receive() -> dict[str, Any]:
        nonlocal received
        received += 1
        return {"type": "http.request", "body": b"{" + b" " * (piece - 1), "more_body": True}

    with pytest.raises(BodyTooLarge) as caught:
        await read_body(receive)
    assert received == MAX_BODY_BYTES // piece + 1
    assert caught.value.head == b"{" + b" " * 511


async def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    async def receive() -> dict[str, Any]:
        raise AssertionError("nothing should be read")

    with pytest.raises(BodyTooLarge):
        await read_body(receive, [(b"content-length", str(MAX_BODY_BYTES + 1).encode())])
