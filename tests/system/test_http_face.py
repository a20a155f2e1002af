"""The HTTP face beyond the shared contracts: OpenAPI, status codes, Idempotency-Key, and the
real `memstream serve` command on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.servers import ServerThread, free_port, log_end


async def test_openapi_lists_every_tool_with_its_argument_schema(http_server: ServerThread) -> None:
    async with httpx.AsyncClient(base_url=http_server.url) as client:
        spec = (await client.get("/openapi.json")).json()
    store = spec["paths"]["/v1/tools/store"]["post"]
    props = store["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert {"content", "agent_id", "id", "project_id", "channel", "command_id"} <= set(props)
    for tool in ("get_contents", "list_memories", "history", "audit_log", "delete_agent_data"):
        assert f"/v1/tools/{tool}" in spec["paths"]


async def test_failure_statuses(http_server: ServerThread) -> None:
    async with httpx.AsyncClient(base_url=http_server.url) as client:
        r = await client.post("/v1/tools/delete_memory", json={"memory_id": 424242})
        assert r.status_code == 404 and r.json()["ok"] is False
        r = await client.post("/v1/tools/store", json={"agent_id": "s", "content": 5})
        assert r.status_code == 400
        r = await client.post("/v1/tools/nope", json={})
        assert r.status_code == 404
        r = await client.get("/health")
        assert r.status_code == 200 and r.json()["status"] == "healthy"


async def test_idempotency_key_header_is_a_command_id(http_server: ServerThread) -> None:
    async with httpx.AsyncClient(base_url=http_server.url) as client:
        headers = {"Idempotency-Key": "k-1"}
        first = (await client.post("/v1/tools/store", json={"agent_id": "i", "content": "one"}, headers=headers)).json()
        end = log_end(http_server)[0]
        again = (await client.post("/v1/tools/store", json={"agent_id": "i", "content": "two"}, headers=headers)).json()
    assert again == first and log_end(http_server)[0] == end


def test_memstream_serve_command_serves_http_and_mcp(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "MEMSTREAM_DATA_DIR": str(tmp_path / "d"), "MEMSTREAM_EMBEDDER": "none"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "memstream.api.cli", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            while True:
                assert proc.poll() is None, proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "memstream serve did not come up"
                time.sleep(0.05)
            stored = client.post("/v1/tools/store", json={"agent_id": "cli", "content": "served"}).json()
            assert stored["result"] == "stored" and stored["embedded"] is False
            init = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/list",
                "params": {},
            }
            headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}
            r = client.post("/mcp", json=init, headers=headers)
            assert r.status_code == 200, r.text
            assert "store" in r.text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert (tmp_path / "d" / "log.sqlite3").exists()
