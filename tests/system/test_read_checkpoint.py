"""A read whose fold makes a checkpoint due answers first; the checkpoint then runs on a worker
thread while the event loop serves writes, and later reads wait for it (api/services/engine.py)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import load_settings
from memstream.api.tools.dispatch import run_tool
from memstream.api.tools.registry import Caller
from tests.support.embedders import HashEmbedder
from tests.support.held_snapshot import HeldDecisionSnapshot

CALLER = Caller(client_id="read-checkpoint")


def test_a_read_answers_before_the_checkpoint_its_fold_made_due(tmp_path: Path) -> None:
    settings = load_settings(env={}, data_dir=tmp_path / "data", sync="NORMAL", snapshot_every=5)

    async def scenario() -> None:
        engine = EmbeddedEngine(settings, embedder=HashEmbedder())
        await engine.start()
        loop_thread = threading.get_ident()
        started, release = threading.Event(), threading.Event()
        threads: list[int] = []
        real = engine.runner.checkpoint

        def held_checkpoint() -> None:
            threads.append(threading.get_ident())
            if threading.get_ident() == loop_thread:
                raise AssertionError("the checkpoint ran on the event loop, inside the read")
            started.set()
            release.wait(30)
            real()

        engine.runner.checkpoint = held_checkpoint  # type: ignore[method-assign]
        try:
            for i in range(5):
                body, code = await run_tool(engine, CALLER, "store", {"agent_id": "a", "content": f"note {i}"})
                assert code is None, body
            body, code = await run_tool(engine, CALLER, "recall", {"agent_id": "a", "query": "note 3"})
            assert code is None and body["messages"], body  # answered, the checkpoint not yet written
            assert await asyncio.to_thread(started.wait, 30)  # it runs now, on another thread
            body, code = await run_tool(engine, CALLER, "store", {"agent_id": "a", "content": "during it"})
            assert code is None, body  # the loop serves writes meanwhile
            waiting = asyncio.ensure_future(engine.read(lambda: engine.runner.events_since_checkpoint))
            await asyncio.sleep(0)  # one loop turn: the read reaches the lock the checkpoint holds
            assert not waiting.done()  # reads wait: the checkpoint changes the read models' layout
            release.set()
            assert await waiting == 1  # the checkpoint reset the count; the read folded "during it"
            assert len(threads) == 1 and threads[0] != loop_thread
            assert (settings.snapshot_dir / "memories.snap").exists()
        finally:
            release.set()
            engine.runner.checkpoint = real  # type: ignore[method-assign]  # close's own, on the loop
            await engine.close()

    asyncio.run(scenario())


def test_reads_go_on_while_the_checkpoint_waits_for_a_decision_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both are due every snapshot_every events and go one at a time on one thread; the read
    models' checkpoint takes the read lock only once the decision snapshot is written."""
    settings = load_settings(env={}, data_dir=tmp_path / "data", sync="NORMAL", snapshot_every=5)
    held = HeldDecisionSnapshot()

    async def scenario() -> None:
        engine = EmbeddedEngine(settings, embedder=HashEmbedder())
        await engine.start()
        held.install(monkeypatch)
        try:
            for i in range(5):  # the fifth makes both due
                body, code = await run_tool(engine, CALLER, "store", {"agent_id": "a", "content": f"note {i}"})
                assert code is None, body
            assert await asyncio.to_thread(held.started.wait, 10)  # the decision snapshot is held
            body, code = await run_tool(engine, CALLER, "recall", {"agent_id": "a", "query": "note 3"})
            assert code is None and body["messages"], body  # its fold made the read models' due
            for _ in range(3):  # loop turns, not time: the checkpoint task starts and waits for that thread
                await asyncio.sleep(0)
            body, code = await run_tool(engine, CALLER, "recall", {"agent_id": "a", "query": "note 4"})
            assert code is None and body["messages"], body
            assert not held.returned  # answered while the decision snapshot was still held
        finally:
            held.release.set()
            await engine.close()

    asyncio.run(scenario())
    assert held.returned
    assert (settings.snapshot_dir / "memories.snap").exists()
