"""The read-model catalog (projections/catalog.py), the runner's lookup by name, and its factories.
With a snapshot store on disk: tests/system/test_read_models_snapshots.py."""

from __future__ import annotations

import pytest

from memstream.projections.catalog import CATALOG, LEXICAL, ReadModel, factories
from memstream.projections.lexical import LexicalProjection
from memstream.projections.runner import ProjectionRunner
from tests.support.event_logs import EmptyLog


def test_the_runner_looks_read_models_up_by_name_and_type() -> None:
    runner = ProjectionRunner(EmptyLog(), factories(None))  # type: ignore[arg-type]
    for model in CATALOG:
        assert runner.get(model) is runner.projections[CATALOG.index(model)]
    assert isinstance(runner.get(LEXICAL), LexicalProjection)
    with pytest.raises(TypeError):
        runner.get(ReadModel("vectors", LexicalProjection, lambda _: LexicalProjection()))
    with pytest.raises(KeyError):
        runner.get(ReadModel("nope", LexicalProjection, lambda _: LexicalProjection()))


def test_a_runner_over_given_projections_folds_those() -> None:
    lexical = LexicalProjection()
    runner = ProjectionRunner.over(EmptyLog(), [lexical])  # type: ignore[arg-type]
    assert runner.projections == [lexical] and runner.get(LEXICAL) is lexical
