"""Shared fixtures: a fast deterministic embedder, an in-process engine, and real servers on
loopback (HTTP and MCP) that every contract test can be run through."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import socket
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memstream.api.services.engine import Engine
from memstream.api.services.settings import Settings, load_settings
from memstream.api.tools.dispatch import dispatch
from memstream.api.tools.registry import Caller

_WORD = re.compile(r"\w+", re.UNICODE)

# A shell's Kafka deployment must not turn the embedded-mode tests' `memstream serve`
# subprocesses into Kafka routers (the Kafka tests name their broker with
# MEMSTREAM_TEST_KAFKA_BOOTSTRAP and pass --kafka explicitly).
# Only the deployment's own variables: test processes set the others (e.g. the workers'
# MEMSTREAM_KAFKA_CHECKPOINT_EVERY) on purpose.
for _name in ("MEMSTREAM_KAFKA_BOOTSTRAP", "MEMSTREAM_KAFKA_PREFIX", "MEMSTREAM_KAFKA_PARTITIONS",
              "MEMSTREAM_KAFKA_REPLICATION"):  # fmt: skip
    os.environ.pop(_name, None)


class HashEmbedder:
    """Feature-hashed bag of words: deterministic, instant, and similar texts share dimensions.
    Tests use it so that what they measure is memstream, not a neural model's load time."""

    model_id = "test-hash-64"
    dim = 64
    salt = b""

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                h = int.from_bytes(hashlib.blake2b(self.salt + word.encode(), digest_size=4).digest(), "little")
                out[i, h % self.dim] += 1.0 if (h >> 16) & 1 else -1.0
            norm = np.linalg.norm(out[i])
            out[i] = out[i] / norm if norm else 1.0 / np.sqrt(self.dim)
        return out


class SecondHashEmbedder(HashEmbedder):
    """Another model (48-d, other hash salt) for re-embedding tests: its vectors are not
    comparable with HashEmbedder's, as two real models' would not be."""

    model_id = "test-hash-b"
    dim = 48
    salt = b"b:"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(env={}, data_dir=tmp_path / "data", sync="NORMAL")


@pytest.fixture
async def engine(settings: Settings) -> AsyncIterator[Engine]:
    eng = Engine(settings, embedder=HashEmbedder())
    await eng.start()
    try:
        yield eng
    finally:
        await eng.close()


async def call(engine: Engine, tool: str, caller: Caller | None = None, **args: Any) -> dict[str, Any]:
    return await dispatch(engine, caller or Caller(client_id="test"), tool, args)


class ServerThread:
    """A real uvicorn server on 127.0.0.1 in a thread of its own, stopped by the fixture."""

    def __init__(self, settings: Settings) -> None:
        import uvicorn

        from memstream.api.faces.http import create_app

        self.port = free_port()
        self.app = create_app(settings, embedder=HashEmbedder())
        self.server = uvicorn.Server(
            uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = 30.0
        step = 0.02
        waited = 0.0
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the server thread died during start-up")
            if waited > deadline:
                raise TimeoutError("the server did not start within 30 s")
            threading.Event().wait(step)
            waited += step
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture
def http_server(settings: Settings) -> Iterator[ServerThread]:
    with ServerThread(settings) as srv:
        yield srv


def run(coro: Any) -> Any:
    return asyncio.get_event_loop().run_until_complete(coro)


@pytest.fixture(params=["http", "mcp"])
async def face(request: pytest.FixtureRequest, http_server: ServerThread) -> AsyncIterator[Any]:
    """Each contract test runs once through the HTTP API and once through MCP."""
    from faces import HttpFace, McpFace

    f = HttpFace(http_server.url) if request.param == "http" else McpFace(http_server.url)
    try:
        yield f
    finally:
        await f.close()


def log_end(server: ServerThread) -> tuple[int, int]:
    """(event log end, audit end) of the server's data directory, read through a second handle."""
    from memstream.streams.log.sqlite import SqliteLog

    log = SqliteLog(server.app.state.engine.settings.log_path)
    try:
        return log.end_offset(), log.audit_end_offset()
    finally:
        log.close()
