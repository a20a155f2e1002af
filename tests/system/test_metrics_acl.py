"""`/metrics` in ACL mode (issue 17, item 6): the whole store's figures are an admin's to read.
Any other token is refused with the usual denial (403, `required: admin`); no token is a 401."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.acl import TOKENS, acl_settings
from tests.support.servers import ServerThread, log_end


@pytest.fixture
def acl_server(tmp_path: Path) -> Iterator[ServerThread]:
    with ServerThread(acl_settings(tmp_path)) as srv:
        yield srv


def test_metrics_need_the_admin_grant(acl_server: ServerThread) -> None:
    before = log_end(acl_server)
    with httpx.Client(base_url=acl_server.url, timeout=30) as http:
        r = http.get("/metrics", headers={"authorization": f"Bearer {TOKENS['admin']}"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain"), r.text
        assert "memstream_" in r.text
        # read-write on every agent is not admin when the row says so; one agent's grant is not either
        for client in ("rw-all-not-admin", "rw-alice", "nogrants"):
            r = http.get("/metrics", headers={"authorization": f"Bearer {TOKENS[client]}", "x-client-id": "admin"})
            assert r.status_code == 403, (client, r.text)
            body = r.json()
            assert body["ok"] is False and body["error"] == "permission_denied", body
            assert body["client_id"] == client and body["required"] == "admin" and body["tool"] == "metrics", body
            assert "memstream_" not in r.text
        assert http.get("/metrics").status_code == 401
    assert log_end(acl_server) == before  # reading (or being refused) the metrics writes nothing
