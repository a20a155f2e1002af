"""`memstream serve` says where it listens (issue 20): once the port is open it prints, on stderr,
the URL, MCP at /mcp, the API docs and the console, the data directory (or the Kafka
deployment) and whether tokens are required; every URL it prints answers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.acl import ACL, TOKENS, write_acl
from tests.support.broker import deployment_config, drop_topics, require_broker
from tests.support.master_key import with_master_key
from tests.support.serve import serve_process

DEADLINE_S = 120


async def mcp_tools(url: str, token: str | None) -> set[str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        asyncio.timeout(DEADLINE_S),
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        return {t.name for t in (await client.list_tools()).tools}


def check_pages(fields: dict[str, str], headers: dict[str, str]) -> None:
    """The pages it names are served: the console and the docs (HTML; in ACL mode the console
    redirects to its login page)."""
    with httpx.Client(timeout=30, follow_redirects=True) as http:  # ACL mode: the console sends to its login
        for label in ("API docs", "console"):
            if label not in fields:
                continue
            r = http.get(fields[label], headers=headers)
            assert r.status_code == 200 and "text/html" in r.headers["content-type"], (label, r.status_code)


@pytest.mark.parametrize("acl", [False, True], ids=["open", "acl"])
def test_embedded_serve_prints_where_it_listens(tmp_path: Path, acl: bool) -> None:
    data = tmp_path / "data"
    env = {"MEMSTREAM_EMBEDDER": "none", "MEMSTREAM_SYNC": "NORMAL"}
    if acl:
        env["MEMSTREAM_ACL_FILE"] = str(write_acl(tmp_path / "acl.json", ACL))
    with serve_process(["--data-dir", str(data), "--port", "0"], env) as served:
        url = served.headline.removeprefix("memstream is listening on ")
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0")
        f = served.fields
        assert f["MCP (streamable HTTP)"] == f"{url}/mcp"
        assert f["API docs"] == f"{url}/docs" and f["console"] == f"{url}/"
        assert f["mode"].startswith("embedded") and f["data directory"] == str(data)
        token = TOKENS["admin"] if acl else None
        if acl:
            assert f["access control"] == f"on: bearer tokens from {tmp_path / 'acl.json'}"
        else:
            assert f["access control"].startswith("off")
        check_pages(f, {})
        assert "store" in asyncio.run(mcp_tools(f["MCP (streamable HTTP)"], token))
        tool = f["HTTP tools"].replace("<name>", "list_memories")
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        answer = httpx.post(tool, json={"agent_id": "alice"}, headers=auth, timeout=30)
        assert answer.status_code == 200 and answer.json()["memories"] == [], answer.text
        if acl:  # the banner's claim holds: no token, no answer
            assert httpx.post(tool, json={"agent_id": "alice"}, timeout=30).status_code == 401


def test_serve_refusing_to_start_prints_no_banner(tmp_path: Path) -> None:
    """A bad ACL file stops the server before it listens: an error, no banner."""
    import subprocess

    from tests.support.serve import BIN

    bad = write_acl(tmp_path / "acl.json", "{not json")
    out = subprocess.run(
        [str(BIN / "memstream"), "serve", "--data-dir", str(tmp_path / "d"), "--port", "0"],
        env={"MEMSTREAM_ACL_FILE": str(bad), "MEMSTREAM_EMBEDDER": "none", "PATH": str(BIN)},
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert out.returncode == 1 and "refusing to start" in out.stderr
    assert "listening" not in out.stderr


@pytest.mark.kafka
def test_kafka_router_prints_where_it_listens(tmp_path: Path) -> None:
    asyncio.run(require_broker())
    cfg = deployment_config(2)
    args = ["--kafka", cfg.bootstrap, "--prefix", cfg.prefix, "--partitions", "2", "--port", "0"]
    try:
        with serve_process(args, with_master_key({"MEMSTREAM_EMBEDDER": "none"})) as served:
            url = served.headline.removeprefix("memstream is listening on ")
            f: dict[str, Any] = served.fields
            assert f["mode"].startswith("Kafka router")
            assert f["Kafka"] == f"{cfg.bootstrap}, topics {cfg.prefix}.*, 2 partitions"
            assert f["MCP (streamable HTTP)"] == f"{url}/mcp"
            assert "data directory" not in f  # the router keeps no log of its own
            for label in ("API docs", "console"):  # named only where the router serves them
                if label in f:
                    check_pages({label: f[label]}, {})
            assert "store" in asyncio.run(mcp_tools(f["MCP (streamable HTTP)"], None))
    finally:
        asyncio.run(drop_topics(cfg.prefix))


def test_with_json_logs_the_banner_is_one_record_and_stderr_stays_json(tmp_path: Path) -> None:
    env = {"MEMSTREAM_EMBEDDER": "none", "MEMSTREAM_LOG_FORMAT": "json"}
    with serve_process(["--data-dir", str(tmp_path / "data"), "--port", "0"], env) as served:
        f = served.fields
        assert served.headline == f"memstream is listening on {f['url']}"
        assert f["mcp"] == f"{f['url']}/mcp" and f["data_directory"] == str(tmp_path / "data")
        assert f["access_control"].startswith("off") and f["level"] == "INFO"
        check_pages({"API docs": f["api_docs"], "console": f["console"]}, {})
        lines = list(served.stderr)
    assert lines and all(isinstance(json.loads(line), dict) for line in lines), lines
