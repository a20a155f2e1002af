"""Fixtures every tier shares: settings on a temporary data directory, an in-process engine with
the hash embedder, and a real HTTP/MCP server on loopback. Helpers live in tests/support."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from memstream.api.services.embedding import DEFAULT_EMBEDDER, Embedder, load_local_embedder
from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import Settings, load_settings
from tests.support.embedders import HashEmbedder
from tests.support.embedding import ENV_VARS
from tests.support.faces import HttpFace, McpFace
from tests.support.proc_logs import failure_sections
from tests.support.servers import ServerThread


def pytest_configure(config: pytest.Config) -> None:
    """A shell's Kafka deployment must not turn the embedded-mode tests' `memstream serve`
    subprocesses into Kafka routers (the Kafka tests name their broker with
    MEMSTREAM_TEST_KAFKA_BOOTSTRAP and pass --kafka explicitly). Only the deployment's own
    variables: test processes set the others (e.g. the workers' MEMSTREAM_KAFKA_CHECKPOINT_EVERY)
    on purpose."""
    for name in ("MEMSTREAM_KAFKA_BOOTSTRAP", "MEMSTREAM_KAFKA_PREFIX", "MEMSTREAM_KAFKA_PARTITIONS",
                 "MEMSTREAM_KAFKA_REPLICATION"):  # fmt: skip
        os.environ.pop(name, None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed Kafka test's report shows the tails of its deployment's process logs."""
    report = yield
    if report.failed and item.get_closest_marker("kafka") is not None:
        report.sections.extend(failure_sections())
    return report


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(env={}, data_dir=tmp_path / "data", sync="NORMAL")


@pytest.fixture
async def engine(settings: Settings) -> AsyncIterator[EmbeddedEngine]:
    eng = EmbeddedEngine(settings, embedder=HashEmbedder())
    await eng.start()
    try:
        yield eng
    finally:
        await eng.close()


@pytest.fixture
def http_server(settings: Settings) -> Iterator[ServerThread]:
    with ServerThread(settings) as srv:
        yield srv


@pytest.fixture(params=["http", "mcp"])
async def face(request: pytest.FixtureRequest, http_server: ServerThread) -> AsyncIterator[Any]:
    """Each contract test runs once through the HTTP API and once through MCP."""
    f = HttpFace(http_server.url) if request.param == "http" else McpFace(http_server.url)
    try:
        yield f
    finally:
        await f.close()


@pytest.fixture
def clean_embedding_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No embedding variable of the shell reaches the test (embedder-layer modules use it)."""
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="module")
def default_model() -> Embedder:
    """The default offline embedder, loaded once per module."""
    return load_local_embedder(DEFAULT_EMBEDDER)
