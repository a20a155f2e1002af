"""The decision state's checkpoint after a start that folded the log (no checkpoint, or one of
another format): the fold is saved, so the next start does not repeat it. A 1M-memory store
restarted after a cold start folded the whole log again (58 CPU s instead of 26)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import Settings, load_settings
from memstream.api.tools.dispatch import run_tool
from memstream.api.tools.registry import Caller
from memstream.streams.buses.embedded import DECISION_SNAPSHOT
from memstream.streams.snapshots import SnapshotStore
from tests.support.embedders import HashEmbedder
from tests.support.held_snapshot import HeldDecisionSnapshot

CALLER = Caller(client_id="decision-checkpoint")


def _settings(root: Path, every: int) -> Settings:
    return load_settings(env={}, data_dir=root, sync="NORMAL", snapshot_every=every)


async def _fill(settings: Settings, n: int) -> None:
    engine = EmbeddedEngine(settings, embedder=HashEmbedder())
    await engine.start()
    try:
        for i in range(n):
            body, code = await run_tool(engine, CALLER, "store", {"agent_id": "dc", "content": f"memory {i}"})
            assert code is None, body
    finally:
        await engine.close()


def _saved_through(settings: Settings) -> int | None:
    body = SnapshotStore(settings.snapshot_dir).load(DECISION_SNAPSHOT)
    return None if body is None else int(body["event_offset"])


async def _filled_then_checkpoint_lost(settings: Settings) -> int:
    """12 stores, then the decision checkpoint removed (as if lost: the next start is cold);
    returns the offset it had saved through."""
    await _fill(settings, 12)
    end = _saved_through(settings)
    assert end is not None
    SnapshotStore(settings.snapshot_dir).path(DECISION_SNAPSHOT).unlink()
    return end


def test_a_start_that_folds_past_the_threshold_saves_the_state_before_any_write(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "data", every=5)

    async def scenario() -> None:
        end = await _filled_then_checkpoint_lost(settings)
        engine = EmbeddedEngine(settings, embedder=HashEmbedder())
        await engine.start()
        try:
            assert _saved_through(settings) == end  # saved by the start itself, nothing written yet
        finally:
            await engine.close()

    asyncio.run(scenario())


def test_a_start_that_folds_less_saves_the_fold_when_it_closes(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "data", every=1_000)

    async def scenario() -> None:
        end = await _filled_then_checkpoint_lost(settings)
        engine = EmbeddedEngine(settings, embedder=HashEmbedder())
        await engine.start()
        assert _saved_through(settings) is None  # under the threshold: not at the start
        await engine.close()  # without a single write
        assert _saved_through(settings) == end

    asyncio.run(scenario())


def test_the_periodic_snapshot_does_not_hold_the_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every snapshot_every events the decision state is saved; built and written on the writer
    thread it held every write (1.6-2.7 s at 1M memories). Now a write goes through while it is
    being written, and close waits for it."""
    settings = _settings(tmp_path / "data", every=5)
    held = HeldDecisionSnapshot()

    async def scenario() -> None:
        engine = EmbeddedEngine(settings, embedder=HashEmbedder())
        await engine.start()
        held.install(monkeypatch)
        try:
            for i in range(5):  # the fifth makes the snapshot due
                body, code = await run_tool(engine, CALLER, "store", {"agent_id": "dc", "content": f"memory {i}"})
                assert code is None, body
            assert await asyncio.to_thread(held.started.wait, 10)
            body, code = await run_tool(engine, CALLER, "store", {"agent_id": "dc", "content": "beside it"})
            assert code is None, body
            assert not held.returned  # the write went through while the snapshot was being built
            held.release.set()
        finally:
            held.release.set()
            await engine.close()

    asyncio.run(scenario())
    assert held.returned and _saved_through(settings) == 5  # the close's own, after the periodic one
