"""An engine's start loads the configured embedder (while the checkpoints load), so the first
store or recall does not pay for it; a model that cannot load does not stop the start."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from memstream.api.services.embedding import Embedder, register_embedder
from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import Settings
from tests.support.embedders import HashEmbedder


class Factory:
    """A registered model's factory that counts its calls, records the thread, or fails."""

    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.threads: list[str] = []
        self.fail = fail

    def __call__(self) -> Embedder:
        self.calls += 1
        self.threads.append(threading.current_thread().name)
        if self.fail:
            raise RuntimeError("model file missing")
        return HashEmbedder()


def _engine(tmp_path: Path, name: str, factory: Factory) -> EmbeddedEngine:
    register_embedder(name, factory)
    return EmbeddedEngine(Settings(data_dir=tmp_path, embedder=name))


def test_start_loads_the_configured_model_off_the_loop(tmp_path: Path) -> None:
    factory = Factory()
    engine = _engine(tmp_path, "test-start-preload", factory)

    async def run() -> None:
        await engine.start()
        try:
            assert factory.calls == 1  # loaded by the start, before any call asked for it
            await engine.embed(["a first store"])
            assert factory.calls == 1
        finally:
            await engine.close()

    asyncio.run(run())
    assert factory.threads != [threading.main_thread().name]


def test_a_model_that_cannot_load_does_not_stop_the_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    factory = Factory(fail=True)
    engine = _engine(tmp_path, "test-start-preload-fails", factory)

    async def run() -> None:
        await engine.start()
        try:
            assert "did not load at start-up" in caplog.text
            with pytest.raises(RuntimeError, match="model file missing"):  # the call retries the load
                await engine.embed(["a store"])
            assert factory.calls == 2
        finally:
            await engine.close()

    asyncio.run(run())


def test_no_model_is_loaded_when_embedding_is_off(tmp_path: Path) -> None:
    engine = EmbeddedEngine(Settings(data_dir=tmp_path, embedder="none"))

    async def run() -> None:
        await engine.start()
        try:
            assert engine.embedders._embedder is None
            assert await engine.embed(["x"]) == [None]
        finally:
            await engine.close()

    asyncio.run(run())
