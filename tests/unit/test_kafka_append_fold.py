"""Fold-on-append's decision (api/kafka/worker/append_fold.py): which appended events the agent folds.

The integration side (the agent feeding a live worker's models, the tail paused and taking over
again) is tested against the broker in tests/kafka/test_kafka_reads.py."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memstream.api.kafka.worker.append_fold import FeedPlan, plan_feed


def test_a_batch_continuing_the_models_is_folded_whole() -> None:
    plan = plan_feed(9, [10, 11, 12])
    assert (plan.start, plan.stop, plan.gap, plan.count) == (0, 3, False, 3)


def test_fresh_models_take_the_partitions_first_events() -> None:
    assert plan_feed(-1, [0, 1]) == FeedPlan(0, 2, gap=False)


def test_events_the_tail_folded_first_are_skipped() -> None:
    # The tail fetched 10 and 11 once the broker acknowledged them, before the agent's turn.
    plan = plan_feed(11, [10, 11, 12, 13])
    assert (plan.start, plan.stop, plan.gap) == (2, 4, False)
    assert plan_feed(13, [10, 11, 12, 13]).count == 0
    assert not plan_feed(13, [10, 11, 12, 13]).gap


def test_a_batch_beyond_the_models_is_a_gap_and_folds_nothing() -> None:
    # The models are still catching up (or missed a batch): only the topic can fill 10..19.
    plan = plan_feed(9, [20, 21])
    assert plan.count == 0 and plan.gap


def test_a_break_inside_a_batch_stops_the_fold_there() -> None:
    plan = plan_feed(9, [10, 11, 13])
    assert (plan.start, plan.stop, plan.gap) == (0, 2, True)


def test_an_empty_batch_is_nothing_to_do() -> None:
    plan = plan_feed(5, [])
    assert plan.count == 0 and not plan.gap


@given(st.integers(-1, 50), st.integers(0, 60), st.integers(0, 20), st.sets(st.integers(0, 19), max_size=2))
def test_applied_events_always_continue_the_models(offset: int, first: int, n: int, holes: set[int]) -> None:
    """Whatever the batch, folding what the plan says leaves the models contiguous, and a gap is
    reported exactly when something of the batch beyond the models was left unfolded."""
    offsets = [o for i, o in enumerate(range(first, first + n)) if i not in holes]
    plan = plan_feed(offset, offsets)
    position = offset
    for o in offsets[plan.start : plan.stop]:
        assert o == position + 1
        position = o
    assert all(o <= offset for o in offsets[: plan.start])
    left = [o for o in offsets[plan.stop :] if o > position]
    assert plan.gap == bool(left)
