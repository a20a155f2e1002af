"""The read-model catalog (projections/catalog.py), the runner's lookup by name, and its factories."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstream.projections.catalog import CATALOG, HISTORY, LEXICAL, VECTORS, ReadModel, factories, read_models
from memstream.projections.lexical import LexicalProjection
from memstream.projections.runner import ProjectionRunner
from memstream.streams.log.port import LogRecord
from memstream.streams.snapshots import SnapshotStore


class EmptyLog:
    """Enough of the EventLog port for a runner over a log with no events."""

    def end_offset(self) -> int:
        return 0

    def read(self, start: int = 0, stop: int | None = None, **_: object) -> list[LogRecord]:
        return []


def test_every_read_model_is_made_under_its_name_and_type(tmp_path: Path) -> None:
    names = [m.name for m in CATALOG]
    assert len(set(names)) == len(names)
    for made in (read_models(None), read_models(SnapshotStore(tmp_path)), [make() for make in factories(None)]):
        assert [p.name for p in made] == names
        for model, p in zip(CATALOG, made, strict=True):
            assert isinstance(p, model.kind) and p.offset == -1
    assert read_models(SnapshotStore(tmp_path))[names.index("vectors")].blobs is not None  # type: ignore[attr-defined]


def test_the_runner_looks_read_models_up_by_name_and_type() -> None:
    runner = ProjectionRunner(EmptyLog(), factories(None))  # type: ignore[arg-type]
    for model in CATALOG:
        assert runner.get(model) is runner.projections[CATALOG.index(model)]
    assert isinstance(runner.get(LEXICAL), LexicalProjection)
    with pytest.raises(TypeError):
        runner.get(ReadModel("vectors", LexicalProjection, lambda _: LexicalProjection()))
    with pytest.raises(KeyError):
        runner.get(ReadModel("nope", LexicalProjection, lambda _: LexicalProjection()))


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


def test_a_runner_over_given_projections_folds_those() -> None:
    lexical = LexicalProjection()
    runner = ProjectionRunner.over(EmptyLog(), [lexical])  # type: ignore[arg-type]
    assert runner.projections == [lexical] and runner.get(LEXICAL) is lexical
