"""Two writers of one checkpoint directory, as a rebuild beside a running server: each read
model's checkpoint and the collection of the sidecars it no longer names are one step under the
directory's ``RewriteLock``, and a sidecar the other writer collected is written again."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import Settings, load_settings
from memstream.projections.catalog import factories
from memstream.projections.runner import ProjectionRunner
from memstream.projections.vectors.projection import VectorProjection
from memstream.streams.snapshots import REWRITE_LOCK, RewriteLock, SnapshotStore
from tests.support.calls import call
from tests.support.embedders import HashEmbedder


def held_elsewhere(directory: Path) -> bool:
    """Whether another holder has the directory's lock (a separate open, as another process)."""
    fd = os.open(directory / REWRITE_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


async def test_a_checkpoint_collects_its_sidecars_holding_the_lock(
    engine: EmbeddedEngine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    await call(engine, "store", agent_id="w", content="a note with a vector")
    looks: list[bool] = []
    collect = VectorProjection.drop_stale_sidecars

    def looking(self: VectorProjection) -> None:
        looks.append(held_elsewhere(settings.snapshot_dir))
        collect(self)

    monkeypatch.setattr(VectorProjection, "drop_stale_sidecars", looking)
    await engine.settle(checkpoint=True)
    assert looks == [True]
    assert not held_elsewhere(settings.snapshot_dir)  # and let go after


async def test_a_sidecar_another_writer_collected_is_written_again(engine: EmbeddedEngine, settings: Settings) -> None:
    await call(engine, "store", agent_id="w", content="a note with a vector")
    await engine.settle(checkpoint=True)
    sidecars = sorted(settings.snapshot_dir.glob("vectors-*.blob"))
    assert sidecars
    for path in sidecars:  # the other writer's checkpoint named its own and collected these
        path.unlink()
    await engine.settle(checkpoint=True)  # nothing new to fold: the same vectors
    assert sorted(settings.snapshot_dir.glob("vectors-*.blob")) == sidecars
    store = SnapshotStore(settings.snapshot_dir)
    restored = ProjectionRunner(engine.log, factories(store, settings.read_model_options), store)
    restored.restore()
    assert restored.offset == engine.runner.offset
    assert restored.digests()["vectors"] == engine.runner.digests()["vectors"]


def test_the_lock_is_reentered_by_its_holder_and_waited_for_by_others(tmp_path: Path) -> None:
    outer, inner = RewriteLock(tmp_path), RewriteLock(tmp_path)
    other_took_it = threading.Event()

    def other() -> None:
        with RewriteLock(tmp_path):
            other_took_it.set()

    with outer:
        with inner:  # the same thread: a rebuild's save, then each read model's checkpoint
            assert held_elsewhere(tmp_path)
        assert held_elsewhere(tmp_path)  # the inner exit leaves the outer hold
        waiting = threading.Thread(target=other)
        waiting.start()
        assert not other_took_it.is_set()
    waiting.join(timeout=30)
    assert other_took_it.is_set() and not held_elsewhere(tmp_path)


async def test_a_due_checkpoint_is_put_off_while_another_writer_holds_the_directory(tmp_path: Path) -> None:
    settings = load_settings(env={}, data_dir=tmp_path / "data", sync="NORMAL", snapshot_every=1)
    engine = EmbeddedEngine(settings, embedder=HashEmbedder())
    await engine.start()
    try:
        await call(engine, "store", agent_id="w", content="a note")
        engine.runner.catch_up(engine.log.end_offset(), checkpoint=False)
        assert engine.runner.checkpoint_due
        written = settings.snapshot_dir / "memories.snap"
        before = written.stat().st_mtime_ns if written.exists() else None
        holding, done = threading.Event(), threading.Event()

        def rebuild_saving() -> None:
            with RewriteLock(settings.snapshot_dir):
                holding.set()
                done.wait(30)

        saver = threading.Thread(target=rebuild_saving)
        saver.start()
        assert holding.wait(30)
        engine.runner.checkpoint_if_due()  # reads wait for it: it must not wait for the rebuild
        assert engine.runner.checkpoint_due
        assert (written.stat().st_mtime_ns if written.exists() else None) == before
        done.set()
        saver.join(30)
        engine.runner.checkpoint_if_due()
        assert not engine.runner.checkpoint_due and written.exists()
    finally:
        await engine.close()
