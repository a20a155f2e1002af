"""MCP resources and subscriptions (issue 18, the MCP bullet), through the SDK's real clients:
``memstream mcp`` as a process over stdio, and streamable HTTP against a real server on
loopback. Resources list and read through the tools (so the ACL applies); a store by another
client notifies the subscribed resource and no other; unsubscribing (or leaving a listen
stream, or ending the session) releases the feed subscription. docs/mcp.md, "Resources and
subscriptions"."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from memstream.api.faces.mcp_resources import memories_uri, memory_uri
from memstream.api.services.settings import load_settings
from tests.support.acl import TOKENS, write_acl
from tests.support.servers import ServerThread

DEADLINE_S = 90.0
WAIT_S = 20.0  # longest wait for one notification (another process's store is seen within ~0.5 s)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _env(data: Path) -> dict[str, str]:
    return {
        "MEMSTREAM_DATA_DIR": str(data),
        "MEMSTREAM_SYNC": "NORMAL",
        "MEMSTREAM_PARTITIONS": "4",
        "MEMSTREAM_EMBEDDER": "none",
    }


def _body(result: types.CallToolResult) -> dict[str, Any]:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    body: dict[str, Any] = json.loads(block.text)
    return body


def _json(result: types.ReadResourceResult) -> dict[str, Any]:
    assert len(result.contents) == 1
    block = result.contents[0]
    assert isinstance(block, types.TextResourceContents) and block.mime_type == "application/json"
    body: dict[str, Any] = json.loads(block.text)
    return body


class Notes:
    """The resource-updated notifications a client received, in order."""

    def __init__(self) -> None:
        self.uris: list[str] = []
        self._arrived = asyncio.Condition()

    async def handler(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            async with self._arrived:
                self.uris.append(message.params.uri)
                self._arrived.notify_all()

    async def wait_for(self, uri: str, after: int = 0) -> int:
        """Wait until ``uri`` is announced at an index >= ``after``; answer that index."""
        async with asyncio.timeout(WAIT_S), self._arrived:
            while True:
                for i in range(after, len(self.uris)):
                    if self.uris[i] == uri:
                        return i
                await self._arrived.wait()


async def _store(client: Client, agent: str, content: str) -> int:
    body = _body(await client.call_tool("store", {"agent_id": agent, "content": content}))
    assert body.get("result") == "stored", body
    return int(body["id"])


async def _update(client: Client, agent: str, memory_id: int, content: str) -> None:
    args = {"agent_id": agent, "memory_id": memory_id, "content": content}
    body = _body(await client.call_tool("update_memory", args))
    assert body.get("ok") is not False, body


@contextlib.asynccontextmanager
async def _stdio(
    data: Path, tmp: Path, mode: str, notes: Notes | None = None, acl: Path | None = None
) -> AsyncIterator[Client]:
    env = _env(data) if acl is None else {**_env(data), "MEMSTREAM_ACL_FILE": str(acl)}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memstream.api.cli", "mcp"], env=env, cwd=str(tmp)
    )
    errlog_path = tmp / f"stderr-{len(list(tmp.glob('stderr-*')))}.log"
    with errlog_path.open("w") as errlog:
        try:
            async with Client(
                stdio_client(params, errlog=errlog), mode=mode, message_handler=notes.handler if notes else None
            ) as client:
                yield client
        except BaseException:
            errlog.flush()
            sys.stderr.write(errlog_path.read_text())
            raise
    # Subscriptions still open when stdin closed did not keep the engine from closing cleanly.
    assert "engine closed" in errlog_path.read_text(), errlog_path.read_text()


# -- stdio --------------------------------------------------------------------------------------


async def test_stdio_resources_and_legacy_subscriptions(tmp_path: Path) -> None:
    """Handshake era over stdio: list, templates, read, and resources/subscribe, with the stores
    made by a second ``memstream mcp`` process on the same data directory."""
    data = tmp_path / "data"
    notes = Notes()
    async with asyncio.timeout(DEADLINE_S):
        async with _stdio(data, tmp_path, "legacy", notes) as watcher, _stdio(data, tmp_path, "legacy") as writer:
            assert watcher.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
            caps = watcher.server_capabilities.resources
            assert caps is not None and caps.subscribe is True

            first = await _store(writer, "a1", "the kettle is in the left cupboard")
            await _store(writer, "a2", "a2 keeps bees")

            templates = await watcher.list_resource_templates()
            assert {t.uri_template for t in templates.resource_templates} >= {
                "memstream://agents/{agent_id}/memories",
                "memstream://agents/{agent_id}/memories/{memory_id}",
            }
            listed = {r.uri for r in (await watcher.list_resources()).resources}
            assert {memories_uri("a1"), memories_uri("a2")} <= listed

            page = _json(await watcher.read_resource(memories_uri("a1")))
            assert [m["content"] for m in page["memories"]] == ["the kettle is in the left cupboard"]

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                await watcher.subscribe_resource(memories_uri("a1"))
                await watcher.subscribe_resource(memory_uri("a1", first))

            # A new memory of a1: the list changed, the watched memory did not; a2 is not watched.
            await _store(writer, "a2", "a2 keeps more bees")
            second = await _store(writer, "a1", "the tea is next to the kettle")
            at = await notes.wait_for(memories_uri("a1"))
            assert memory_uri("a1", first) not in notes.uris
            assert not any("/a2/" in u for u in notes.uris)

            # An edit of the watched memory: its own URI (and the list, which shows contents).
            await _update(writer, "a1", first, "the kettle is in the right cupboard")
            await notes.wait_for(memory_uri("a1", first), after=at + 1)
            one = _json(await watcher.read_resource(memory_uri("a1", first)))
            assert one["memory"]["content"] == "the kettle is in the right cupboard"
            assert [v["content"] for v in one["versions"]] == [
                "the kettle is in the left cupboard",
                "the kettle is in the right cupboard",
            ]

            # Unsubscribed from the list: an edit of another memory announces nothing, and a
            # later edit of the watched one is announced alone.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                await watcher.unsubscribe_resource(memories_uri("a1"))
            seen = len(notes.uris)
            await _update(writer, "a1", second, "the tea moved")
            await _update(writer, "a1", first, "the kettle broke")
            await notes.wait_for(memory_uri("a1", first), after=seen)
            assert notes.uris[seen:] == [memory_uri("a1", first)]

            # Bad URIs and missing records are MCP errors with the reason.
            with pytest.raises(MCPError, match="unknown resource"):
                await watcher.read_resource("memstream://agents/a1/nothing")
            with pytest.raises(MCPError, match="mem:999999"):
                await watcher.read_resource(memory_uri("a1", 999_999))


async def test_stdio_modern_listen(tmp_path: Path) -> None:
    """2026-07-28 over stdio: subscriptions/listen carries the updates of the URIs it names."""
    data = tmp_path / "data"
    async with asyncio.timeout(DEADLINE_S):
        async with _stdio(data, tmp_path, "auto") as client:
            assert client.protocol_version in MODERN_PROTOCOL_VERSIONS
            mid = await _store(client, "a1", "first words")
            async with client.listen(resource_subscriptions=[memory_uri("a1", mid)]) as sub:
                assert sub.honored.resource_subscriptions == [memory_uri("a1", mid)]
                assert not sub.honored.tools_list_changed
                await _store(client, "a1", "not the watched one")
                await _update(client, "a1", mid, "second words")
                async with asyncio.timeout(WAIT_S):
                    event = await anext(sub)
                assert event == ResourceUpdated(uri=memory_uri("a1", mid))


async def test_stdio_acl_local_principal_sees_its_agents_only(tmp_path: Path) -> None:
    """In ACL mode whoever spawned ``memstream mcp`` is the ``local`` principal: its grants
    (here: read alice) scope the resource list, reads and subscriptions."""
    data = tmp_path / "data"
    acl = write_acl(
        tmp_path / "acl.json", {"clients": [{"client_id": "local", "token": None, "grants": {"alice": "read"}}]}
    )
    async with asyncio.timeout(DEADLINE_S):
        async with _stdio(data, tmp_path, "legacy") as open_store:
            mid = await _store(open_store, "alice", "alice's")
            await _store(open_store, "bob", "bob's")
        notes = Notes()
        async with (
            _stdio(data, tmp_path, "legacy", notes, acl=acl) as local,
            _stdio(data, tmp_path, "legacy") as writer,
        ):
            assert {r.uri for r in (await local.list_resources()).resources} == {memories_uri("alice")}
            with pytest.raises(MCPError, match="permission_denied"):
                await local.read_resource(memories_uri("bob"))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with pytest.raises(MCPError, match="permission_denied"):
                    await local.subscribe_resource(memory_uri("bob", 1))
                await local.subscribe_resource(memory_uri("alice", mid))
            await _update(writer, "alice", mid, "alice's, edited")
            await notes.wait_for(memory_uri("alice", mid))


# -- streamable HTTP ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    root = tmp_path_factory.mktemp("mcp-resources")
    with ServerThread(load_settings(env={}, data_dir=root / "data", sync="NORMAL")) as srv:
        yield srv


def _subscribers(srv: ServerThread) -> int:
    return int(srv.app.state.engine.feed.subscribers)


async def _until(predicate: Any) -> None:
    """Wait (bounded) for a condition another thread brings about."""
    async with asyncio.timeout(WAIT_S):
        while not predicate():
            await asyncio.sleep(0.02)


async def _announced(writer: Client, notes: Notes, agent: str, memory_id: int) -> int:
    """Edit a watched memory until its update is announced; answer how many URIs were seen then.
    A session's GET stream opens on its own after initialize, and nothing sent before it opened
    reaches the client: this waits for it without a fixed sleep."""
    for attempt in range(20):
        seen = len(notes.uris)
        await _update(writer, agent, memory_id, f"edit {attempt}")
        try:
            async with asyncio.timeout(1):
                await notes.wait_for(memory_uri(agent, memory_id), after=seen)
            return len(notes.uris)
        except TimeoutError:
            continue
    raise AssertionError("no update was announced on the session's stream")


@contextlib.asynccontextmanager
async def _http(url: str, mode: str, notes: Notes | None = None, **headers: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http,
        Client(
            streamable_http_client(f"{url}/mcp", http_client=http),
            mode=mode,
            message_handler=notes.handler if notes else None,
        ) as client,
    ):
        yield client


async def test_http_session_subscriptions_and_release(server: ServerThread) -> None:
    """Handshake era over HTTP: initialize opens a session, notifications ride its GET stream,
    and ending the session releases the feed subscription."""
    notes = Notes()
    async with asyncio.timeout(DEADLINE_S):
        async with _http(server.url, "auto", **{"X-Client-Id": "writer"}) as writer:
            mid = await _store(writer, "h1", "watched by a session")
            await _until(lambda: _subscribers(server) == 0)
            async with _http(server.url, "legacy", notes, **{"X-Client-Id": "watcher"}) as watcher:
                assert watcher.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    await watcher.subscribe_resource(memory_uri("h1", mid))
                await _until(lambda: _subscribers(server) == 1)
                seen = await _announced(writer, notes, "h1", mid)
                await _store(writer, "h1", "another memory of h1")
                await _update(writer, "h1", mid, "watched, and edited")
                await notes.wait_for(memory_uri("h1", mid), after=seen)
                # Only the watched memory (a late warm-up edit's notification may repeat it).
                assert set(notes.uris[seen:]) == {memory_uri("h1", mid)}
            # The client's DELETE ended the session: its feed subscription is gone.
            await _until(lambda: _subscribers(server) == 0)


async def test_http_modern_listen_and_release(server: ServerThread) -> None:
    async with asyncio.timeout(DEADLINE_S), _http(server.url, "auto", **{"X-Client-Id": "lis"}) as client:
        assert client.protocol_version in MODERN_PROTOCOL_VERSIONS
        mid = await _store(client, "h2", "listened to")
        await _until(lambda: _subscribers(server) == 0)
        async with client.listen(resource_subscriptions=[memories_uri("h2")]) as sub:
            await _until(lambda: _subscribers(server) == 1)
            await _update(client, "h2", mid, "listened to, edited")
            async with asyncio.timeout(WAIT_S):
                assert await anext(sub) == ResourceUpdated(uri=memories_uri("h2"))
        await _until(lambda: _subscribers(server) == 0)


async def test_http_stateless_clients_keep_working(server: ServerThread) -> None:
    """A client that never sends the session id back is served statelessly, as before; it is
    told plainly that resources/subscribe needs a session."""
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        }
        opened = await http.post("/mcp", json=init, headers=headers)
        assert opened.status_code == 200 and opened.headers.get("mcp-session-id"), opened.text
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "list_memories", "arguments": {}}}
        legacy = {**headers, "MCP-Protocol-Version": "2025-11-25"}
        plain = await http.post("/mcp", json=call, headers=legacy)
        assert plain.status_code == 200 and "result" in plain.json(), plain.text
        sub = {"jsonrpc": "2.0", "id": 3, "method": "resources/subscribe", "params": {"uri": memories_uri("h1")}}
        refused = (await http.post("/mcp", json=sub, headers=legacy)).json()
        assert "Mcp-Session-Id" in refused["error"]["message"], refused
        # With the session id, the same request is accepted.
        session = {**legacy, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
        await http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        sub2 = {**sub, "params": {"uri": memories_uri("nobody-yet")}}
        accepted = (await http.post("/mcp", json=sub2, headers=session)).json()
        assert accepted.get("result") == {}, accepted
        gone = await http.delete("/mcp", headers=session)
        assert gone.status_code in (200, 204), gone.text
    await _until(lambda: _subscribers(server) == 0)


# -- ACL ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    root = tmp_path_factory.mktemp("mcp-resources-acl")
    path = write_acl(root / "acl.json", _ACL)
    settings = load_settings(env={}, data_dir=root / "data", sync="NORMAL", acl_file=path)
    with ServerThread(settings) as srv:
        yield srv


_ACL: dict[str, Any] = {
    "clients": [
        {"client_id": "admin", "token": TOKENS["admin"], "grants": {"*": "read-write"}},
        {"client_id": "r-alice", "token": TOKENS["r-alice"], "grants": {"alice": "read"}},
    ]
}


async def test_acl_scopes_list_read_and_subscribe(acl_server: ServerThread) -> None:
    admin = {"Authorization": f"Bearer {TOKENS['admin']}"}
    reader = {"Authorization": f"Bearer {TOKENS['r-alice']}"}
    async with asyncio.timeout(DEADLINE_S), _http(acl_server.url, "auto", **admin) as root:
        mid = await _store(root, "alice", "alice's note")
        await _store(root, "bob", "bob's note")
        assert {memories_uri("alice"), memories_uri("bob")} <= {r.uri for r in (await root.list_resources()).resources}
        notes = Notes()
        async with _http(acl_server.url, "legacy", notes, **reader) as client:
            assert {r.uri for r in (await client.list_resources()).resources} == {memories_uri("alice")}
            assert _json(await client.read_resource(memories_uri("alice")))["memories"][0]["content"] == "alice's note"
            with pytest.raises(MCPError, match="permission_denied"):
                await client.read_resource(memories_uri("bob"))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with pytest.raises(MCPError, match="permission_denied"):
                    await client.subscribe_resource(memories_uri("bob"))
                await client.subscribe_resource(memory_uri("alice", mid))
            await _announced(root, notes, "alice", mid)
        async with _http(acl_server.url, "auto", **reader) as modern:
            with pytest.raises(MCPError, match="permission_denied"):
                async with modern.listen(resource_subscriptions=[memories_uri("bob")]):
                    pass


_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}
_ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}


async def test_acl_binds_a_session_to_the_client_that_opened_it(acl_server: ServerThread) -> None:
    async with httpx.AsyncClient(base_url=acl_server.url, timeout=30) as http:
        reader = {**_ACCEPT, "Authorization": f"Bearer {TOKENS['r-alice']}"}
        opened = await http.post("/mcp", json=_INIT, headers=reader)
        session = opened.headers["mcp-session-id"]
        mine = {**reader, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
        await http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=mine)
        assert "result" in (await http.post("/mcp", json=_LIST, headers=mine)).json()
        theirs = {**mine, "Authorization": f"Bearer {TOKENS['admin']}"}
        stolen = await http.post("/mcp", json=_LIST, headers=theirs)
        assert stolen.status_code == 404 and stolen.json()["error"]["message"] == "Session not found"
        assert (await http.delete("/mcp", headers=theirs)).status_code == 404
        assert (await http.delete("/mcp", headers=mine)).status_code in (200, 204)


async def test_at_the_session_limit_initialize_is_served_statelessly(tmp_path: Path) -> None:
    from memstream.api.faces.mcp import McpHttpApp
    from memstream.api.services.engine import EmbeddedEngine

    engine = EmbeddedEngine(load_settings(env=_env(tmp_path / "data")))
    await engine.start()
    app = McpHttpApp(engine, max_sessions=1)
    try:
        async with asyncio.timeout(DEADLINE_S), app.lifespan():
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=30) as http:
                first = await http.post("/mcp", json=_INIT, headers=_ACCEPT)
                assert first.status_code == 200 and first.headers.get("mcp-session-id")
                second = await http.post("/mcp", json=_INIT, headers=_ACCEPT)
                assert second.status_code == 200, second.text
                assert "mcp-session-id" not in second.headers
                assert second.json()["result"]["serverInfo"]["name"] == "memstream"
    finally:
        await engine.close()
