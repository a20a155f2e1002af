"""The read-model catalog (projections/catalog.py), the runner's lookup by name, and its factories.
With a snapshot store on disk: tests/system/test_read_models_snapshots.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstream.api.services.settings import Settings
from memstream.projections.catalog import CATALOG, LEXICAL, VECTORS, ReadModel, ReadModelOptions, factories, read_models
from memstream.projections.lexical import LexicalProjection
from memstream.projections.runner import ProjectionRunner
from tests.support.event_logs import EmptyLog


def test_the_runner_looks_read_models_up_by_name_and_type() -> None:
    runner = ProjectionRunner(EmptyLog(), factories(None))  # type: ignore[arg-type]
    for model in CATALOG:
        assert runner.get(model) is runner.projections[CATALOG.index(model)]
    assert isinstance(runner.get(LEXICAL), LexicalProjection)
    with pytest.raises(TypeError):
        runner.get(ReadModel("vectors", LexicalProjection, lambda _, __: LexicalProjection()))
    with pytest.raises(KeyError):
        runner.get(ReadModel("nope", LexicalProjection, lambda _, __: LexicalProjection()))


def test_a_runner_over_given_projections_folds_those() -> None:
    lexical = LexicalProjection()
    runner = ProjectionRunner.over(EmptyLog(), [lexical])  # type: ignore[arg-type]
    assert runner.projections == [lexical] and runner.get(LEXICAL) is lexical


def test_vector_graphs_are_kept_only_when_a_recall_can_reach_past_the_window() -> None:
    """The graph serves the far list alone; MEMSTREAM_VECTOR_REACH > 0 is the only recall
    that has one, so by default no graph is built, folded, checkpointed or loaded."""
    assert Settings(data_dir=Path("unused")).read_model_options == ReadModelOptions(vector_graphs=False)
    assert Settings(data_dir=Path("unused"), vector_reach=50_000).read_model_options.vector_graphs
    # A reach inside the window adds no far list (projections/vectors/search.py), so no graphs.
    assert not Settings(data_dir=Path("unused"), vector_reach=10_000).read_model_options.vector_graphs
    for graphs in (False, True):
        made = read_models(None, ReadModelOptions(vector_graphs=graphs))
        assert made[CATALOG.index(VECTORS)].hnsw is graphs  # type: ignore[attr-defined]
        built = [make() for make in factories(None, ReadModelOptions(vector_graphs=graphs))]
        assert built[CATALOG.index(VECTORS)].hnsw is graphs  # type: ignore[attr-defined]
    assert read_models()[CATALOG.index(VECTORS)].hnsw is True  # type: ignore[attr-defined]
