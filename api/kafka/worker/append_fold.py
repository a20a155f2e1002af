"""Fold-on-append: which of the events a decider just appended a partition's read models take (the
worker's faust agent folds them before it replies; the tail consumer only recovers:
docs/kafka-operations.md, "The read side and routing"). A pure function of the models' position
and the batch's offsets, so every case (already folded, contiguous, a gap) is tested without a
broker."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FeedPlan:
    """Apply ``events[start:stop]``; ``gap``: the batch does not continue the models, so the
    tail must fold what lies between (the agent cannot feed this partition until it has)."""

    start: int
    stop: int
    gap: bool

    @property
    def count(self) -> int:
        return self.stop - self.start


def plan_feed(models_offset: int, offsets: Sequence[int]) -> FeedPlan:
    """What to fold of a batch appended at ``offsets`` into models that include ``models_offset``.

    Events the models already hold (the tail fetched them as soon as the broker acknowledged
    them, before the producer's answer reached the agent) are skipped; the rest is applied only
    where it continues the models without a hole. Offsets of one batch are consecutive (one
    producer, one partition, checked on landing), but a break is treated as a gap all the same."""
    start = 0
    while start < len(offsets) and offsets[start] <= models_offset:
        start += 1
    expected = models_offset + 1
    stop = start
    while stop < len(offsets) and offsets[stop] == expected:
        stop += 1
        expected += 1
    return FeedPlan(start, stop, gap=stop < len(offsets))
