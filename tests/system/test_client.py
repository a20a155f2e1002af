"""memstream.client against real servers on loopback (embedded, ACL mode, behind a scripted proxy)
and in process: typed answers, every error class from a real answer, retries under one command
id, token auth, connection reuse and the context-manager lifecycle, sync and async."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import orjson
import pytest
import uvicorn

from memstream.api.faces.http import create_app
from memstream.api.services.embedding import EmbeddingError
from memstream.api.services.settings import load_settings
from memstream.client import (
    AsyncClient,
    Client,
    Conflict,
    InternalError,
    Invalid,
    Locked,
    MemstreamError,
    NotFound,
    PermissionDenied,
    TooLarge,
    Unauthorized,
    Unavailable,
    UnknownTool,
)
from memstream.client.results import (
    DeleteResult,
    Event,
    GetContentsResult,
    HistoryResult,
    ListMemoriesResult,
    Memory,
    RecallHit,
    RecallResult,
    StoreResult,
    UpdateResult,
)
from tests.support.acl import ACL, TOKENS, unique, write_acl
from tests.support.embedders import HashEmbedder
from tests.support.error_codes import HeaderRecorder
from tests.support.proxies import ScriptedProxy
from tests.support.servers import ServerThread, free_port


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    root = tmp_path_factory.mktemp("client")
    with ServerThread(load_settings(env={}, data_dir=root / "data", sync="NORMAL")) as srv:
        yield srv


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    root = tmp_path_factory.mktemp("client-acl")
    path = write_acl(root / "acl.json", ACL)
    with ServerThread(load_settings(env={}, data_dir=root / "data", sync="NORMAL", acl_file=path)) as srv:
        yield srv


def agent() -> str:
    return unique("agent").replace(" ", "-")


# -- typed answers ------------------------------------------------------------------------------


def test_sync_round_trip_is_typed(server: ServerThread) -> None:
    who = agent()
    with Client(server.url, client_id="notebook") as memory:
        stored = memory.store(who, "Alice prefers email over phone calls", metadata={"topic": "contact"})
        assert isinstance(stored, StoreResult) and stored.stored and isinstance(stored.id, int)
        again = memory.store(who, "Alice prefers email over phone calls")
        assert again.result == "skipped" and again.id == stored.id and again.reason

        hits = memory.recall(who, "Alice prefers email over phone calls")
        assert isinstance(hits, RecallResult)
        assert [h.memory_id for h in hits.messages] == [stored.id]
        assert isinstance(hits.messages[0], RecallHit) and hits.messages[0].source is not None

        listed = memory.list_memories(who)
        assert isinstance(listed, ListMemoriesResult) and listed.count == 1
        assert isinstance(listed.memories[0], Memory) and listed.memories[0].content.startswith("Alice")

        updated = memory.update_memory(stored.id, "Alice prefers email, never phone")
        assert isinstance(updated, UpdateResult) and updated.updated_id == stored.id
        contents = memory.get_contents(who, [f"mem:{stored.id}"])
        assert isinstance(contents, GetContentsResult)
        assert [c.content for c in contents.items] == ["Alice prefers email, never phone"]

        deleted = memory.delete_memory(stored.id)
        assert isinstance(deleted, DeleteResult) and deleted.deleted_id == stored.id
        history = memory.history(agent_id=who)
        assert isinstance(history, HistoryResult) and all(isinstance(e, Event) for e in history.events)
        assert [e.type for e in history.events] == ["memory.stored", "memory.updated", "memory.deleted"]
        assert {e.actor["client_id"] for e in history.events} == {"notebook"}  # X-Client-Id without a token
        assert {e.agent_id for e in history.events} == {who}
        # the raw escape hatch answers the same JSON
        assert memory.call("list_memories", {"agent_id": who}) == {"memories": [], "count": 0}


async def test_async_round_trip_is_typed(server: ServerThread) -> None:
    who = agent()
    async with AsyncClient(server.url) as memory:
        stored = await memory.store(who, "Bob keeps the spare keys in the blue drawer")
        assert stored.stored
        hits = await memory.recall(agent_id=who, query="Bob keeps the spare keys in the blue drawer", limit=3)
        assert [h.ref for h in hits.messages] == [f"mem:{stored.id}"]
        assert (await memory.update_memory(stored.id, "Bob keeps the keys in the red drawer")).updated_id == stored.id
        listed = await memory.list_memories(who)
        assert [m.content for m in listed.memories] == ["Bob keeps the keys in the red drawer"]
        await memory.delete_memory(memory_id=stored.id, agent_id=who)
        assert (await memory.list_memories(who)).count == 0
        history = await memory.history(agent_id=who)
        assert [e.type for e in history.events][-1] == "memory.deleted"


def test_answers_keep_fields_the_client_does_not_know(server: ServerThread) -> None:
    with Client(server.url) as memory:
        health = memory.check_health()
        assert health.status in ("healthy", "degraded")
        assert "log_end_offset" in health.stats
        stored = memory.store(agent(), "a memory to see the extras of")
        assert stored.model_extra is not None and stored.model_extra.get("embedded") is None  # typed, not extra
        assert "embedded" in stored.model_dump()


# -- errors -------------------------------------------------------------------------------------


def _every_refusal(memory: Client) -> dict[type[MemstreamError], MemstreamError]:
    who = agent()
    caught: dict[type[MemstreamError], MemstreamError] = {}

    def expect(cls: type[MemstreamError], call: object) -> None:
        assert callable(call)
        with pytest.raises(cls) as info:
            call()
        assert type(info.value) is cls, info.value
        caught[cls] = info.value

    kept = memory.store(who, "the lighthouse keeper logs the weather at dawn")
    assert kept.id is not None
    expect(Invalid, lambda: memory.store(who, ""))
    expect(NotFound, lambda: memory.update_memory(987_654_321, "nothing there"))
    expect(UnknownTool, lambda: memory.call("no_such_tool", {}))
    memory.lock_memory(kept.id)
    expect(Locked, lambda: memory.update_memory(kept.id, "edited while locked"))
    memory.store(who, "the first of two texts")
    second = memory.store(who, "the second of two texts").id
    assert second is not None
    expect(Conflict, lambda: memory.update_memory(second, "the first of two texts"))  # one copy per bucket
    expect(TooLarge, lambda: memory.archive_episode(who, "an episode", keywords="word " * 2500))
    return caught


def test_every_refusal_raises_its_class_over_http(server: ServerThread) -> None:
    recorder = HeaderRecorder()
    with Client(server.url, transport=recorder) as memory:
        caught = _every_refusal(memory)
    statuses = {cls: e.status for cls, e in caught.items()}
    assert statuses == {Invalid: 400, NotFound: 404, UnknownTool: 404, Locked: 409, Conflict: 409, TooLarge: 413}
    # the server names each code (Memstream-Error), and the client's class is that code's
    assert [c for c in recorder.codes if c] == [e.code for e in caught.values()] == [
        "invalid", "not_found", "unknown_tool", "locked", "conflict", "too_large"
    ]  # fmt: skip
    for error in caught.values():
        assert error.body["ok"] is False and str(error)
    assert caught[Invalid].code == "invalid" and caught[Invalid].body["result"] == "rejected"


def test_every_refusal_raises_its_class_in_process(tmp_path: Path) -> None:
    with Client.local(tmp_path / "data", embedder=HashEmbedder(), settings={"sync": "NORMAL"}) as memory:
        caught = _every_refusal(memory)
    assert set(caught) == {Invalid, NotFound, UnknownTool, Locked, Conflict, TooLarge}
    assert {e.status for e in caught.values()} == {None}
    assert {cls: e.code for cls, e in caught.items()}[Locked] == "locked"


def test_acl_mode_token_auth(acl_server: ServerThread) -> None:
    with Client(acl_server.url, TOKENS["rw-alice"], client_id="ignored-with-a-token") as alice:
        stored = alice.store("alice", unique("alice's note"))
        assert stored.stored
        with pytest.raises(PermissionDenied) as denied:
            alice.store("bob", "not alice's to write")
        assert denied.value.status == 403 and denied.value.body["client_id"] == "rw-alice"
        history = alice.history(f"mem:{stored.id}")
        assert history.events[0].actor["client_id"] == "rw-alice"  # the token's client, not X-Client-Id
    with Client(acl_server.url, TOKENS["r-alice"]) as reader:
        assert any(m.id == stored.id for m in reader.list_memories("alice").memories)
        with pytest.raises(PermissionDenied):
            reader.store("alice", "a reader cannot write")
    for token in (None, "not-a-token-anyone-has"):
        with Client(acl_server.url, token, retries=0) as stranger, pytest.raises(Unauthorized) as info:
            stranger.list_memories("alice")
        assert info.value.status == 401


async def test_acl_mode_token_auth_async(acl_server: ServerThread) -> None:
    async with AsyncClient(acl_server.url, token=TOKENS["star-none-bob-rw"]) as bob:
        assert (await bob.store("bob", unique("bob's note"))).stored
        with pytest.raises(PermissionDenied):
            await bob.list_memories("alice")
    async with AsyncClient(acl_server.url) as nobody:
        with pytest.raises(Unauthorized):
            await nobody.recall("bob", "anything")


class BrokenModel:
    """An embedding model that fails: ``EmbeddingError`` (the model is unavailable: 503) or any
    other exception (a bug: 500). Counts its calls, so retries can be counted at the server."""

    model_id = "test-hash-64"
    dim = 64

    def __init__(self, failure: type[Exception], failures: int) -> None:
        self.failure = failure
        self.failures = failures
        self.calls = 0
        self.working = HashEmbedder()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.failure("the model is down")
        return self.working.embed(texts)


class AppThread:
    """``create_app`` with a model of the test's choosing, served by uvicorn on loopback."""

    def __init__(self, data: Path, model: BrokenModel) -> None:
        self.port = free_port()
        app = create_app(load_settings(env={}, data_dir=data, sync="NORMAL"), embedder=model)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="critical"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> AppThread:
        self.thread.start()
        started = threading.Event()
        while not self.server.started:
            assert self.thread.is_alive(), "the server died during start-up"
            started.wait(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def test_an_unavailable_model_is_retried_then_raised(tmp_path: Path) -> None:
    model = BrokenModel(EmbeddingError, failures=10**6)
    with AppThread(tmp_path / "data", model) as app:
        calls_at_start = model.calls
        with Client(app.url, retries=2, backoff=0) as memory, pytest.raises(Unavailable) as info:
            memory.store("carol", "the model is down today")
        assert info.value.status == 503 and info.value.code == "embedding_unavailable"
        assert model.calls - calls_at_start == 3  # the first try and two retries
        with Client(app.url, retries=0) as memory:
            assert memory.list_memories("carol").count == 0  # nothing was stored


def test_a_model_back_after_a_503_is_retried_into_one_memory(tmp_path: Path) -> None:
    model = BrokenModel(EmbeddingError, failures=0)
    with AppThread(tmp_path / "data", model) as app:
        model.failures = model.calls + 1  # the next embedding fails once
        with Client(app.url, retries=3, backoff=0) as memory:
            stored = memory.store("carol", "the model came back")
            assert stored.stored
            assert memory.list_memories("carol").count == 1


def test_a_crash_in_the_server_is_an_internal_error_and_not_retried(tmp_path: Path) -> None:
    model = BrokenModel(RuntimeError, failures=10**6)
    with AppThread(tmp_path / "data", model) as app:
        before = model.calls
        with Client(app.url, retries=3, backoff=0) as memory, pytest.raises(InternalError) as info:
            memory.store("dave", "this crashes the model")
        assert info.value.status == 500 and info.value.code == "internal"
        assert model.calls - before == 1


def test_no_server_is_unavailable_after_the_retries() -> None:
    with Client(f"http://127.0.0.1:{free_port()}", retries=2, backoff=0) as memory:
        with pytest.raises(Unavailable) as info:
            memory.list_memories("anyone")
        assert info.value.code == "unavailable" and info.value.status is None


# -- retries under one command id, through a proxy ------------------------------------------------


@pytest.mark.parametrize("failure", ["forward-503", "forward-drop"])
def test_a_write_applied_but_unanswered_is_retried_under_its_command_id(server: ServerThread, failure: str) -> None:
    who = agent()
    with ScriptedProxy(server.url, [failure]) as proxy, Client(proxy.url, backoff=0) as memory:
        stored = memory.store(who, "written once though sent twice")
        assert [s.action for s in proxy.seen] == [failure, "pass"]
        first, second = (orjson.loads(s.body) for s in proxy.seen)
        assert first["command_id"] == second["command_id"] and len(first["command_id"]) == 32
        assert first == second
        assert stored.stored  # the server's remembered first outcome
        listed = memory.list_memories(who)
        assert [m.id for m in listed.memories] == [stored.id]
        history = memory.history(agent_id=who)
        assert [e.type for e in history.events] == ["memory.stored"]
        assert history.events[0].command_id == first["command_id"]


async def test_async_retry_keeps_the_callers_command_id(server: ServerThread) -> None:
    who = agent()
    with ScriptedProxy(server.url, ["forward-503", "forward-drop"]) as proxy:
        async with AsyncClient(proxy.url, backoff=0) as memory:
            stored = await memory.store(who, "my own command id", command_id="caller-chosen-1")
            assert {orjson.loads(s.body)["command_id"] for s in proxy.seen} == {"caller-chosen-1"}
            assert len(proxy.seen) == 3
            assert stored.stored
            assert (await memory.list_memories(who)).count == 1


def test_reads_are_retried_on_503_and_4xx_never(server: ServerThread) -> None:
    who = agent()
    with ScriptedProxy(server.url, ["503", "503"]) as proxy, Client(proxy.url, backoff=0) as memory:
        assert memory.list_memories(who).count == 0
        assert [s.action for s in proxy.seen] == ["503", "503", "pass"]
        with pytest.raises(Invalid):
            memory.store(who, "")
        assert len(proxy.seen) == 4  # the 400 was not sent again


def test_retries_are_bounded(server: ServerThread) -> None:
    with ScriptedProxy(server.url, ["503"] * 10) as proxy, Client(proxy.url, retries=3, backoff=0) as memory:
        with pytest.raises(Unavailable) as info:
            memory.recall(agent(), "anything")
        assert info.value.code == "log_unavailable" and info.value.status == 503
        assert len(proxy.seen) == 4


def test_one_connection_serves_every_call(server: ServerThread) -> None:
    who = agent()
    with ScriptedProxy(server.url) as proxy, Client(proxy.url) as memory:
        for i in range(5):
            memory.store(who, f"note number {i}")
        memory.recall(who, "note")
        assert len(proxy.seen) == 6
        assert proxy.connections == 1


# -- lifecycle ----------------------------------------------------------------------------------


def test_the_context_manager_closes_the_client(server: ServerThread) -> None:
    with Client(server.url) as memory:
        memory.list_memories(agent())
    assert memory.closed
    with pytest.raises(RuntimeError, match="closed"):
        memory.list_memories("x")
    memory.close()  # idempotent


async def test_the_async_context_manager_closes_the_client(server: ServerThread) -> None:
    async with AsyncClient(server.url) as memory:
        await memory.list_memories(agent())
    assert memory.closed
    with pytest.raises(RuntimeError, match="closed"):
        await memory.list_memories("x")
    await memory.close()


# -- in process ---------------------------------------------------------------------------------


def test_local_sync_then_async_on_one_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with Client.local(data, embedder=HashEmbedder(), client_id="nb", settings={"sync": "NORMAL"}) as memory:
        stored = memory.store("erin", "Erin waters the ferns on Sundays")
        hits = memory.recall("erin", "Erin waters the ferns on Sundays")
        assert [h.memory_id for h in hits.messages] == [stored.id]
        assert memory.history(agent_id="erin").events[0].actor["client_id"] == "nb"
    assert memory.closed

    async def read_back() -> None:
        async with AsyncClient.local(data, embedder=HashEmbedder(), settings={"sync": "NORMAL"}) as again:
            listed = await again.list_memories("erin")
            assert [m.content for m in listed.memories] == ["Erin waters the ferns on Sundays"]
            with pytest.raises(NotFound):
                await again.delete_memory(987_654)

    asyncio.run(read_back())


async def test_local_async_starts_on_first_call(tmp_path: Path) -> None:
    memory = AsyncClient.local(tmp_path / "data", embedder=HashEmbedder(), settings={"sync": "NORMAL"})
    try:
        assert (await memory.store("frank", "Frank bikes to work")).stored
        assert (await memory.list_memories("frank")).count == 1
    finally:
        await memory.close()
    with pytest.raises(RuntimeError, match="closed"):
        await memory.list_memories("frank")


def test_the_readme_snippet_runs(tmp_path: Path) -> None:
    """README's "Use it from Python", as written, with the default model, in a fresh directory."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Use it from Python", 1)[1].split("\n## ", 1)[0]
    lines = [line[4:] for line in section.splitlines() if line.startswith("    ")]
    assert lines[0].startswith("pip install") and len(lines) == 5
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_")}
    run = subprocess.run(
        [sys.executable, "-c", "\n".join(lines[1:])], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == "The user prefers short answers\n"
    assert (tmp_path / "memory" / "log.sqlite3").is_file()


def test_importing_the_client_loads_no_server_side_module() -> None:
    """An agent that talks to a server does not pay for the engine, the model or the web stack:
    only ``Client.local`` imports them."""
    probe = (
        "import sys, memstream.client\n"
        "heavy = ('memstream.api', 'memstream.streams', 'memstream.projections', 'numpy', 'onnxruntime',"
        " 'fastapi', 'aiokafka', 'uvicorn')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_a_local_client_beside_a_server_on_one_data_dir(tmp_path: Path) -> None:
    settings = load_settings(env={}, data_dir=tmp_path / "data", sync="NORMAL")
    with ServerThread(settings) as served, Client(served.url) as remote:
        remote.store("lee", "Lee writes through the server")
        with Client.local(tmp_path / "data", embedder=HashEmbedder(), settings={"sync": "NORMAL"}) as local:
            assert [m.content for m in local.list_memories("lee").memories] == ["Lee writes through the server"]
            local.store("lee", "Lee writes in process")
        assert sorted(m.content for m in remote.list_memories("lee").memories) == [
            "Lee writes in process",
            "Lee writes through the server",
        ]
