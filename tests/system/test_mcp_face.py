"""The MCP face over its real transports: stdio (a subprocess) and streamable HTTP (uvicorn).

Everything binds 127.0.0.1 on ephemeral ports, waits carry deadlines, and whatever a test starts
is stopped by the test. A tool of this file (``mcp_face_echo``) is registered for the duration
of a test (and in the stdio subprocess through a launcher script), so the face is exercised
whether or not the real tool handlers are installed. When ``store`` is registered, it is called
too, together with ``get_contents``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import uuid
from asyncio.subprocess import PIPE
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import uvicorn
from fastapi import FastAPI
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.routing import Route

from memstream.api.faces.mcp import (
    McpHttpApp,
    build_server,
    streamable_http_app,
)
from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import load_settings
from memstream.api.tools.registry import REGISTRY, Caller, Tool, ToolArgs

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 60.0
ECHO = "mcp_face_echo"


# -- a tool of our own --------------------------------------------------------------------------


class EchoArgs(ToolArgs):
    text: str
    times: int = 1


async def _echo(engine: Any, caller: Caller, args: EchoArgs) -> dict[str, Any]:
    return {"echo": args.text * args.times, "client_id": caller.client_id, "session_id": caller.session_id}


ECHO_TOOL = Tool(
    name=ECHO,
    args=EchoArgs,
    handler=_echo,
    description="Test tool of tests/system/test_mcp_face.py: echoes text.",
)


def register_echo() -> None:
    """Used by the stdio launcher script (a fresh process) as well as by the fixture."""
    REGISTRY[ECHO] = ECHO_TOOL


@pytest.fixture
def echo_tool():
    assert ECHO not in REGISTRY
    register_echo()
    try:
        yield ECHO_TOOL
    finally:
        REGISTRY.pop(ECHO, None)


# -- helpers ------------------------------------------------------------------------------------


def _engine_env(tmp_path: Path) -> dict[str, str]:
    # MEMSTREAM_EMBEDDER=none: stores go in without vectors, so no model is loaded. What these
    # tests check is the transport, not retrieval.
    return {
        "MEMSTREAM_DATA_DIR": str(tmp_path / "data"),
        "MEMSTREAM_SYNC": "NORMAL",
        "MEMSTREAM_PARTITIONS": "4",
        "MEMSTREAM_EMBEDDER": "none",
    }


def _payload(result: Any) -> dict[str, Any]:
    """The JSON dict a tools/call answered: exactly one text block, not flagged isError."""
    assert len(result.content) == 1, result
    block = result.content[0]
    assert block.type == "text"
    assert result.is_error is False
    body = json.loads(block.text)
    assert isinstance(body, dict)
    return body


def _assert_failure(body: dict[str, Any], *needles: str) -> None:
    assert body.get("ok") is False, body
    assert isinstance(body.get("error"), str) and body["error"], body
    for needle in needles:  # dispatch owns the wording (e.g. "Unknown tool: X", as CPersona): match loosely
        assert needle.lower() in body["error"].lower(), body


async def _exercise(client: Client, *, client_id: str, session_prefix: str | None = None) -> set[str]:
    """The checks both transports share; returns the listed tool names."""
    # "legacy" is the initialize handshake; "auto" settles on the 2026-07-28 single-exchange era.
    assert client.protocol_version in (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)
    listed = await client.list_tools()
    tools = {t.name: t for t in listed.tools}
    assert ECHO in tools
    assert tools[ECHO].description == ECHO_TOOL.description
    assert tools[ECHO].input_schema == ECHO_TOOL.schema()  # list_tools() verbatim

    body = _payload(await client.call_tool(ECHO, {"text": "ab", "times": 2}))
    assert body["echo"] == "abab"
    assert body["client_id"] == client_id
    if session_prefix is not None:
        assert body["session_id"].startswith(session_prefix)

    # Arguments that fail validation reach dispatch and come back as its failure dict.
    _assert_failure(_payload(await client.call_tool(ECHO, {"times": "many"})), "invalid arguments", "text")
    _assert_failure(_payload(await client.call_tool(ECHO, {"text": "x", "surprise": 1})), "surprise")
    _assert_failure(_payload(await client.call_tool(ECHO, None)), "text")
    # An unknown tool goes through dispatch too.
    _assert_failure(_payload(await client.call_tool("no_such_tool", {"a": 1})), "unknown tool: no_such_tool")

    if "store" in tools:
        await _store_and_read(client, tools)
    return set(tools)


async def _store_and_read(client: Client, tools: dict[str, Any]) -> None:
    schema = tools["store"].input_schema
    content = f"the MCP face stored this sentence ({uuid.uuid4().hex[:8]})"
    args: dict[str, Any] = {"agent_id": "mcp-face-agent", "content": content}
    unknown = set(schema.get("required", [])) - set(args)
    assert not unknown, f"store requires arguments this test does not know: {unknown}"
    stored = _payload(await client.call_tool("store", args))
    assert stored.get("result") == "stored", stored
    assert "error" not in stored
    ref = stored["id"]

    again = _payload(await client.call_tool("store", args))  # W3: same content, same scope
    assert again.get("result") == "skipped" and again["id"] == ref, again

    bad = _payload(await client.call_tool("store", {"agent_id": "mcp-face-agent", "content": 42}))
    # seed 000 §10: store explains a rejection in `reason` (W1, W7)
    assert bad.get("ok") is False and bad.get("result") == "rejected" and bad.get("reason"), bad

    if "get_contents" in tools:
        # CPersona's shape: get_contents(agent_id, refs=["mem:<id>", ...]) -> {items, missing, count}
        mem_ref = ref if isinstance(ref, str) and ref.startswith("mem:") else f"mem:{ref}"
        got = _payload(await client.call_tool("get_contents", {"agent_id": "mcp-face-agent", "refs": [mem_ref]}))
        assert "error" not in got and "ok" not in got, got  # W7: a successful read carries no ok
        assert content in json.dumps(got), got
        refused = _payload(await client.call_tool("get_contents", {"agent_id": "mcp-face-agent", "refs": mem_ref}))
        _assert_failure(refused)


# -- unit-sized checks ------------------------------------------------------------------------------


async def test_in_process(tmp_path, echo_tool):
    """build_server on its own, with a custom caller factory, connected in-process."""
    engine = EmbeddedEngine(load_settings(env=_engine_env(tmp_path)))
    await engine.start()
    try:
        async with asyncio.timeout(DEADLINE_S), Client(build_server(engine, lambda _r: Caller("inproc"))) as client:
            body = _payload(await client.call_tool(ECHO, {"text": "hi"}))
            assert body["client_id"] == "inproc"
            _assert_failure(_payload(await client.call_tool("nope")), "unknown tool: nope")
    finally:
        await engine.close()


# -- stdio --------------------------------------------------------------------------------------

_LAUNCHER = """\
import sys
sys.path.insert(0, {repo!r})
from tests.system import test_mcp_face
test_mcp_face.register_echo()
from memstream.api.cli.mcp_stdio import main
main()
"""


@contextlib.asynccontextmanager
async def _stdio_client(tmp_path: Path, args: list[str], mode: str, extra_env: dict[str, str]) -> AsyncIterator[Client]:
    env = {**_engine_env(tmp_path), **extra_env}
    errlog_path = tmp_path / f"stderr-{len(list(tmp_path.glob('stderr-*')))}.log"
    params = StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(tmp_path))
    with errlog_path.open("w") as errlog:
        try:
            async with asyncio.timeout(DEADLINE_S), Client(stdio_client(params, errlog=errlog), mode=mode) as client:
                yield client
        except BaseException:
            errlog.flush()
            sys.stderr.write(errlog_path.read_text())
            raise
    # The client closed stdin and waited for the process to exit: the engine must have closed
    # cleanly (a checkpoint) rather than been killed.
    assert "engine closed" in errlog_path.read_text(), errlog_path.read_text()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_stdio(tmp_path, mode):
    launcher = tmp_path / "launch_mcp.py"
    launcher.write_text(_LAUNCHER.format(repo=str(REPO)))
    async with _stdio_client(tmp_path, [str(launcher)], mode, {"MEMSTREAM_CLIENT_ID": "stdio-agent-7"}) as client:
        if mode == "legacy":
            assert client.server_info is not None and client.server_info.name == "memstream"
            assert client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
        else:
            assert client.protocol_version in MODERN_PROTOCOL_VERSIONS
        await _exercise(client, client_id="stdio-agent-7", session_prefix="stdio-")


async def test_stdio_raw_frames(tmp_path):
    """What the SDK client cannot send, written to the server's stdin as raw JSON-RPC lines.

    The SDK's stdio reader drops a frame it cannot parse without answering it, so the
    unpaired-surrogate case used to leave the client waiting forever.
    """
    launcher = tmp_path / "launch_mcp.py"
    launcher.write_text(_LAUNCHER.format(repo=str(REPO)))
    env = {**os.environ, **_engine_env(tmp_path), "MEMSTREAM_CLIENT_ID": "raw-stdio"}
    with (tmp_path / "stderr.log").open("w") as errlog:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(launcher), stdin=PIPE, stdout=PIPE, stderr=errlog, env=env, cwd=str(tmp_path)
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            async with asyncio.timeout(DEADLINE_S):

                async def request(msg: dict[str, Any]) -> dict[str, Any]:
                    assert proc.stdin is not None and proc.stdout is not None
                    proc.stdin.write(json.dumps(msg).encode("ascii") + b"\n")  # escapes the surrogates
                    await proc.stdin.drain()
                    if "id" not in msg:
                        return {}
                    answer: dict[str, Any] = json.loads(await proc.stdout.readline())
                    assert answer["id"] == msg["id"], answer
                    return answer

                def call(i: int, name: str, arguments: Any) -> dict[str, Any]:
                    params = {"name": name, "arguments": arguments}
                    return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params}

                init = {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                }
                await request({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
                await request({"jsonrpc": "2.0", "method": "notifications/initialized"})

                # An unpaired surrogate gets an answer (not a hang), and it is a refusal: no
                # argument that cannot be stored as UTF-8 reaches a tool.
                echoed = await request(call(2, ECHO, {"text": "a\udfffb"}))
                body = json.loads(echoed["result"]["content"][0]["text"])
                _assert_failure(body, "not valid UTF-8")

                for i, arguments in enumerate(([1, 2], "text", 3), start=3):
                    result = (await request(call(i, ECHO, arguments)))["result"]
                    _assert_failure(json.loads(result["content"][0]["text"]), "arguments must be a JSON object")

                listed = (await request({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}))["result"]
                if any(t["name"] == "store" for t in listed["tools"]):
                    stored = await request(call(10, "store", {"agent_id": "raw", "content": "bad \ud800 text"}))
                    refused = json.loads(stored["result"]["content"][0]["text"])
                    assert refused["ok"] is False and refused["result"] == "rejected", refused
                proc.stdin.close()
                assert await proc.wait() == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert "engine closed" in (tmp_path / "stderr.log").read_text()


@pytest.mark.parametrize("args", [["-m", "memstream.api.cli", "mcp"]], ids=["cli"])
async def test_stdio_entry_points(tmp_path, args):
    """The real entry points (no test tool): initialize, list, an unknown tool; stdout stays clean."""
    async with _stdio_client(tmp_path, args, "legacy", {}) as client:
        assert client.server_info is not None and client.server_info.name == "memstream"
        listed = await client.list_tools()
        assert ECHO not in {t.name for t in listed.tools}
        _assert_failure(_payload(await client.call_tool("no_such_tool", {})), "unknown tool")
        if any(t.name == "store" for t in listed.tools):
            await _store_and_read(client, {t.name: t for t in listed.tools})


# -- streamable HTTP ----------------------------------------------------------------------------


def _fastapi_app(tmp_path: Path) -> FastAPI:
    """The app docs/mcp.md describes: its lifespan owns the engine and runs MCP's."""
    engine = EmbeddedEngine(load_settings(env=_engine_env(tmp_path)))
    mcp_app, mcp_lifespan = streamable_http_app(engine)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await engine.start()
        try:
            async with mcp_lifespan():
                yield
        finally:
            await engine.close()

    app = FastAPI(lifespan=lifespan)
    app.router.routes.append(Route("/mcp", endpoint=mcp_app, include_in_schema=False))

    @app.get("/ping")
    async def ping() -> dict[str, str]:
        return {"pong": "yes"}

    return app


