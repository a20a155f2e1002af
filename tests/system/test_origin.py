"""No web page may drive a server (issue 17, item 1): every route of `memstream serve`, embedded
and `--kafka`, refuses a Host outside the allowlist and a cross-site Origin (403), and the tool
and context routes refuse bodies that are not JSON (415), through the HTTP API and MCP, before
anything runs or is written. Requests are sent as curl would, one header at a time.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from memstream.api.services.settings import load_settings
from tests.support.deployment import shared_deployment
from tests.support.servers import ServerThread, log_end

MCP_HEADERS = {
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2025-11-25",
}
# What a browser sends without a CORS preflight (and no type at all: a fetch of a Blob).
SIMPLE_TYPES = ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data")


@dataclass
class Target:
    mode: str
    url: str
    server: ServerThread | None  # embedded: its log's end can be read

    @property
    def port(self) -> str:
        return self.url.rsplit(":", 1)[1]

    def stored(self, agent: str) -> int:
        """How many memories ``agent`` holds, asked properly."""
        r = httpx.post(f"{self.url}/v1/tools/list_memories", json={"agent_id": agent}, timeout=60)
        assert r.status_code == 200, r.text
        return int(r.json()["count"])

    def log_end(self) -> tuple[int, int] | None:
        return None if self.server is None else log_end(self.server)


@pytest.fixture(scope="module", params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    if request.param == "embedded":
        settings = load_settings(env={}, data_dir=tmp_path_factory.mktemp("origin") / "data", sync="NORMAL")
        with ServerThread(settings) as srv:
            yield Target("embedded", srv.url, srv)
    else:
        with shared_deployment() as url:
            yield Target("kafka", url, None)


def _agent() -> str:
    return f"victim-{uuid.uuid4().hex[:8]}"


def _store_body(agent: str) -> bytes:
    """A store of new content (the same content twice is skipped as a duplicate)."""
    return json.dumps({"agent_id": agent, "content": f"written by a web page {uuid.uuid4().hex}"}).encode()


def _mcp_store(agent: str) -> bytes:
    params = {"name": "store", "arguments": {"agent_id": agent, "content": f"written by a web page {uuid.uuid4().hex}"}}
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).encode()


def _assert_refused(r: httpx.Response, status: int, error: str) -> None:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["ok"] is False and body["error"].startswith(error), body


def test_a_body_a_browser_sends_without_preflight_is_refused(target: Target) -> None:
    agent = _agent()
    before = target.log_end()
    with httpx.Client(base_url=target.url, timeout=60) as http:
        for path in ("/v1/tools/store", "/context/packet", "/context/package"):
            body = _store_body(agent) if path.endswith("store") else json.dumps({"agent_id": agent}).encode()
            for kind in SIMPLE_TYPES:
                r = http.post(path, content=body, headers={"content-type": kind, "origin": target.url})
                _assert_refused(r, 415, "unsupported_media_type")
            _assert_refused(http.post(path, content=body), 415, "unsupported_media_type")  # no type at all
        # MCP refuses them too (the SDK's own check, as before).
        r = http.post("/mcp", content=_mcp_store(agent), headers={**MCP_HEADERS, "content-type": "text/plain"})
        assert r.status_code in (400, 415), r.text
    assert target.log_end() == before  # nothing written, not even an audit record
    assert target.stored(agent) == 0
    with httpx.Client(base_url=target.url, timeout=60) as http:
        for kind in ("application/json", "application/json; charset=utf-8", "application/merge-patch+json"):
            r = http.post("/v1/tools/store", content=_store_body(agent), headers={"content-type": kind})
            assert r.status_code == 200 and r.json()["result"] == "stored", (kind, r.text)
    assert target.stored(agent) == 3


def test_a_foreign_host_is_refused_on_every_route(target: Target) -> None:
    """DNS rebinding: the page's own name in Host. Nothing is answered, read or written."""
    agent = _agent()
    assert httpx.post(f"{target.url}/v1/tools/store", content=_store_body(agent), headers=MCP_HEADERS).is_success
    before = target.log_end()
    evil = {"host": f"evil.example:{target.port}"}
    posts = [
        ("/v1/tools/list_memories", json.dumps({"agent_id": agent}).encode()),
        ("/v1/tools/store", _store_body(agent)),
        ("/context/packet", json.dumps({"agent_id": agent, "query": "x"}).encode()),
        ("/mcp", _mcp_store(agent)),
    ]
    gets = ["/health", "/"]
    if target.mode == "embedded":  # routes only the embedded server has
        gets += ["/metrics", "/audit", f"/audit?agent={agent}", "/audit/memory/mem:1", "/openapi.json"]
    with httpx.Client(base_url=target.url, timeout=60) as http:
        for path, body in posts:
            r = http.post(path, content=body, headers={**MCP_HEADERS, **evil})
            _assert_refused(r, 403, "forbidden: Host")
            assert "written by a web page" not in r.text
        for path in gets:
            _assert_refused(http.get(path, headers=evil), 403, "forbidden: Host")
        assert target.log_end() == before
        assert target.stored(agent) == 1
        # Loopback names, with or without the port, are answered.
        hosts = (
            "localhost",
            f"localhost:{target.port}",
            "127.0.0.1",
            f"127.0.0.1:{target.port}",
            f"[::1]:{target.port}",
        )
        for host in hosts:
            assert http.get("/health", headers={"host": host}).status_code == 200, host
            r = http.post("/mcp", content=_mcp_store(agent), headers={**MCP_HEADERS, "host": host})
            assert r.status_code == 200 and "stored" in r.text, (host, r.text)
    assert target.stored(agent) == 1 + len(hosts)


