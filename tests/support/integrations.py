"""What the framework adapters' tests share: the extras check, and the clients the adapters
run over (in process, and against a real server on loopback; blocking and async)."""

from __future__ import annotations

import importlib
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from memstream.api.services.settings import load_settings
from memstream.client import AsyncClient, Client
from tests.support.embedders import HashEmbedder
from tests.support.servers import ServerThread

# Where a client reaches the engine: Client.local (no server) or a real HTTP server.
PLACES = ("local", "server")


def require_extra(module: str, extra: str) -> None:
    """Skip the calling test module without the extra's package, or fail when
    MEMSTREAM_REQUIRE_EXTRAS=1 (infra/run-tests.sh sets it, so CI never skips these)."""
    try:
        importlib.import_module(module)
    except ImportError:
        if os.environ.get("MEMSTREAM_REQUIRE_EXTRAS") == "1":
            raise
        pytest.skip(f"needs the {extra} extra: pip install -e '.[{extra}]'", allow_module_level=True)


def _settings(overrides: dict[str, Any]) -> dict[str, Any]:
    return {"sync": "NORMAL", **overrides}


@contextmanager
def blocking_client(place: str, tmp_path: Path, **settings: Any) -> Iterator[Client]:
    data = tmp_path / "data"
    if place == "local":
        with Client.local(data, embedder=HashEmbedder(), settings=_settings(settings)) as client:
            yield client
        return
    with (
        ServerThread(load_settings(env={}, data_dir=data, **_settings(settings))) as server,
        Client(server.url) as client,
    ):
        yield client


@asynccontextmanager
async def async_client(place: str, tmp_path: Path, **settings: Any) -> AsyncIterator[AsyncClient]:
    data = tmp_path / "data"
    if place == "local":
        async with AsyncClient.local(data, embedder=HashEmbedder(), settings=_settings(settings)) as client:
            yield client
        return
    with ServerThread(load_settings(env={}, data_dir=data, **_settings(settings))) as server:
        async with AsyncClient(server.url) as client:
            yield client