@contextlib.asynccontextmanager
async def _uvicorn(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1:<ephemeral>; yields the base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(30):
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError("uvicorn exited before it started")
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        async with asyncio.timeout(30):
            await task


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_streamable_http(tmp_path, echo_tool, mode):
    async with asyncio.timeout(DEADLINE_S), _uvicorn(_fastapi_app(tmp_path)) as base:
        for headers, expected in (
            ({"X-Client-Id": "alice"}, "alice"),
            ({"Authorization": "Bearer tok-123", "X-Client-Id": "alice"}, "tok-123"),
            ({}, "anonymous"),
        ):
            async with (
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http,
                Client(streamable_http_client(f"{base}/mcp", http_client=http), mode=mode) as client,
            ):
                if mode == "legacy":
                    assert client.server_info is not None and client.server_info.name == "memstream"
                    assert client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
                else:
                    assert client.protocol_version in MODERN_PROTOCOL_VERSIONS
                await _exercise(client, client_id=expected)


async def _raw_call(http: httpx.AsyncClient, url: str, arguments: Any, **headers: str) -> httpx.Response:
    # ensure_ascii: a lone surrogate travels as a JSON escape (the SDK client cannot send one at all)
    params = {"name": ECHO, "arguments": arguments}
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params})
    return await http.post(
        url,
        content=body.encode("ascii"),
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25",
            **headers,
        },
    )


