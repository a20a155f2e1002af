"""The history read model's checkpoint holds its refs as columns (format 2). A history loaded
from one, with events folded after it, must answer ``of`` and snapshot (so digest) exactly as the
same events folded from the start; a format-1 checkpoint (a dict of ref strings) still loads;
a malformed one is refused (the runner then refolds the model from the log)."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.projections.history import HistoryProjection, refs_touched
from memstream.projections.runner import digest_of

REFS = ["mem:0", "mem:1", "mem:7", "mem:12", "ep:1", "ep:12", "profile:3", "mem:007", "standing:x", "odd", "a:b:5"]


def event(ref: str) -> dict[str, Any]:
    if ref.startswith("ep:"):
        return {"type": "episode.updated", "payload": {"id": int(ref[3:])}}
    kind, _, num = ref.partition(":")
    if kind in ("mem", "profile") and num.isdigit() and not num.startswith("0"):
        return {"type": "memory.updated", "payload": {"kind": kind, "id": int(num)}}
    return {"type": "standing.declared", "payload": {"ref": ref}}


def fold(h: HistoryProjection, refs: list[str], start: int) -> HistoryProjection:
    for i, ref in enumerate(refs, start):
        h.apply(i, orjson.loads(orjson.dumps(event(ref))))
    return h


def reloaded(h: HistoryProjection) -> HistoryProjection:
    fresh = HistoryProjection()
    fresh.load_snapshot(orjson.loads(orjson.dumps(h.to_snapshot())))
    return fresh


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(REFS), max_size=40), st.integers(0, 40), st.integers(0, 3))
def test_loaded_then_folded_answers_as_folded(refs: list[str], cut: int, reloads: int) -> None:
    whole = fold(HistoryProjection(), refs, 0)
    cut = min(cut, len(refs))
    h = fold(HistoryProjection(), refs[:cut], 0)
    for _ in range(reloads):
        h = reloaded(h)
    h = fold(h, refs[cut:], cut)
    expected: dict[str, list[int]] = {}
    for offset, ref in enumerate(refs):
        for touched in refs_touched(event(ref)):
            expected.setdefault(touched, []).append(offset)
    for ref in {*REFS, *expected}:
        assert h.of(ref) == whole.of(ref) == expected.get(ref, [])
    assert h.to_snapshot() == whole.to_snapshot()
    assert digest_of(h) == digest_of(whole) == digest_of(reloaded(whole))


def test_a_format_1_checkpoint_loads_and_the_next_is_columns() -> None:
    h = HistoryProjection()
    h.load_snapshot({"offsets": {"mem:1": [0, 4], "ep:2": [1], "odd": [3]}})
    assert h.of("mem:1") == [0, 4] and h.of("ep:2") == [1] and h.of("odd") == [3]
    body = h.to_snapshot()
    assert body["format"] == 2 and body["other"] == {"odd": [3]}
    again = reloaded(h)
    assert again.of("mem:1") == [0, 4] and again.of("ep:2") == [1] and again.of("odd") == [3]
    assert not again.offsets.keys() - {"odd"}  # the numbered refs are columns now


def _valid() -> dict[str, Any]:
    return orjson.loads(orjson.dumps(fold(HistoryProjection(), ["mem:1", "mem:2", "mem:1", "odd"], 0).to_snapshot()))


def _col(values: list[int], dtype: str = "<u1") -> list[str]:
    return [dtype, np.asarray(values, dtype=dtype).tobytes().hex()]


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b["kinds"]["mem"].update(ids=_col([2, 0])),  # not ascending (gaps from the first)
        lambda b: b["kinds"]["mem"].update(ids=_col([1])),  # ids and counts differ in length
        lambda b: b["kinds"]["mem"].update(counts=_col([2, 0])),  # a ref without offsets
        lambda b: b["kinds"]["mem"].update(counts=_col([2, 2])),  # more counted than held
        lambda b: b["kinds"]["mem"].update(counts=_col([1, 1])),  # offsets left over
        lambda b: b["kinds"]["mem"].update(counts=_col([2, 1], "<i8")),  # not one of the types
        lambda b: b.update(offsets=_col([1 << 63, 1, 2, 3], "<u8")),  # past int64
        lambda b: b["other"].update({"mem:9": [5]}),  # a numbered ref outside the columns
        lambda b: b["other"].update({"x": []}),
        lambda b: b.update(offsets=["<u1", "not hex!"]),
    ],
)
def test_a_malformed_checkpoint_is_refused(damage: Any) -> None:
    body = _valid()
    HistoryProjection().load_snapshot(_valid())  # the undamaged one loads
    damage(body)
    with pytest.raises((ValueError, KeyError, TypeError)):
        HistoryProjection().load_snapshot(body)
