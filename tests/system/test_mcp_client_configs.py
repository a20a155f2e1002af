"""docs/mcp-clients.md works as written (issue 20): every JSON block and `claude mcp add` line of
the page is read; each stdio snippet starts `memstream mcp` exactly as it says (command,
arguments, environment; the venv's `memstream` on PATH) and each HTTP snippet reaches a real
`memstream serve` with its URL and headers, both driven by the MCP SDK's own client: initialize,
tools/list, store, recall. Only the page's placeholders are replaced (its table says which), and
host variables (`${VAR}`, `${env:VAR}`, `${input:id}`, the shell's `$VAR`) as the host would."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.support.acl import ACL, TOKENS, write_acl
from tests.support.serve import BIN, serve_process

DOC = Path(__file__).resolve().parents[2] / "docs" / "mcp-clients.md"
DEADLINE_S = 180
DATA_DIR = "/home/me/memstream-data"
ACL_FILE = "/etc/memstream/acl.json"
BASE_URL = "http://127.0.0.1:8765"
TOKEN_REFS = ("${env:MEMSTREAM_TOKEN}", "${MEMSTREAM_TOKEN}", "${input:memstream-token}", "$MEMSTREAM_TOKEN")
HOSTS = ("Claude Desktop", "Claude Code", "Cursor", "VS Code", "Windsurf", "Any other host")
HTTP_HOSTS = HOSTS[1:]  # Claude Desktop's file starts stdio servers only (the page says why)


@dataclass(frozen=True)
class Stdio:
    host: str
    command: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Http:
    host: str
    url: str
    headers: tuple[tuple[str, str], ...]


@dataclass
class Snippets:
    stdio: list[Stdio] = field(default_factory=list)
    http: list[Http] = field(default_factory=list)


def _server_entries(block: dict[str, Any]) -> list[dict[str, Any]]:
    servers = block.get("mcpServers", block.get("servers"))
    assert isinstance(servers, dict) and servers, f"no servers in {block}"
    return list(servers.values())


def _from_json(host: str, block: dict[str, Any], out: Snippets) -> None:
    for entry in _server_entries(block):
        if "command" in entry:
            assert entry.get("type", "stdio") == "stdio", entry
            env = tuple(sorted(entry.get("env", {}).items()))
            out.stdio.append(Stdio(host, entry["command"], tuple(entry.get("args", [])), env))
        else:
            url = entry.get("url", entry.get("serverUrl"))
            assert isinstance(url, str), entry
            assert entry.get("type", "http") == "http", entry
            out.http.append(Http(host, url, tuple(sorted(entry.get("headers", {}).items()))))


def _from_claude_mcp_add(host: str, line: str, out: Snippets) -> None:
    """`claude mcp add [options] <name> -- <command> [args...]` (stdio) or `... <name> <url>`."""
    words = shlex.split(line)
    assert words[:3] == ["claude", "mcp", "add"], line
    rest = words[3:]
    tail: list[str] = []
    if "--" in rest:
        at = rest.index("--")
        rest, tail = rest[:at], rest[at + 1 :]
    transport, env, headers, positional = "stdio", [], [], []
    i = 0
    while i < len(rest):
        word = rest[i]
        if word in ("--transport", "-t"):
            transport, i = rest[i + 1], i + 2
        elif word in ("-e", "--env"):
            key, _, value = rest[i + 1].partition("=")
            env.append((key, value))
            i += 2
        elif word in ("-H", "--header"):
            name, _, value = rest[i + 1].partition(":")
            headers.append((name.strip(), value.strip()))
            i += 2
        elif word in ("-s", "--scope"):
            i += 2
        else:
            positional.append(word)
            i += 1
    if transport == "stdio":
        assert len(positional) == 1 and tail, line  # the name, then the command
        out.stdio.append(Stdio(host, tail[0], tuple(tail[1:]), tuple(sorted(env))))
    else:
        assert transport == "http" and len(positional) == 2 and not tail, line
        out.http.append(Http(host, positional[1], tuple(sorted(headers))))


def documented() -> Snippets:
    out = Snippets()
    host = ""
    for part in re.split(r"^(## .*)$", DOC.read_text(), flags=re.M):
        if part.startswith("## "):
            host = next((h for h in HOSTS if part[3:].startswith(h)), "")
            continue
        for lang, body in re.findall(r"^```(\w+)\n(.*?)^```", part, flags=re.M | re.S):
            if lang == "json":
                assert host, f"a JSON block outside a host's section:\n{body}"
                _from_json(host, json.loads(body), out)
            elif lang == "sh":
                for line in body.splitlines():
                    if line.startswith("claude mcp add"):
                        _from_claude_mcp_add(host, line, out)
    return out


def test_the_page_covers_every_host_both_transports_with_and_without_tokens() -> None:
    found = documented()
    assert {s.host for s in found.stdio} == set(HOSTS)
    assert {h.host for h in found.http} == set(HTTP_HOSTS)
    acl = [s for s in found.stdio if ("MEMSTREAM_ACL_FILE", ACL_FILE) in s.env]
    assert acl and len(acl) < len(found.stdio)  # stdio with and without access control
    with_token = [h for h in found.http if dict(h.headers).get("Authorization", "").startswith("Bearer ")]
    assert with_token and len(with_token) < len(found.http)  # HTTP with and without a token
    assert all(s.command == "memstream" for s in found.stdio)
    assert all(h.url == f"{BASE_URL}/mcp" for h in found.http)


# -- running them -------------------------------------------------------------------------------


def _filled(value: str, places: dict[str, str]) -> str:
    for placeholder, actual in places.items():
        value = value.replace(placeholder, actual)
    assert "$" not in value, f"an unexpanded variable left in {value!r}"
    return value


def _payload(result: Any) -> dict[str, Any]:
    assert not result.is_error and len(result.content) == 1, result
    body: dict[str, Any] = json.loads(result.content[0].text)
    return body


async def _store_and_recall(client: Client, agent: str, *, client_id: str | None = None) -> None:
    """tools/list, store, recall it back (and, given ``client_id``, who history says wrote it)."""
    names = {t.name for t in (await client.list_tools()).tools}
    assert {"store", "recall", "history"} <= names
    text = f"the documented configuration {uuid.uuid4().hex[:8]} stored this note about tea"
    stored = _payload(await client.call_tool("store", {"agent_id": agent, "content": text}))
    assert stored.get("result") == "stored", stored
    recalled = _payload(await client.call_tool("recall", {"agent_id": agent, "query": "documented note about tea"}))
    assert text in json.dumps(recalled), recalled
    if client_id is not None:
        events = _payload(await client.call_tool("history", {"ref": f"mem:{stored['id']}", "agent_id": agent}))
        assert f'"client_id": "{client_id}"' in json.dumps(events), events


async def _denied(client: Client, agent: str) -> None:
    body = _payload(await client.call_tool("store", {"agent_id": agent, "content": "not allowed here"}))
    assert body.get("error") == "permission_denied", body


def _acl(tmp_path: Path) -> Path:
    """The tests' ACL file, its `local` row (the stdio principal) given read-write on alice."""
    clients = [c for c in ACL["clients"] if c["client_id"] != "local"]
    clients.append({"client_id": "local", "token": None, "grants": {"alice": "read-write"}})
    return write_acl(tmp_path / "acl.json", {"clients": clients})


