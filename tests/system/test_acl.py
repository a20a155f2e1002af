"""Access control (issue 6): bearer tokens, per-agent grants, admin, denials and their audit
records, through both faces (HTTP JSON API and MCP over streamable HTTP) and MCP over stdio;
a malformed ACL file stops start-up; the bind warning. See docs/security.md."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memstream.api.services.acl import (
    ADMIN,
    AclConfigError,
    Demand,
    effective_permission,
    load_acl,
)
from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import load_settings
from memstream.api.tools.dispatch import dispatch
from memstream.api.tools.registry import Caller
from tests.support.acl import (
    ACL,
    EPISODE_CALLS,
    EXPECTED,
    MEMORY_CALLS,
    TOKENS,
    TokenHttpFace,
    TokenMcpFace,
    assert_answered_as_missing,
    assert_denied,
    unique,
    write_acl,
)
from tests.support.bench import REPO
from tests.support.embedders import HashEmbedder
from tests.support.servers import ServerThread, free_port, log_end

# -- faces with a token -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    root = tmp_path_factory.mktemp("acl")
    path = write_acl(root / "acl.json", ACL)
    settings = load_settings(env={}, data_dir=root / "data", sync="NORMAL", acl_file=path)
    with ServerThread(settings) as srv:
        yield srv


@pytest.fixture(params=["http", "mcp"])
def as_client(request: pytest.FixtureRequest, acl_server: ServerThread) -> Any:
    """``as_client("r-alice")``: a face (HTTP or MCP) presenting that client's token."""
    kind = request.param

    def make(client: str | None, extra: dict[str, str] | None = None) -> Any:
        token = TOKENS[client] if client else None
        cls = TokenHttpFace if kind == "http" else TokenMcpFace
        return cls(acl_server.url, token, extra)

    make.kind = kind  # type: ignore[attr-defined]
    return make


async def seed(acl_server: ServerThread, agent: str, content: str) -> int:
    f = TokenHttpFace(acl_server.url, TOKENS["admin"])
    try:
        body = await f.call("store", {"agent_id": agent, "content": content})
        assert body["result"] == "stored", body
        return int(body["id"])
    finally:
        await f.close()


# -- the file ---------------------------------------------------------------------------------------


def test_load_acl_reads_cpersona_format(tmp_path: Path) -> None:
    cfg = load_acl(write_acl(tmp_path / "a.json", ACL))
    assert set(cfg.clients) == {c["client_id"] for c in ACL["clients"]}
    assert cfg.authenticate(TOKENS["r-alice"]) == "r-alice"
    assert cfg.authenticate(TOKENS["r-alice"] + "x") is None
    assert cfg.authenticate("") is None and cfg.authenticate(None) is None
    assert cfg.authenticate("tök\udcff") is None  # hostile input never raises
    assert cfg.clients["admin"].admin and not cfg.clients["rw-all-not-admin"].admin
    assert not cfg.clients["rw-alice"].admin and not cfg.clients["local"].admin


def test_token_from_environment_variable(tmp_path: Path) -> None:
    acl = {"clients": [{"client_id": "c", "token": "${MY_ACL_TOKEN}", "grants": {"a": "read"}}]}
    path = write_acl(tmp_path / "a.json", acl)
    assert load_acl(path, env={"MY_ACL_TOKEN": "from-env-123"}).authenticate("from-env-123") == "c"
    with pytest.raises(AclConfigError, match="MY_ACL_TOKEN is unset"):
        load_acl(path, env={})


