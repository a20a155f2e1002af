"""Snapshots without deep copies (projections/row_dicts.py): the same canonical bytes as
``dataclasses.asdict``, and a snapshot taken now keeps its state while the fold goes on."""

from __future__ import annotations

import copy
from dataclasses import asdict

import orjson
import pytest

from memstream.projections.records import EpisodeRow, MemoriesProjection, MemoryRow, ProfileRow
from memstream.projections.row_dicts import row_dicts
from memstream.projections.standings import StandingRow
from memstream.projections.versions import VersionRow

ROWS = [
    MemoryRow(7, "alice", "p", "c", "text", None, {"id": "u1"}, {"n": 1, "tags": ["a", "b"]}, "t0", "t1", None),
    EpisodeRow(9, "alice", "", "", "sum", "k1,k2", None, "t0", None, {"x": {"y": [1, 2]}}, "t0", "m"),
    ProfileRow("alice", "profile text", "t2"),
    StandingRow("mem:7", "alice", "open", None, "t3", 12, "client"),
    VersionRow("mem:7", "alice", "p", "m-1", 2, "t1", 10, "t4", 11),
]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: type(r).__name__)
def test_the_same_dict_and_canonical_bytes_as_asdict(row: object) -> None:
    [ours] = row_dicts([row])
    assert ours == asdict(row)
    assert list(ours) == list(asdict(row))
    opts = orjson.OPT_SORT_KEYS
    assert orjson.dumps(ours, option=opts) == orjson.dumps(asdict(row), option=opts)


def test_non_dataclasses_are_refused() -> None:
    with pytest.raises(TypeError, match="not a dataclass"):
        row_dicts([{"id": 1}])


def _event(kind: str, payload: dict[str, object], at: str) -> dict[str, object]:
    return {
        "type": kind,
        "payload": payload,
        "scope": {"agent_id": "alice", "project_id": "", "channel": ""},
        "occurred_at": at,
        "actor": {"client_id": "c"},
    }


def test_a_snapshot_keeps_its_state_while_the_fold_goes_on() -> None:
    """What a Kafka worker's checkpoint relies on: it captures the models' snapshots under their
    lock and writes them after the fold has moved on."""
    memories = MemoriesProjection()
    memories.apply(0, _event("memory.stored", {"id": 1, "content": "v1", "metadata": {"k": [1]}, "source": {}}, "t0"))
    snapshot = memories.to_snapshot()
    frozen = copy.deepcopy(snapshot)
    memories.apply(1, _event("memory.updated", {"id": 1, "content": "v2", "metadata": {"k": [2]}}, "t1"))
    memories.apply(2, _event("memory.locked", {"id": 1}, "t2"))
    memories.apply(3, _event("memory.stored", {"id": 5, "content": "other", "metadata": {}, "source": {}}, "t3"))
    memories.apply(4, _event("memory.deleted", {"id": 1}, "t4"))
    assert snapshot == frozen