async def _run_stdio(snippet: Stdio, places: dict[str, str], home: Path, errlog: Path) -> None:
    env = {key: _filled(value, places) for key, value in snippet.env}
    # A host starts the process with its own small environment plus the snippet's `env`; ours
    # has the venv's bin on PATH (where `memstream` is installed) and a home of its own.
    params = StdioServerParameters(
        command=snippet.command,
        args=[_filled(a, places) for a in snippet.args],
        env={"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(home), **env},
        cwd=str(home),
    )
    with errlog.open("a") as err:
        async with asyncio.timeout(DEADLINE_S), Client(stdio_client(params, errlog=err)) as client:
            assert client.server_info is not None and client.server_info.name == "memstream"
            if "MEMSTREAM_ACL_FILE" in env:  # the `local` row's grants: alice, and nobody else
                await _store_and_recall(client, "alice")
                await _denied(client, "bob")
            else:
                await _store_and_recall(client, f"cfg-{uuid.uuid4().hex[:6]}", client_id=env["MEMSTREAM_CLIENT_ID"])


def test_stdio_snippets_start_memstream_mcp_as_written(tmp_path: Path) -> None:
    data, home = tmp_path / "data", tmp_path / "home"
    home.mkdir()
    places = {DATA_DIR: str(data), ACL_FILE: str(_acl(tmp_path))}
    distinct = {(s.command, s.args, s.env): s for s in documented().stdio}  # hosts share some verbatim
    assert len(distinct) >= 3
    for snippet in distinct.values():
        try:
            asyncio.run(_run_stdio(snippet, places, home, tmp_path / "stderr.log"))
        except BaseException:
            print((tmp_path / "stderr.log").read_text())
            raise
    assert data.joinpath("log.sqlite3").exists()  # the data directory the snippets named


async def _run_http(snippet: Http, url: str, headers: dict[str, str], agent: str, acl: bool) -> None:
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(asyncio.timeout(DEADLINE_S))
        http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)))
        client = await stack.enter_async_context(Client(streamable_http_client(url, http_client=http)))
        await _store_and_recall(client, agent)
        if acl:
            await _denied(client, "bob")


def test_http_snippets_reach_memstream_serve_as_written(tmp_path: Path) -> None:
    snippets = documented().http
    env = {"MEMSTREAM_SYNC": "NORMAL"}
    acl_env = {**env, "MEMSTREAM_ACL_FILE": str(_acl(tmp_path))}
    with (
        serve_process(["--data-dir", str(tmp_path / "open"), "--port", "0"], env) as open_server,
        serve_process(["--data-dir", str(tmp_path / "acl"), "--port", "0"], acl_env) as acl_server,
    ):
        for snippet in snippets:
            with_token = any(ref in value for _, value in snippet.headers for ref in TOKEN_REFS)
            served = acl_server if with_token else open_server
            base = served.headline.removeprefix("memstream is listening on ")
            places = {BASE_URL: base, **dict.fromkeys(TOKEN_REFS, TOKENS["rw-alice"])}
            url = _filled(snippet.url, places)
            headers = {name: _filled(value, places) for name, value in snippet.headers}
            agent = "alice" if with_token else f"cfg-{uuid.uuid4().hex[:6]}"
            asyncio.run(_run_http(snippet, url, headers, agent, with_token))
            if with_token:  # the same URL without the snippet's token is refused
                bare = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=30)
                assert bare.status_code == 401, bare.text


@pytest.mark.parametrize("line", ["claude mcp add --transport http m http://x/mcp extra", "claude mcp add m"])
def test_a_malformed_claude_mcp_add_line_is_caught(line: str) -> None:
    """The parser refuses what it does not understand instead of skipping it."""
    with pytest.raises(AssertionError):
        _from_claude_mcp_add("Claude Code", line, Snippets())
