"""How an embed call's texts are cut into model runs: the cheapest cut under the cost model, its
limits, and the default model running the plan (no long text pads a run of short ones)."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from memstream.api.services.embedding import Embedder
from memstream.api.services.embedding.chunking import plan_runs, run_cost
from memstream.api.services.embedding.onnx_backend import OnnxMeanPoolEmbedder

pytestmark = pytest.mark.usefixtures("clean_embedding_env")


def plan_cost(lengths: list[int], runs: list[list[int]]) -> float:
    return sum(run_cost(len(run), max(lengths[i] for i in run)) for run in runs)


def cuts(n: int, max_texts: int):
    """Every cut of n sorted texts into contiguous runs of at most ``max_texts``."""
    for mask in itertools.product((False, True), repeat=n - 1):
        bounds = [0, *(i + 1 for i, cut in enumerate(mask) if cut), n]
        sizes = [b - a for a, b in itertools.pairwise(bounds)]
        if max(sizes) <= max_texts:
            yield bounds


def brute_force_cost(lengths: list[int], max_texts: int, max_tokens: int) -> float:
    ordered = sorted(lengths)
    best = float("inf")
    for bounds in cuts(len(ordered), max_texts):
        runs = [ordered[a:b] for a, b in itertools.pairwise(bounds)]
        if any(len(r) > 1 and len(r) * r[-1] > max_tokens for r in runs):
            continue
        best = min(best, sum(run_cost(len(r), r[-1]) for r in runs))
    return best


def test_every_text_runs_once_in_runs_of_like_length_within_the_limits():
    rng = random.Random(3)
    for _ in range(200):
        lengths = [rng.randint(3, 256) for _ in range(rng.randint(1, 64))]
        runs = plan_runs(lengths, max_texts=8, max_tokens=1024)
        assert sorted(i for run in runs for i in run) == list(range(len(lengths)))
        flat = [lengths[i] for run in runs for i in run]
        assert flat == sorted(lengths)  # runs are stretches of the texts sorted by length
        for run in runs:
            assert len(run) <= 8
            assert len(run) == 1 or len(run) * max(lengths[i] for i in run) <= 1024


def test_the_plan_is_the_cheapest_cut():
    rng = random.Random(11)
    for _ in range(150):
        lengths = [rng.choice((rng.randint(8, 40), rng.randint(40, 200))) for _ in range(rng.randint(1, 10))]
        runs = plan_runs(lengths, max_texts=4, max_tokens=512)
        assert plan_cost(lengths, runs) == pytest.approx(brute_force_cost(lengths, 4, 512))


def test_texts_of_one_length_share_as_few_runs_as_the_limits_allow():
    assert [len(r) for r in plan_runs([20] * 8, max_texts=8, max_tokens=1024)] == [8]
    assert len(plan_runs([20] * 20, max_texts=8, max_tokens=1024)) == 3
    assert sorted(len(r) for r in plan_runs([200] * 8, max_texts=8, max_tokens=1024)) == [3, 5]  # 5 * 200 <= 1024


def test_a_long_text_runs_apart_from_short_ones():
    lengths = [12, 15, 14, 110, 13, 16, 12, 15]  # all eight fit the token limit (8 * 110 <= 1024)
    runs = plan_runs(lengths, max_texts=8, max_tokens=1024)
    assert runs[-1] == [3]
    assert sorted(i for run in runs[:-1] for i in run) == [0, 1, 2, 4, 5, 6, 7]


def test_a_text_longer_than_the_token_limit_runs_alone():
    assert plan_runs([300, 10, 10], max_texts=8, max_tokens=256) == [[1, 2], [0]]
    assert plan_runs([], max_texts=8, max_tokens=1024) == []


def test_bad_limits_are_refused():
    with pytest.raises(ValueError, match="max_texts"):
        plan_runs([1, 2], max_texts=0, max_tokens=10)


class CountingRuns:
    """Wraps an embedder's runs: the widths and sizes it pads to."""

    def __init__(self, model: OnnxMeanPoolEmbedder) -> None:
        self.run = model._run
        self.shapes: list[tuple[int, int]] = []

    def __call__(self, batch: list[list[int]]) -> np.ndarray:
        self.shapes.append((len(batch), max(len(ids) for ids in batch)))
        return self.run(batch)


def test_the_default_model_does_not_pad_short_texts_to_a_long_ones_width(default_model: Embedder, monkeypatch):
    assert isinstance(default_model, OnnxMeanPoolEmbedder)
    short = [f"note {i}: the staging key rotates on Tuesdays" for i in range(7)]
    # ~100 pieces: within the token limit with the seven (8 * 100 <= 1024), so only the cost
    # model keeps it apart
    long = "A long turn about the trip, the weather, the food and who came along. " * 6
    runs = CountingRuns(default_model)
    monkeypatch.setattr(default_model, "_run", runs)
    out = default_model.embed([*short[:3], long, *short[3:]])
    (size_short, width_short), (size_long, width_long) = runs.shapes
    assert (size_short, size_long) == (7, 1)  # the long text ran alone
    assert width_short < 20 < 80 < width_long <= 1024 // 8  # the short ones padded to their own width
    monkeypatch.undo()
    alone = default_model.embed([long, short[0]])
    assert float(np.dot(out[3], alone[0])) > 0.9999
    assert float(np.dot(out[0], alone[1])) > 0.9999
