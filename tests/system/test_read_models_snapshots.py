"""The read-model catalog with a snapshot store in a temporary directory: the models it makes,
and an unusable checkpoint rebuilt from its factory."""

from __future__ import annotations

from pathlib import Path

from memstream.projections.catalog import CATALOG, HISTORY, VECTORS, factories, read_models
from memstream.projections.runner import ProjectionRunner
from memstream.streams.snapshots import SnapshotStore
from tests.support.event_logs import EmptyLog


def test_every_read_model_is_made_under_its_name_and_type(tmp_path: Path) -> None:
    names = [m.name for m in CATALOG]
    assert len(set(names)) == len(names)
    for made in (read_models(None), read_models(SnapshotStore(tmp_path)), [make() for make in factories(None)]):
        assert [p.name for p in made] == names
        for model, p in zip(CATALOG, made, strict=True):
            assert isinstance(p, model.kind) and p.offset == -1
    assert read_models(SnapshotStore(tmp_path))[names.index("vectors")].blobs is not None  # type: ignore[attr-defined]


def test_an_unusable_checkpoint_is_rebuilt_from_its_factory(tmp_path: Path) -> None:
    snaps = SnapshotStore(tmp_path)
    snaps.save("history", {"offset": 3, "state": {"not": "history"}})  # another layout: does not load
    missing = {"format": 2, "hash": "0" * 64, "rows": 0, "ghosts": 0, "blob": "vectors-missing"}
    snaps.save("vectors", {"offset": 3, "state": missing})  # its sidecar is gone
    runner = ProjectionRunner(EmptyLog(), factories(snaps), snaps)  # type: ignore[arg-type]
    before = runner.get(VECTORS), runner.get(HISTORY)
    runner.restore()
    vectors, history = runner.get(VECTORS), runner.get(HISTORY)
    assert vectors is not before[0] and history is not before[1]  # fresh ones, found by name
    assert vectors.offset == -1 and history.offset == -1 and runner.offset == -1
    assert vectors.blobs is snaps  # made by its factory: the constructor's arguments are kept
    assert vectors in runner.projections and history in runner.projections


def test_restore_loads_the_sound_checkpoints_beside_an_unusable_one(tmp_path: Path) -> None:
    """Each sound checkpoint keeps what it loaded; the unusable one alone is replaced."""
    snaps = SnapshotStore(tmp_path)
    sound = ProjectionRunner(EmptyLog(), factories(snaps), snaps)  # type: ignore[arg-type]
    history = sound.get(HISTORY)
    history.apply(4, {"type": "memory.stored", "payload": {"id": 7}})
    for i, p in enumerate(sound.projections):
        p.offset = 10 + i
    sound.checkpoint()
    snaps.save("versions", {"offset": 3, "state": {"format": 99}})  # refused by its loader
    runner = ProjectionRunner(EmptyLog(), factories(snaps), snaps)  # type: ignore[arg-type]
    runner.restore()
    for i, p in enumerate(runner.projections):
        assert p.offset == (-1 if p.name == "versions" else 10 + i), p.name
    assert runner.get(HISTORY).of("mem:7") == [4]
