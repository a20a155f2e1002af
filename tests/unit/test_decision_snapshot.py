"""The decision state's snapshot formats: format 4 (memories as columns, msg ids too), format 3
(msg ids as pairs) and format 2 (a row per memory), the older two still loaded, give the same
state, and the digest is over the same canonical content."""

from __future__ import annotations

import base64
import tracemalloc
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings

from memstream.streams.decision.facts import MemoryFacts
from memstream.streams.decision.snapshot import memories_from_columns, memories_to_columns
from memstream.streams.decision.state import DecisionState
from tests.unit.test_decision_properties import command_specs, run


def _through_json(body: dict[str, Any]) -> DecisionState:
    return DecisionState.from_snapshot(orjson.loads(orjson.dumps(body)))


@settings(max_examples=150, deadline=None)
@given(command_specs)
def test_both_formats_load_the_same_state(specs: list[tuple[Any, ...]]) -> None:
    live, _, _, _ = run(specs)
    columns, rows = live.to_snapshot(), live.canonical()
    assert columns["format"] == 4 and rows["format"] == 2
    from_columns, from_rows = _through_json(columns), _through_json(rows)
    from_pairs = _through_json(_as_format_3(columns))
    for restored in (from_columns, from_rows, from_pairs):
        assert restored.digest() == live.digest()
        assert restored.next_seq == live.next_seq and restored.event_offset == live.event_offset
        for name, st in live.agents.items():
            got = restored.agents[name]
            assert list(got.memories.items()) == list(st.memories.items())
            assert got.by_msg == st.by_msg and got.by_content == st.by_content
            assert got.locked == st.locked
            assert list(got.commands.items()) == list(st.commands.items())
            assert got.episodes == st.episodes and got.model == st.model
    # A state loaded from either format writes the same snapshot again.
    assert orjson.dumps(from_rows.to_snapshot()) == orjson.dumps(columns)
    assert orjson.dumps(from_columns.canonical()) == orjson.dumps(rows)
    assert orjson.dumps(from_pairs.to_snapshot()) == orjson.dumps(columns)


def _as_format_3(body: dict[str, Any]) -> dict[str, Any]:
    """A format-4 snapshot as the previous release wrote it: each msg id a [row, msg id] pair."""
    agents = {}
    for name, a in body["agents"].items():
        held = a["memories"]["msg_ids"]
        rows = np.frombuffer(base64.b64decode(held["rows"]), "<u4").tolist()
        pairs = [[row, m] for row, m in zip(rows, held["values"], strict=True)]
        agents[name] = {**a, "memories": {**a["memories"], "msg_ids": pairs}}
    return {**body, "format": 3, "agents": agents}


def _facts(i: int, **kw: Any) -> MemoryFacts:
    base: dict[str, Any] = {
        "project": "p" if i % 2 else "",
        "channel": "c",
        "msg_id": f"m{i}" if i % 3 == 0 else None,
        "content_key": i.to_bytes(16, "little"),
        "source_id": "src" if i % 5 == 0 else "",
        "locked": i % 4 == 0,
        "models": ("m1",) if i % 2 else (),
    }
    return MemoryFacts(**{**base, **kw})


def test_columns_round_trip_every_field() -> None:
    memories = {i * 16 + 3: _facts(i) for i in range(40)}
    back = memories_from_columns(orjson.loads(orjson.dumps(memories_to_columns(memories))))
    assert list(back.items()) == sorted(memories.items())
    assert memories_from_columns(memories_to_columns({})) == {}
    every = {i: _facts(i, msg_id=f"m{i}") for i in range(30)}  # each memory with a msg id
    assert memories_from_columns(orjson.loads(orjson.dumps(memories_to_columns(every)))) == every


def test_msg_ids_are_a_column_not_a_list_per_memory() -> None:
    """An agent that passes its message ids gives every memory one; as a [row, msg id] list each
    they were 240 bytes a memory of the snapshot's making (at 1M memories, ~0.12 GB more at the
    top of a running server's checkpoint), and the whole snapshot's columns are ~125."""
    n = 20_000
    memories = {i: _facts(i, msg_id=f"msg-{i}") for i in range(n)}
    tracemalloc.start()
    try:
        memories_to_columns(memories)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak / n < 170, peak / n


def test_damaged_columns_are_refused() -> None:
    cols = memories_to_columns({i + 1: _facts(i) for i in range(5)})
    short = {**cols, "content_keys": base64.b64encode(b"x" * 16).decode()}
    past_table = {**cols, "project": base64.b64encode(bytes(4) * 4 + b"\x09\0\0\0").decode()}
    unordered = {**cols, "ids": base64.b64encode(b"".join(i.to_bytes(8, "little") for i in (5, 4, 3, 2, 1))).decode()}
    wrong_n = {**cols, "n": 6}
    msg_rows = base64.b64encode(np.array([3, 1], "<u4").tobytes()).decode()
    msg_unordered = {**cols, "msg_ids": {"rows": msg_rows, "values": ["a", "b"]}}
    msg_past = {**cols, "msg_ids": {"rows": base64.b64encode(np.array([9], "<u4").tobytes()).decode(), "values": ["a"]}}
    msg_count = {**cols, "msg_ids": {"rows": msg_rows, "values": ["a"]}}
    msg_text = {**cols, "msg_ids": {"rows": msg_rows, "values": "ab"}}
    for bad in (short, past_table, unordered, wrong_n, msg_unordered, msg_past, msg_count, msg_text):
        with pytest.raises((ValueError, TypeError)):
            memories_from_columns(bad)
    with pytest.raises(ValueError, match="format"):
        DecisionState.from_snapshot({"format": 1, "num_partitions": 1, "agents": {}})
