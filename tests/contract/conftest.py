"""The contract suites' ``face``: every contract test that takes one runs through HTTP and MCP,
on the embedded server and on a Kafka deployment (the ``kafka`` params: one deployment for the
session, skipped without a broker unless MEMSTREAM_REQUIRE_KAFKA=1). A test that cannot run in
Kafka mode says why with ``@pytest.mark.embedded_only("reason")``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.support.deployment import NamespacedFace, shared_deployment
from tests.support.faces import HttpFace, McpFace

FACES = ("http", "mcp")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "face_target" not in metafunc.fixturenames:
        return
    params = [pytest.param(("embedded", f), id=f"embedded-{f}") for f in FACES]
    if metafunc.definition.get_closest_marker("embedded_only") is None:
        params += [pytest.param(("kafka", f), id=f"kafka-{f}", marks=pytest.mark.kafka) for f in FACES]
    metafunc.parametrize("face_target", params, indirect=True)


@pytest.fixture(scope="session")
def kafka_url() -> Iterator[str]:
    """The router of the session's Kafka deployment: two workers behind `memstream serve --kafka`."""
    with shared_deployment() as url:
        yield url


@pytest.fixture
def face_target(request: pytest.FixtureRequest) -> tuple[str, str, str]:
    """(mode, face kind, base URL): a fresh embedded server per test, or the session's deployment.
    A plain fixture, so that starting the deployment runs outside the test's event loop."""
    mode, kind = request.param
    url = request.getfixturevalue("http_server").url if mode == "embedded" else request.getfixturevalue("kafka_url")
    return mode, kind, url


@pytest.fixture
async def face(face_target: tuple[str, str, str]) -> AsyncIterator[Any]:
    """The face a contract test calls: embedded, or Kafka mode with agent ids of the test's own
    (a per-test suffix), through HTTP or MCP."""
    mode, kind, url = face_target
    inner = HttpFace(url) if kind == "http" else McpFace(url)
    f: HttpFace | McpFace | NamespacedFace = inner if mode == "embedded" else NamespacedFace(inner)
    try:
        yield f
    finally:
        await f.close()
