"""The tool routes' own ASGI path (api/faces/tool_route.py): taken for every POST to a tool
route, and answering exactly as FastAPI's stack does (the same statuses, headers and bodies,
the same guards in the same order), compared on one real server by switching the path off."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from memstream.api.faces import tool_route
from memstream.api.services.settings import Settings
from tests.support.acl import TOKENS, acl_settings
from tests.support.servers import ServerThread

# (path, body, headers): refusals and answers that do not depend on when they are made.
PLAIN_CALLS: list[tuple[str, bytes, dict[str, str]]] = [
    ("/v1/tools/store", b"{not json", {}),
    ("/v1/tools/store", b'{"agent_id": "a", "content": 5}', {}),
    ("/v1/tools/store", b'{"agent_id": "a", "content": "x", "n": 123456789012345678901234567890}', {}),
    ("/v1/tools/store", b"[1, 2]", {}),
    ("/v1/tools/nope", b"{}", {}),
    ("/v1/tools/delete_memory", b'{"memory_id": 424242}', {"x-client-id": "someone"}),
    ("/v1/tools/get_contents", b'{"memory_ids": [99999]}', {"x-session-id": "s-1"}),
    ("/context/packet", b'{"agent_id": "nobody", "query": "q"}', {}),
    ("/v1/tools/store", b"{}", {"host": "evil.example"}),
    ("/v1/tools/store", b"{}", {"origin": "https://evil.example"}),
    ("/v1/tools/store", b"{}", {"content-type": "text/plain"}),
    ("/v1/tools/store", b"{}", {"content-type": ""}),
]
ACL_CALLS: list[tuple[str, bytes, dict[str, str]]] = [
    ("/v1/tools/store", b'{"agent_id": "alice", "content": "x"}', {}),
    ("/v1/tools/store", b'{"agent_id": "alice", "content": "x"}', {"authorization": "Bearer wrong"}),
    (
        "/v1/tools/store",
        b'{"agent_id": "alice", "content": "x"}',
        {"authorization": f"Bearer {TOKENS['r-alice']}", "x-client-id": "admin"},
    ),
    ("/v1/tools/get_contents", b'{"memory_ids": [1]}', {"authorization": f"Bearer {TOKENS['nogrants']}"}),
    ("/v1/tools/store", b"{bad", {"authorization": f"Bearer {TOKENS['rw-alice']}"}),
    ("/v1/tools/store", b"{}", {"authorization": f"Bearer {TOKENS['rw-alice']}", "content-type": "text/plain"}),
    ("/v1/tools/store", b"{}", {"origin": "https://evil.example"}),
    ("/v1/tools/store", b"{}", {"cookie": "memstream_console=forged"}),
]


class FastApiCalls:
    """Counts the tool-route requests that reach FastAPI's own ``__call__``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tool_calls = 0
        original = FastAPI.__call__

        async def counting(app: FastAPI, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and tool_route.tool_of(scope["path"]) is not None:
                self.tool_calls += 1
            await original(app, scope, receive, send)

        monkeypatch.setattr(FastAPI, "__call__", counting)


def answer(client: httpx.Client, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, list[Any], bytes]:
    sent = {"content-type": "application/json", **headers}
    r = client.post(path, content=body, headers=sent)
    kept = [(k, v) for k, v in r.headers.multi_items() if k not in ("date", "server")]
    return r.status_code, kept, r.content


def both_ways(
    server: ServerThread, calls: list[tuple[str, bytes, dict[str, str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each call answered by the lean path and by FastAPI's stack, the same, and only the
    second through FastAPI."""
    spy = FastApiCalls(monkeypatch)
    lean = server.app.lean
    assert lean is not None
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for path, body, headers in calls:
            server.app.lean = lean
            got = answer(client, path, body, headers)
            assert spy.tool_calls == 0, path
            server.app.lean = None
            try:
                expected = answer(client, path, body, headers)
            finally:
                server.app.lean = lean
            assert spy.tool_calls == 1, path
            spy.tool_calls = 0
            assert got == expected, (path, body, headers)


@pytest.fixture
def acl_server(tmp_path: Path) -> Iterator[ServerThread]:
    with ServerThread(acl_settings(tmp_path)) as server:
        yield server


def test_tool_calls_take_the_lean_path_and_answer_as_fastapi_does(
    http_server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    both_ways(http_server, PLAIN_CALLS, monkeypatch)


def test_acl_mode_guards_the_lean_path_as_the_middleware_stack_does(
    acl_server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    both_ways(acl_server, ACL_CALLS, monkeypatch)


def test_a_stored_answer_replayed_by_command_id_is_the_same_either_way(http_server: ServerThread) -> None:
    """A store over FastAPI's stack, then its retry (the same Idempotency-Key) over the lean
    path: the retry gets the first answer, byte for byte (and the reverse with another key)."""
    lean = http_server.app.lean
    with httpx.Client(base_url=http_server.url, timeout=30) as client:
        for first_lean in (False, True):
            key = {"idempotency-key": f"k-{first_lean}"}
            body = b'{"agent_id": "i", "content": "the deploy key rotates"}'
            http_server.app.lean = lean if first_lean else None
            first = answer(client, "/v1/tools/store", body, key)
            http_server.app.lean = None if first_lean else lean
            again = answer(client, "/v1/tools/store", b'{"agent_id": "i", "content": "other"}', key)
            http_server.app.lean = lean
            assert first[0] == 200 and again == first


def test_an_unexpected_error_is_a_500_in_the_failure_shape_either_way(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(tool_route, "run_tool", broken)
    with ServerThread(settings) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        lean = server.app.lean
        got = answer(client, "/v1/tools/check_health", b"{}", {})
        server.app.lean = None
        expected = answer(client, "/v1/tools/check_health", b"{}", {})
        server.app.lean = lean
    assert got == expected
    assert got[0] == 500 and got[2] == b'{"ok":false,"error":"internal error; the server log has the details"}'
