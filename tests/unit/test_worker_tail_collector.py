"""A worker's tail folds large fetches with the cyclic collector paused, and collects the
garbage before it freezes what survives: such fetches recur on a busy worker, and a bare freeze
would keep the garbage cycles alive at that moment for the rest of the process
(api/kafka/worker/tail.py)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from memstream.api.kafka.worker import tail
from memstream.streams.folding import collector_paused


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_a_large_fetch_folds_with_the_collector_paused_and_freezes_no_garbage(
    monkeypatch: pytest.MonkeyPatch, unfrozen: None
) -> None:
    seen: list[bool] = []
    garbage: list[weakref.ref[_Cycle]] = []

    def fold(models: object, records: object, opener: object) -> int:
        seen.append(gc.isenabled())
        garbage.append(weakref.ref(_Cycle()))  # unreachable but for its own cycle
        return len(records)  # type: ignore[arg-type]

    monkeypatch.setattr(tail, "fold_records", fold)
    records = [object()] * tail.PAUSE_AT
    assert asyncio.run(tail.fold_fetched(object(), records, None)) == tail.PAUSE_AT  # type: ignore[arg-type]
    assert seen == [False]
    assert gc.isenabled()
    assert garbage[0]() is None  # collected, not frozen with the survivors


def test_a_bare_pause_freezes_garbage_and_a_collecting_one_does_not(unfrozen: None) -> None:
    with collector_paused():
        frozen = weakref.ref(_Cycle())
    gc.collect()
    assert frozen() is not None  # what a bare freeze keeps for good
    gc.unfreeze()
    with collector_paused(collect=True):
        collected = weakref.ref(_Cycle())
    assert collected() is None
    assert gc.isenabled()
