"""The access-control matrix the ACL tests share (embedded and Kafka mode): clients, tokens, the
expected grants written out by hand, faces that send a bearer token, and the denial check."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from memstream.api.services.settings import Settings, load_settings

TOKENS = {
    "rw-alice": "tok-rw-alice-0123456789",
    "r-alice": "tok-r-alice-0123456789",
    "star-r-no-alice": "tok-star-r-no-alice-0123",  # {"*": read, alice: none}: exact beats wildcard
    "star-none-bob-rw": "tok-star-none-bob-rw-01",  # {"*": none, bob: read-write}: exact beats wildcard
    "admin": "tok-admin-0123456789abcd",  # {"*": read-write}: admin by CPersona's whole-store grant
    "rw-all-not-admin": "tok-rw-all-not-admin-012",  # {"*": read-write}, "admin": false
    "nogrants": "tok-nogrants-0123456789",
}


ACL: dict[str, Any] = {
    "clients": [
        {"client_id": "rw-alice", "token": TOKENS["rw-alice"], "grants": {"alice": "read-write"}},
        {"client_id": "r-alice", "token": TOKENS["r-alice"], "grants": {"alice": "read"}},
        {"client_id": "star-r-no-alice", "token": TOKENS["star-r-no-alice"], "grants": {"*": "read", "alice": "none"}},
        {
            "client_id": "star-none-bob-rw",
            "token": TOKENS["star-none-bob-rw"],
            "grants": {"*": "none", "bob": "read-write"},
        },
        {"client_id": "admin", "token": TOKENS["admin"], "grants": {"*": "read-write"}},
        {
            "client_id": "rw-all-not-admin",
            "token": TOKENS["rw-all-not-admin"],
            "grants": {"*": "read-write"},
            "admin": False,
        },
        {"client_id": "nogrants", "token": TOKENS["nogrants"], "grants": {}},
        {"client_id": "local", "token": None, "grants": {"alice": "read"}},
    ]
}


# The matrix, written out by hand (not derived from the code under test): what each client may
# do on each agent. r = read, w = write (store), a = admin (delete_agent_data).
EXPECTED: dict[str, dict[str, str]] = {
    "rw-alice": {"alice": "rw", "bob": ""},
    "r-alice": {"alice": "r", "bob": ""},
    "star-r-no-alice": {"alice": "", "bob": "r"},
    "star-none-bob-rw": {"alice": "", "bob": "rw"},
    "admin": {"alice": "rwa", "bob": "rwa"},
    "rw-all-not-admin": {"alice": "rw", "bob": "rw"},
    "nogrants": {"alice": "", "bob": ""},
}


def write_acl(path: Path, acl: dict[str, Any] | str) -> Path:
    path.write_text(acl if isinstance(acl, str) else json.dumps(acl))
    path.chmod(0o600)
    return path


def acl_settings(root: Path, acl: dict[str, Any] = ACL) -> Settings:
    """Settings of a server under ``root`` with ``acl`` as its ACL file."""
    path = write_acl(root / "acl.json", acl)
    return load_settings(env={}, data_dir=root / "data", sync="NORMAL", acl_file=path)


class TokenHttpFace:
    name = "http"

    def __init__(self, base_url: str, token: str | None, extra: dict[str, str] | None = None) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.AsyncClient(base_url=base_url, timeout=30, headers={**headers, **(extra or {})})
        self.status = 0

    async def call(self, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        r = await self.client.post(f"/v1/tools/{tool}", json=args or {})
        assert r.status_code < 500, r.text
        self.status = r.status_code
        body: dict[str, Any] = r.json()
        return body

    async def close(self) -> None:
        await self.client.aclose()


class TokenMcpFace:
    name = "mcp"

    def __init__(self, base_url: str, token: str | None, extra: dict[str, str] | None = None) -> None:
        self.url = f"{base_url}/mcp"
        self.headers = {**({"authorization": f"Bearer {token}"} if token else {}), **(extra or {})}

    async def call(self, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async with (
            httpx2.AsyncClient(headers=self.headers, timeout=httpx2.Timeout(30.0)) as http,
            Client(streamable_http_client(self.url, http_client=http)) as client,
        ):
            result = await client.call_tool(tool, args or {})
        texts = [str(getattr(c, "text", "")) for c in result.content if getattr(c, "type", "") == "text"]
        assert len(texts) == 1, result.content
        body: dict[str, Any] = json.loads(texts[0])
        return body

    async def close(self) -> None:
        return None


# Calls naming a record by id (the tools docs/security.md lists under "Records are checked
# against their owner"), built for a memory id or an episode id.
MEMORY_CALLS: list[tuple[str, Callable[[int], dict[str, Any]]]] = [
    ("update_memory", lambda i: {"memory_id": i, "content": "hijack"}),
    ("delete_memory", lambda i: {"memory_id": i}),
    ("lock_memory", lambda i: {"memory_id": i}),
    ("unlock_memory", lambda i: {"memory_id": i}),
    ("verify_memory", lambda i: {"memory_id": i}),
    ("declare_standing", lambda i: {"ref": f"mem:{i}", "standing": "noise"}),
    ("history", lambda i: {"ref": f"mem:{i}"}),
]
EPISODE_CALLS: list[tuple[str, Callable[[int], dict[str, Any]]]] = [
    ("delete_episode", lambda i: {"episode_id": i}),
    ("declare_standing", lambda i: {"ref": f"ep:{i}", "standing": "noise"}),
    ("history", lambda i: {"ref": f"ep:{i}"}),
]


def masked(body: dict[str, Any], ident: int) -> str:
    """``body`` as JSON text with the record id it names masked: the answers for two ids compare."""
    return re.sub(rf"(?<![0-9]){ident}(?![0-9])", "<id>", json.dumps(body, sort_keys=True))


async def assert_answered_as_missing(
    face: Any, tool: str, make: Callable[[int], dict[str, Any]], extra: dict[str, Any], real: int, missing: int
) -> dict[str, Any]:
    """The call on record ``real`` answers exactly what it answers on ``missing`` (an id nobody
    owns): the same body but for the id, and over HTTP the same status. Returns the answer."""
    body = await face.call(tool, {**make(real), **extra})
    status = getattr(face, "status", None)
    expected = await face.call(tool, {**make(missing), **extra})
    assert masked(body, real) == masked(expected, missing), (tool, extra, body, expected)
    assert status == getattr(face, "status", None), (tool, extra, body)
    return body


def assert_denied(body: dict[str, Any], tool: str, client: str) -> None:
    assert body["ok"] is False and body["error"] == "permission_denied", body
    assert body["tool"] == tool and body["client_id"] == client, body


_run = 0


def unique(text: str) -> str:
    global _run
    _run += 1
    return f"{text} {time.time_ns()} {_run}"