def cpersona_python() -> Path:
    """The reference's interpreter: `make reference` installs it; CI requires it."""
    configured = os.environ.get("MEMSTREAM_CPERSONA_PYTHON")
    installed = [REPO / ".venv-cpersona/bin/python", Path("/work/cpersona-venv/bin/python")]
    candidates = [Path(configured)] if configured else installed
    for path in candidates:
        if path.exists():
            return path
    named = ", ".join(map(str, candidates))
    reason = f"the CPersona reference is not installed ({named}); `make reference` installs it"
    if os.environ.get("MEMSTREAM_REQUIRE_REFERENCE") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def test_the_same_file_loads_in_cpersona(tmp_path: Path) -> None:
    """Compatibility with CPersona 2.6.14's loader (when its package is installed)."""
    cp = cpersona_python()
    acl = {"clients": [c for c in ACL["clients"] if "admin" not in c]}
    path = write_acl(tmp_path / "a.json", acl)
    code = (
        "import sys; from cpersona import acl; c = acl.load_config(sys.argv[1]); "
        "print(sorted(c.grants_by_client), acl.effective_permission(c.grants_by_client['star-r-no-alice'], 'alice'))"
    )
    out = subprocess.run([str(cp), "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "'rw-alice'" in out.stdout and out.stdout.strip().endswith(" 0")
    mine = load_acl(path)
    assert effective_permission(mine.clients["star-r-no-alice"].grants, "alice") == 0


BAD_FILES: dict[str, tuple[Any, str]] = {
    "not json": ("{clients: [", "not valid JSON"),
    "top level": ({"clients": [], "extra": 1}, "top level must be exactly"),
    "empty": ({"clients": []}, "non-empty list"),
    "unknown key": ({"clients": [{"client_id": "c", "token": "t0k", "grants": {}, "role": "x"}]}, "unknown keys"),
    "bad permission": ({"clients": [{"client_id": "c", "token": "t0k", "grants": {"a": "write"}}]}, "permission"),
    "no grants": ({"clients": [{"client_id": "c", "token": "t0k"}]}, "grants must be"),
    "no token key": ({"clients": [{"client_id": "c", "grants": {}}]}, "token must be"),
    "duplicate client": (
        {"clients": [{"client_id": "c", "token": "t1", "grants": {}}, {"client_id": "c", "token": "t2", "grants": {}}]},
        "duplicate client_id",
    ),
    "duplicate token": (
        {
            "clients": [
                {"client_id": "c", "token": "SAME-1", "grants": {}},
                {"client_id": "d", "token": "SAME-1", "grants": {}},
            ]
        },
        "duplicates",
    ),
    "local with token": ({"clients": [{"client_id": "local", "token": "t0k", "grants": {}}]}, "stdio principal"),
    "whitespace token": ({"clients": [{"client_id": "c", "token": "SECRET-xyz\n", "grants": {}}]}, "whitespace"),
    "per_subject": ({"clients": [{"client_id": "c", "token": None, "grants": {}, "per_subject": True}]}, "per_subject"),
    "admin not bool": ({"clients": [{"client_id": "c", "token": "t0k", "grants": {}, "admin": "yes"}]}, "admin must"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_malformed_files_are_refused(tmp_path: Path, case: str) -> None:
    content, message = BAD_FILES[case]
    with pytest.raises(AclConfigError, match=message) as err:
        load_acl(write_acl(tmp_path / "bad.json", content))
    assert "SECRET" not in str(err.value) and "SAME-1" not in str(err.value)


def test_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AclConfigError, match="unreadable"):
        load_acl(tmp_path / "nope.json")


# -- the matrix -------------------------------------------------------------------------------------


@pytest.mark.parametrize("client", sorted(EXPECTED))
async def test_isolation_matrix(as_client: Any, acl_server: ServerThread, client: str) -> None:
    """Each client × agent × (read, write, admin) through the face; denied writes append nothing."""
    face = as_client(client)
    try:
        for agent in ("alice", "bob"):
            allowed = EXPECTED[client][agent]
            await seed(acl_server, agent, unique(f"seed for {agent}"))
            body = await face.call("recall", {"agent_id": agent, "query": ""})  # recent rows
            if "r" in allowed:
                assert "error" not in body and body["messages"], body
            else:
                assert_denied(body, "recall", client)
                assert body["agent_id"] == agent and body["required"] == "read"

            before = log_end(acl_server)
            body = await face.call("store", {"agent_id": agent, "content": unique(f"{client} writes")})
            if "w" in allowed:
                assert body["result"] == "stored", body
            else:
                assert_denied(body, "store", client)
                assert body["result"] == "rejected" and body["required"] == "read-write"
                after = log_end(acl_server)
                assert after[0] == before[0] and after[1] == before[1] + 1  # no event; one audit record

            # delete_agent_data is admin: try it on an agent nobody else uses.
            victim = f"{agent}-scratch-{client}"
            await seed(acl_server, victim, unique("scratch"))
            body = await face.call("delete_agent_data", {"agent_id": victim})
            if "a" in allowed:
                assert body["ok"] is True and body["deleted_memories"] == 1, body
            else:
                assert_denied(body, "delete_agent_data", client)
    finally:
        await face.close()


async def test_records_are_checked_against_their_owner(as_client: Any, acl_server: ServerThread) -> None:
    """rw-alice cannot touch bob's records by id, whether it names no agent or names alice, nor
    tell them from ids nobody owns, deleted records included: the same answer (status, error,
    text) as for a missing id. The audit trail records each denial, for operators."""
    bob_mem = await seed(acl_server, "bob", unique("bob's private note"))
    gone = await seed(acl_server, "bob", unique("bob's deleted note"))
    admin = as_client("admin")
    episode = await admin.call("archive_episode", {"agent_id": "bob", "summary": unique("bob episode")})
    ep_id = episode["episode_id"]
    assert (await admin.call("delete_memory", {"memory_id": gone}))["ok"] is True
    face = as_client("rw-alice")
    missing = 10**12
    try:
        before = log_end(acl_server)
        calls = [(t, make, real) for real in (bob_mem, gone) for t, make in MEMORY_CALLS]
        calls += [(t, make, ep_id) for t, make in EPISODE_CALLS]
        for extra in ({}, {"agent_id": "alice"}):
            for tool, make, real in calls:
                body = await assert_answered_as_missing(face, tool, make, extra, real, missing)
                if extra:  # alice's own call: it finds no such record
                    assert body["ok"] is False and body["error"] != "permission_denied", body
                else:  # an id nobody owns needs every agent: it might be bob's by the time it is decided
                    assert_denied(body, tool, "rw-alice")
                    assert body["agent_id"] == "*", body  # the owner's name is not echoed
        assert log_end(acl_server)[0] == before[0]
        # Operators see who reached for bob's records: one denial per call on one of them.
        after = await admin.call("audit_log", {"agent_id": "bob", "since_offset": before[1], "limit": 10_000})
        new = after["records"]
        denials = [r for r in new if r["who"]["client_id"] == "rw-alice"]
        assert len(denials) == 2 * len(calls), new
        assert {r["outcome"]["error"] for r in denials} == {"permission_denied"}
        assert {r["why"] for r in denials} == {
            "permission_denied: the record named belongs to an agent this client may not reach at this level"
        }
        # get_contents answers only the named agent's refs: bob's comes back missing.
        body = await face.call("get_contents", {"agent_id": "alice", "refs": [f"mem:{bob_mem}"]})
        assert body["items"] == [] and body["missing"] == [f"mem:{bob_mem}"]
        # The owner may.
        mine = await seed(acl_server, "alice", unique("alice's own"))
        body = await face.call("lock_memory", {"memory_id": mine})
        assert body == {"ok": True, "locked_id": mine}
        body = await face.call("history", {"ref": f"mem:{mine}"})
        assert body["count"] >= 2
        # bob's note is untouched.
        note = await admin.call("get_contents", {"agent_id": "bob", "refs": [f"mem:{bob_mem}"]})
        assert note["items"][0]["content"].startswith("bob's private note")
        body = await admin.call("delete_memory", {"memory_id": missing})
        assert body["ok"] is False and body["error"] != "permission_denied"
    finally:
        await face.close()
        await admin.close()


async def test_sweeps_need_every_agent(as_client: Any, acl_server: ServerThread) -> None:
    """A call without agent_id reads every agent: named grants never add up to '*', and a
    wildcard with an exception is held to the exception."""
    await seed(acl_server, "alice", unique("sweep seed"))
    for client, ok in (("r-alice", False), ("star-r-no-alice", False), ("admin", True), ("rw-all-not-admin", True)):
        face = as_client(client)
        try:
            for tool in ("list_memories", "check_health", "audit_log", "reembed_status"):
                body = await face.call(tool, {})
                if ok:
                    assert "error" not in body, (client, tool, body)
                else:
                    assert_denied(body, tool, client)
                    assert body["required"] == "read" and body["agent_id"] == "*", body
            body = await face.call("list_memories", {"agent_id": "alice"})
            assert ("error" not in body) == (client != "star-r-no-alice"), body
        finally:
            await face.close()


async def test_health_of_one_agent_shows_that_agents_figures_only(as_client: Any, acl_server: ServerThread) -> None:
    """check_health with an agent_id: a client that may not read every agent gets the verdict
    and that agent's counts, none of the store's offsets, lag or checkpoint figures; a client
    that may sweep gets them all, as without an ACL."""
    await seed(acl_server, "alice", unique("health seed"))
    await seed(acl_server, "bob", unique("health seed"))
    store_wide = "a store-wide check: its figures go only to clients that may read every agent"
    for client, whole in (("rw-alice", False), ("r-alice", False), ("admin", True), ("rw-all-not-admin", True)):
        face = as_client(client)
        try:
            body = await face.call("check_health", {"agent_id": "alice"})
            assert body["status"] in ("healthy", "degraded"), body
            if whole:
                assert {"memories", "log_end_offset", "audit_end_offset", "projection_offset"} <= set(body["stats"])
            else:
                assert set(body["stats"]) == {"memories", "episodes", "profiles"}, body
                assert body["stats"]["memories"] >= 1
                assert all(i.get("agent_id") == "alice" or i["detail"] == store_wide for i in body["issues"]), body
        finally:
            await face.close()
    face = as_client("star-r-no-alice")
    try:
        assert_denied(await face.call("check_health", {"agent_id": "alice"}), "check_health", "star-r-no-alice")
    finally:
        await face.close()


async def test_admin_tools_need_the_admin_grant(as_client: Any, acl_server: ServerThread) -> None:
    face = as_client("rw-all-not-admin")
    try:
        body = await face.call("reembed", {"model": "no-such-model", "agent_id": "alice"})
        assert_denied(body, "reembed", "rw-all-not-admin")
        assert body["required"] == "admin"
    finally:
        await face.close()
    admin = as_client("admin")
    try:
        body = await admin.call("reembed", {"model": "no-such-model", "agent_id": "alice"})
        assert body["ok"] is False and body["error"] != "permission_denied"  # past the ACL, refused on its merits
    finally:
        await admin.close()


async def test_denial_shape_status_and_audit_record(as_client: Any, acl_server: ServerThread) -> None:
    face = as_client("r-alice", {"x-client-id": "admin"})  # a claimed client id counts for nothing
    admin = as_client("admin")
    try:
        before = log_end(acl_server)
        body = await face.call("update_profile", {"agent_id": "alice", "profile": "overwrite"})
        assert {k: body[k] for k in ("ok", "error", "tool", "client_id", "agent_id", "required")} == {
            "ok": False,
            "error": "permission_denied",
            "tool": "update_profile",
            "client_id": "r-alice",
            "agent_id": "alice",
            "required": "read-write",
        }
        assert isinstance(body["detail"], str) and body["detail"]
        if as_client.kind == "http":
            assert face.status == 403
        after = log_end(acl_server)
        assert after == (before[0], before[1] + 1)
        audit = await admin.call("audit_log", {"agent_id": "alice", "since_offset": before[1]})
        [record] = [r for r in audit["records"] if r["tool"] == "update_profile"]
        assert record["kind"] == "refused" and record["who"]["client_id"] == "r-alice"
        assert record["outcome"]["error"] == "permission_denied" and "permission_denied" in record["why"]
        assert record["scope"]["agent_id"] == "alice"
        assert TOKENS["r-alice"] not in json.dumps(audit)
    finally:
        await face.close()
        await admin.close()


async def test_fleet_recall_only_within_grants(as_client: Any, acl_server: ServerThread) -> None:
    """recall_fleet reads several agents at once, and only agents the caller may read: one agent
    outside its grants refuses the whole call (never a silently partial answer)."""
    a = unique("fleet alice row")
    b = unique("fleet bob row")
    await seed(acl_server, "alice", a)
    await seed(acl_server, "bob", b)
    admin = as_client("admin")
    limited = as_client("star-none-bob-rw")
    try:
        body = await admin.call("recall_fleet", {"agent_ids": ["alice", "bob"], "query": "", "limit": 50})
        by_agent = {r["agent_id"]: [m["content"] for m in r["messages"]] for r in body["results"]}
        assert list(by_agent) == ["alice", "bob"]
        assert a in by_agent["alice"] and b not in by_agent["alice"]
        assert b in by_agent["bob"] and a not in by_agent["bob"]
        assert body["count"] == sum(len(v) for v in by_agent.values())
        body = await limited.call("recall_fleet", {"agent_ids": ["bob", "alice"], "query": ""})
        assert_denied(body, "recall_fleet", "star-none-bob-rw")
        assert body["agent_id"] == "alice" and "results" not in body
        body = await limited.call("recall_fleet", {"agent_ids": ["bob"], "query": "", "limit": 50})
        assert [r["agent_id"] for r in body["results"]] == ["bob"]
        assert b in [m["content"] for m in body["results"][0]["messages"]]
        body = await limited.call("recall_fleet", {"agent_ids": ["bob", ""], "query": ""})  # '' is not a way round
        assert_denied(body, "recall_fleet", "star-none-bob-rw")
    finally:
        await admin.close()
        await limited.close()


async def test_a_denied_call_does_not_claim_its_command_id(as_client: Any, acl_server: ServerThread) -> None:
    """Refusals answer retries of their command id (W9); a denied caller's refusal must not be
    replayed to an authorized caller that sends the same id."""
    command_id = unique("shared-cmd").replace(" ", "-")
    reader, writer = as_client("r-alice"), as_client("rw-alice")
    try:
        args = {"agent_id": "alice", "content": unique("claimed id"), "command_id": command_id}
        assert_denied(await reader.call("store", args), "store", "r-alice")
        body = await writer.call("store", args)
        assert body["result"] == "stored", body
        assert (await writer.call("store", args))["id"] == body["id"]  # its own retry: the first outcome
    finally:
        await reader.close()
        await writer.close()


async def test_owner_of_a_deleted_record_is_found_through_its_history(as_client: Any, acl_server: ServerThread) -> None:
    gone = await seed(acl_server, "bob", unique("bob's deleted note"))
    admin, bob_rw, alice_rw = as_client("admin"), as_client("star-none-bob-rw"), as_client("rw-alice")
    try:
        assert (await admin.call("delete_memory", {"memory_id": gone}))["ok"] is True
        body = await bob_rw.call("history", {"ref": f"mem:{gone}"})  # bob's: readable without naming bob
        assert [e["type"] for e in body["events"]][-1].endswith("deleted"), body
        # alice's writer cannot tell it from a record that never was.
        body = await alice_rw.call("history", {"ref": f"mem:{gone}", "agent_id": "alice"})
        assert body == {"ok": False, "error": f"no history for mem:{gone}"}, body
    finally:
        for f in (admin, bob_rw, alice_rw):
            await f.close()


# -- authentication ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer not-a-known-token"},
        {"authorization": f"Basic {TOKENS['admin']}"},
        {"authorization": "Bearer"},
        {"x-client-id": "admin"},
        {"authorization": f"Bearer {TOKENS['admin']}x"},
    ],
    ids=["none", "unknown", "basic", "empty", "claimed-id", "longer"],
)
async def test_unknown_or_missing_token_is_401(acl_server: ServerThread, headers: dict[str, str]) -> None:
    before = log_end(acl_server)
    async with httpx.AsyncClient(base_url=acl_server.url, headers=headers) as client:
        for path, body in (
            ("/v1/tools/recall", {"agent_id": "alice", "query": "x"}),
            ("/v1/tools/store", {"agent_id": "alice", "content": "x"}),
            ("/context/packet", {"agent_id": "alice", "query": "x"}),
            ("/context/package", {"agent_id": "alice", "query": "x"}),
            ("/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        ):
            r = await client.post(path, json=body)
            assert r.status_code == 401, (path, r.status_code, r.text)
            assert r.json() == {"ok": False, "error": "unauthorized"}
            assert r.headers["www-authenticate"] == "Bearer"
        assert (await client.get("/health")).status_code == 401
        assert (await client.get("/openapi.json")).status_code == 200  # the API's description is public
    assert log_end(acl_server) == before


async def test_known_token_is_accepted_case_insensitive_scheme(acl_server: ServerThread) -> None:
    async with httpx.AsyncClient(base_url=acl_server.url) as client:
        r = await client.post(
            "/v1/tools/get_profile",
            json={"agent_id": "alice"},
            headers={"authorization": f"bearer {TOKENS['r-alice']}"},
        )
        assert r.status_code == 200 and "profile" in r.json()
        r = await client.get("/health", headers={"authorization": f"Bearer {TOKENS['admin']}"})
        assert r.status_code == 200
        r = await client.get("/health", headers={"authorization": f"Bearer {TOKENS['r-alice']}"})
        assert r.status_code == 403 and r.json()["error"] == "permission_denied"


async def test_context_routes_are_subject_to_grants(acl_server: ServerThread) -> None:
    async with httpx.AsyncClient(base_url=acl_server.url) as client:
        headers = {"authorization": f"Bearer {TOKENS['star-r-no-alice']}"}
        r = await client.post("/context/packet", json={"agent_id": "alice", "query": "seed"}, headers=headers)
        assert r.status_code == 403 and r.json()["error"] == "permission_denied"
        r = await client.post("/context/packet", json={"agent_id": "bob", "query": "seed"}, headers=headers)
        assert r.status_code == 200, r.text


# -- in-process: dispatch fails closed ----------------------------------------------------------------


async def test_dispatch_refuses_unauthenticated_callers_in_acl_mode(tmp_path: Path) -> None:
    """A face that forgot to authenticate (Caller without ``authenticated``) gets nothing."""
    settings = load_settings(env={}, data_dir=tmp_path / "data", sync="NORMAL")
    engine = EmbeddedEngine(settings, embedder=HashEmbedder())
    await engine.start()
    try:
        engine.acl = load_acl(write_acl(tmp_path / "acl.json", ACL))
        body = await dispatch(engine, Caller(client_id="admin"), "store", {"agent_id": "a", "content": "x"})
        assert_denied(body, "store", "admin")
        ok = await dispatch(
            engine, Caller(client_id="admin", authenticated=True), "store", {"agent_id": "a", "content": "x"}
        )
        assert ok["result"] == "stored"
        engine.acl = None  # no ACL: anonymous full access, as before
        body = await dispatch(engine, Caller(), "store", {"agent_id": "a", "content": "y"})
        assert body["result"] == "stored"
        assert engine.log.end_offset() == 2
    finally:
        await engine.close()


def test_demand_of_an_unclassified_tool_is_admin() -> None:
    from memstream.api.services.acl import demands
    from memstream.api.tools.registry import Tool, ToolArgs

    class NoArgs(ToolArgs):
        pass

    async def handler(engine: Any, caller: Caller, args: Any) -> dict[str, Any]:
        return {}

    tool = Tool("acl_test_unclassified", NoArgs, handler, "test")
    assert asyncio.run(demands(None, tool, NoArgs())) == [Demand("", ADMIN, named=False)]


# -- stdio ------------------------------------------------------------------------------------------


def _env(tmp_path: Path, acl: Path | None) -> dict[str, str]:
    env = {
        **os.environ,
        "MEMSTREAM_DATA_DIR": str(tmp_path / "data"),
        "MEMSTREAM_SYNC": "NORMAL",
        "MEMSTREAM_PARTITIONS": "4",
        "MEMSTREAM_EMBEDDER": "none",
        "MEMSTREAM_CLIENT_ID": "admin",  # a claim: ignored in ACL mode
    }
    env.pop("MEMSTREAM_ACL_FILE", None)
    if acl is not None:
        env["MEMSTREAM_ACL_FILE"] = str(acl)
    return env


async def test_stdio_is_the_local_principal(tmp_path: Path) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    acl = write_acl(tmp_path / "acl.json", ACL)  # local: {"alice": "read"}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memstream.api.cli", "mcp"], env=_env(tmp_path, acl), cwd=str(tmp_path)
    )
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with asyncio.timeout(60), Client(stdio_client(params, errlog=errlog), mode="legacy") as client:

            async def call(tool: str, args: dict[str, Any]) -> dict[str, Any]:
                result = await client.call_tool(tool, args)
                body: dict[str, Any] = json.loads(str(getattr(result.content[0], "text", "")))
                return body

            body = await call("store", {"agent_id": "alice", "content": "from stdio"})
            assert_denied(body, "store", "local")
            assert "error" not in await call("recall", {"agent_id": "alice", "query": "anything"})
            assert_denied(await call("recall", {"agent_id": "bob", "query": "anything"}), "recall", "local")
    assert TOKENS["admin"] not in (tmp_path / "stderr.log").read_text()


# -- start-up ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["serve", "mcp"])
def test_malformed_acl_file_stops_startup(tmp_path: Path, command: str) -> None:
    bad = write_acl(
        tmp_path / "acl.json", {"clients": [{"client_id": "c", "token": "SECRET-token-1", "grants": {"a": "admin"}}]}
    )
    args = [sys.executable, "-m", "memstream.api.cli", command]
    if command == "serve":
        args += ["--port", str(free_port())]
    out = subprocess.run(
        args, env=_env(tmp_path, bad), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    assert out.returncode != 0
    assert "refusing to start" in out.stderr and "unknown permission 'admin'" in out.stderr, out.stderr
    assert "SECRET-token-1" not in out.stderr + out.stdout
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "data").exists()  # stopped before touching the data directory


def _serve_until(tmp_path: Path, host: str, acl: Path | None, ready: str) -> str:
    """Start ``memstream serve``, wait until stderr shows ``ready`` (or the server answers), stop it."""
    port = free_port()
    log_path = tmp_path / f"serve-{port}.log"
    with log_path.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memstream.api.cli", "serve", "--host", host, "--port", str(port)],
            env=_env(tmp_path, acl),
            stdout=subprocess.DEVNULL,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if ready in log_path.read_text():
                    break
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert proc.poll() is None, log_path.read_text()
                time.sleep(0.2)
            else:
                raise AssertionError(f"server did not start: {log_path.read_text()}")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return log_path.read_text()


def test_bind_warning(tmp_path: Path) -> None:
    exposed = _serve_until(tmp_path, "0.0.0.0", None, "NETWORK-EXPOSED")
    assert "NETWORK-EXPOSED WITHOUT TOKENS" in exposed and "0.0.0.0" in exposed
    loopback = _serve_until(tmp_path, "127.0.0.1", None, "NETWORK-EXPOSED")
    assert "NETWORK-EXPOSED" not in loopback
    acl = write_acl(tmp_path / "acl.json", ACL)
    with_tokens = _serve_until(tmp_path, "0.0.0.0", acl, "NETWORK-EXPOSED")
    assert "NETWORK-EXPOSED" not in with_tokens and "ACL mode" in with_tokens
    for token in TOKENS.values():
        assert token not in exposed + loopback + with_tokens