async def test_streamable_http_raw(tmp_path, echo_tool):
    """What the SDK client cannot send: non-object arguments; plus Host checks and the exact path."""
    async with (
        asyncio.timeout(DEADLINE_S),
        _uvicorn(_fastapi_app(tmp_path)) as base,
        httpx.AsyncClient(timeout=30, follow_redirects=False) as http,
    ):
        url = f"{base}/mcp"
        for arguments in ([1, 2], "text", 3):
            resp = await _raw_call(http, url, arguments)
            assert resp.status_code == 200, resp.text
            msg = resp.json()
            assert msg["id"] == 7 and "error" not in msg, msg
            result = msg["result"]
            assert result.get("isError") in (None, False)
            _assert_failure(json.loads(result["content"][0]["text"]), "arguments must be a JSON object")

        ok = (await _raw_call(http, url, {"text": "z"}, **{"X-Client-Id": "raw"})).json()["result"]
        assert json.loads(ok["content"][0]["text"]) == {"echo": "z", "client_id": "raw", "session_id": ""}

        # A lone surrogate: refused in the failure shape, never a parse error or a hang.
        echoed = (await _raw_call(http, url, {"text": "a\udfffb"})).json()["result"]
        _assert_failure(json.loads(echoed["content"][0]["text"]), "not valid UTF-8")

        # Loopback names are accepted with and without a port; anything else is refused (DNS rebinding).
        port = base.rsplit(":", 1)[1]
        for host in ("localhost", f"localhost:{port}", "127.0.0.1", f"127.0.0.1:{port}"):
            assert (await _raw_call(http, url, {"text": "h"}, Host=host)).status_code == 200, host
        assert (await _raw_call(http, url, {"text": "h"}, Host="evil.example")).status_code == 421
        assert (await _raw_call(http, url, {"text": "h"}, Origin="http://evil.example")).status_code == 403

        # The rest of the host app is untouched.
        assert (await http.get(f"{base}/ping")).json() == {"pong": "yes"}


async def test_http_app_outside_its_lifespan_answers_503(tmp_path):
    app = McpHttpApp(engine=None)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        resp = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert resp.status_code == 503
    assert resp.json()["error"]["message"] == "MCP endpoint not running"