def test_a_cross_site_origin_is_refused(target: Target) -> None:
    agent = _agent()
    before = target.log_end()
    with httpx.Client(base_url=target.url, timeout=60) as http:
        for origin in (
            "http://evil.example",
            f"http://evil.example:{target.port}",
            "null",
            "https://127.0.0.1.evil.example",
        ):
            r = http.post("/v1/tools/store", content=_store_body(agent), headers={**MCP_HEADERS, "origin": origin})
            _assert_refused(r, 403, "forbidden: Origin")
            r = http.post("/mcp", content=_mcp_store(agent), headers={**MCP_HEADERS, "origin": origin})
            _assert_refused(r, 403, "forbidden: Origin")
            _assert_refused(http.get("/health", headers={"origin": origin}), 403, "forbidden: Origin")
        assert target.log_end() == before
        assert target.stored(agent) == 0
        # The server's own pages (any loopback origin, as the MCP face always allowed) may call it.
        for origin in (target.url, f"http://localhost:{target.port}", "http://127.0.0.1"):
            r = http.post("/v1/tools/store", content=_store_body(agent), headers={**MCP_HEADERS, "origin": origin})
            assert r.status_code == 200, (origin, r.text)
            r = http.post("/mcp", content=_mcp_store(agent), headers={**MCP_HEADERS, "origin": origin})
            assert r.status_code == 200 and "stored" in r.text, (origin, r.text)
    assert target.stored(agent) == 6


@pytest.fixture(scope="module")
def configured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    env = {
        "MEMSTREAM_ALLOWED_HOSTS": "memstream.internal, 10.9.8.7",
        "MEMSTREAM_ALLOWED_ORIGINS": "https://console.example",
    }
    settings = load_settings(env=env, data_dir=tmp_path_factory.mktemp("origin-cfg") / "data", sync="NORMAL")
    with ServerThread(settings) as srv:
        yield srv


def test_configured_hosts_and_origins_are_answered_on_both_faces(configured: ServerThread) -> None:
    """MEMSTREAM_ALLOWED_HOSTS / _ORIGINS widen the allowlist for the HTTP API and the MCP
    face's own check alike (before, /mcp answered loopback Host names only)."""
    port = configured.url.rsplit(":", 1)[1]
    agent = _agent()
    with httpx.Client(base_url=configured.url, timeout=60) as http:
        for headers in (
            {"host": f"memstream.internal:{port}"},
            {"host": "10.9.8.7"},
            {"origin": "https://console.example"},
            {"host": "memstream.internal", "origin": f"http://memstream.internal:{port}"},
        ):
            r = http.post("/v1/tools/store", content=_store_body(agent), headers={**MCP_HEADERS, **headers})
            assert r.status_code == 200, (headers, r.text)
            r = http.post("/mcp", content=_mcp_store(agent), headers={**MCP_HEADERS, **headers})
            assert r.status_code == 200 and "stored" in r.text, (headers, r.text)
        for headers in (
            {"host": "other.internal"},
            {"origin": "https://console.example:8443"},
            {"origin": "http://10.9.8.6"},
        ):
            for path, body in (("/v1/tools/store", _store_body(agent)), ("/mcp", _mcp_store(agent))):
                r = http.post(path, content=body, headers={**MCP_HEADERS, **headers})
                _assert_refused(r, 403, "forbidden")
    assert httpx.post(f"{configured.url}/v1/tools/list_memories", json={"agent_id": agent}).json()["count"] == 8


def test_refusals_are_not_audited(target: Target) -> None:
    """A refused request never reaches dispatch: a call dispatch would refuse and audit (an
    unknown argument) leaves no audit record when it comes as text/plain or from another
    site; the same call sent properly leaves one (both modes)."""
    agent = _agent()
    bad = json.dumps({"agent_id": agent, "content": "x", "colour": "blue"}).encode()
    with httpx.Client(base_url=target.url, timeout=60) as http:
        for headers in (
            {"content-type": "text/plain"},
            {**MCP_HEADERS, "host": "evil.example"},
            {**MCP_HEADERS, "origin": "http://evil.example"},
        ):
            assert http.post("/v1/tools/store", content=bad, headers=headers).status_code in (403, 415)
        assert http.post("/v1/tools/store", content=bad, headers=MCP_HEADERS).status_code == 400  # the control
        records: list[dict[str, Any]] = []
        for _ in range(150):  # Kafka mode: until the worker's audit record is readable
            r = http.post("/v1/tools/audit_log", json={"agent_id": agent, "kind": "all"})
            assert r.status_code == 200, r.text
            records = r.json()["records"]
            if records:
                break
            time.sleep(0.2)
    assert [rec["tool"] for rec in records] == ["store"], records
