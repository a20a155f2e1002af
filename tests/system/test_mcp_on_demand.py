"""MCP at /mcp is built on its first request (api/faces/mcp_on_demand.py): a server starts and
answers /health without importing the MCP SDK, the first /mcp requests (concurrent) then
serve, and once the lifespan has ended /mcp answers 503."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import asyncio, sys
from pathlib import Path

import httpx

from memstream.api.faces.http import create_app
from memstream.api.services.settings import Settings
from tests.support.embedders import HashEmbedder

HEADERS = {
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2025-11-25",
}
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


async def main() -> None:
    app = create_app(Settings(data_dir=Path(sys.argv[1])), embedder=HashEmbedder())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        async with app.router.lifespan_context(app):
            health = await http.get("/health")
            assert health.status_code == 200, health.text
            assert "mcp" not in sys.modules and "memstream.api.faces.mcp" not in sys.modules
            answers = await asyncio.gather(*(http.post("/mcp", json=LIST, headers=HEADERS) for _ in range(3)))
            for r in answers:
                assert r.status_code == 200, r.text
                names = {t["name"] for t in r.json()["result"]["tools"]}
                assert {"store", "recall"} <= names, names
            assert "mcp" in sys.modules
        after = await http.post("/mcp", json=LIST, headers=HEADERS)
        assert after.status_code == 503, after.text
    print("ok")


asyncio.run(main())
"""


def test_mcp_is_imported_on_its_first_request(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "data")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "ok"
