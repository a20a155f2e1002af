"""Memory and version rows in their snapshots (lists of named fields; the previous layout, a
dict per row, still loads), and the strings many rows repeat held once: a memory row's agent,
author, model and timestamps, a version row's, and the refs the lexical and versions read
models both key by, whether folded or loaded; sharing them changes no snapshot or digest."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from memstream.projections.history import HistoryProjection, refs_touched
from memstream.projections.lexical import LexicalProjection
from memstream.projections.records import MemoriesProjection
from memstream.projections.row_dicts import row_dicts, row_lists
from memstream.projections.runner import digest_of
from memstream.projections.versions import VersionsProjection
from memstream.streams.decision.state import DecisionState
from tests.unit.test_lexical import make_event, updated, via_sidecar


def stored(mid: int, content: str) -> dict[str, Any]:
    payload = {
        "id": mid,
        "content": content,
        "msg_id": f"m{mid}",
        "locked": False,
        "source": {"type": "Agent", "id": "alice", "name": ""},
        "embedding": {"model": "minilm", "dim": 3, "dtype": "float32"},
    }
    return make_event("memory.stored", payload, agent="alice")


def fold(p: Any, events: list[dict[str, Any]]) -> Any:
    for offset, ev in enumerate(events):
        # each event decoded on its own, as the log hands them over: no string shared by accident
        p.apply(offset, orjson.loads(orjson.dumps(ev)))
        p.offset = offset
    return p


def reloaded(p: Any, fresh: Any) -> Any:
    fresh.load_snapshot(orjson.loads(orjson.dumps(p.to_snapshot())))
    return fresh


EVENTS = [
    stored(1, "first memory"),
    stored(2, "second memory"),
    updated(2, "second, edited", agent="alice"),
    stored(3, "third memory"),
]


def test_memory_rows_share_their_repeated_strings_folded_and_loaded() -> None:
    folded = fold(MemoriesProjection(), EVENTS)
    loaded = reloaded(folded, MemoriesProjection())
    assert digest_of(loaded) == digest_of(folded) and loaded.to_snapshot() == folded.to_snapshot()
    for p in (folded, loaded):
        a, b = p.rows[1], p.rows[3]
        assert a.agent_id is b.agent_id and a.author is b.author and a.embedding_model is b.embedding_model
        assert a.source["type"] is b.source["type"] and a.source["id"] is b.source["id"]
        assert a.updated_at is a.created_at  # never updated: one string for both
    assert loaded.rows[2].updated_at == folded.rows[2].updated_at


def test_versions_and_lexical_key_by_the_same_ref_strings() -> None:
    versions, lexical = fold(VersionsProjection(), EVENTS), fold(LexicalProjection(), EVENTS)
    lexical_refs = {r: r for r in lexical.agents["alice"].slot_of}
    for ref, row in versions.rows.items():
        assert row.ref is ref and lexical_refs[ref] is ref
    # Loaded, the refs are equal, not shared: interning a million of them cost more CPU than
    # the memory it saved (docs/benchmarks.md, "Restart"); the agents still are.
    again = reloaded(versions, VersionsProjection())
    assert digest_of(again) == digest_of(versions) and again.to_snapshot() == versions.to_snapshot()
    for ref, row in again.rows.items():
        assert row.ref == ref and ref in lexical_refs and row.agent_id is versions.rows[ref].agent_id


def test_snapshots_of_the_previous_layout_still_load() -> None:
    """Memories and versions snapshots hold columns (format 3); the previous layouts, lists of
    named fields (format 2) and a dict per row, load to the same state."""
    for kind in (MemoriesProjection, VersionsProjection):
        folded = fold(kind(), EVENTS)
        body = folded.to_snapshot()
        first = "id" if kind is MemoriesProjection else "ref"
        assert body["format"] == 3 and len(body["columns"][first]) == len(folded.rows)
        in_order = [folded.rows[k] for k in (folded.rows if kind is MemoriesProjection else sorted(folded.rows))]
        olds = [
            {"rows": row_dicts(folded.rows[k] for k in sorted(folded.rows))},
            {"format": 2, "fields": body["fields"], "rows": row_lists(in_order)},
        ]
        for old in olds:
            again = kind()
            again.load_snapshot(orjson.loads(orjson.dumps(old)))
            assert again.to_snapshot() == body and digest_of(again) == digest_of(folded)


def test_a_snapshot_naming_other_fields_is_refused() -> None:
    for kind in (MemoriesProjection, VersionsProjection):
        body = fold(kind(), EVENTS).to_snapshot()
        with pytest.raises(ValueError):
            kind().load_snapshot({**body, "fields": list(reversed(body["fields"]))})
        with pytest.raises(ValueError):
            kind().load_snapshot({**body, "format": 4})


def test_a_memory_snapshot_with_inconsistent_columns_is_refused() -> None:
    body = orjson.loads(orjson.dumps(fold(MemoriesProjection(), EVENTS).to_snapshot()))
    short = orjson.loads(orjson.dumps(body))
    short["columns"]["content"].pop()
    past = orjson.loads(orjson.dumps(body))
    past["coded"]["author"][1][0] = 7  # a code past its table
    twice = orjson.loads(orjson.dumps(body))
    twice["columns"]["id"][1] = twice["columns"]["id"][0]
    for bad in (short, past, twice):
        with pytest.raises((ValueError, IndexError)):
            MemoriesProjection().load_snapshot(bad)


def test_after_a_restart_memories_and_the_lexical_index_hold_each_text() -> None:
    """Equal texts, each load its own (not interned: see above), every live row's and no other."""
    memories = reloaded(fold(MemoriesProjection(), EVENTS), MemoriesProjection())
    lexical = via_sidecar(fold(LexicalProjection(), EVENTS))
    idx = lexical.agents["alice"]
    assert len(idx.slot_of) == len(memories.rows)
    for mid, row in memories.rows.items():
        assert idx.texts[idx.slot_of[f"mem:{mid}"]] == row.content


def test_history_keys_by_the_versions_ref_strings_when_folded() -> None:
    versions = fold(VersionsProjection(), EVENTS)
    folded = fold(HistoryProjection(), EVENTS)
    keys = {k: k for k in folded.offsets}
    assert keys and all(keys[ref] is ref for ref in versions.rows)
    assert folded.of("mem:2") == [1, 2]
    loaded = reloaded(folded, HistoryProjection())
    assert not loaded.offsets and loaded.of("mem:2") == [1, 2]  # columns: no string per ref


def test_history_holds_a_lone_offset_bare_and_answers_alike_loaded() -> None:
    """A ref touched once holds its offset, not a list; what ``of`` answers, and the digest, do
    not depend on whether the state was folded or loaded, nor on what was folded after a load."""
    folded = fold(HistoryProjection(), EVENTS)
    expected: dict[str, list[int]] = {}
    for offset, ev in enumerate(EVENTS):
        for ref in refs_touched(ev):
            expected.setdefault(ref, []).append(offset)
    assert any(isinstance(v, int) for v in folded.offsets.values())
    loaded = reloaded(folded, HistoryProjection())
    for history in (folded, loaded):
        assert {ref: history.of(ref) for ref in expected} == expected
        assert history.of("mem:999") == []
        assert digest_of(history) == digest_of(folded)
    event = make_event("memory.deleted", {"id": 1}, agent="alice")
    for history in (folded, loaded):
        history.apply(len(EVENTS), event)
        assert history.of("mem:1") == [*expected["mem:1"], len(EVENTS)]
    assert digest_of(loaded) == digest_of(folded)


def test_the_decision_state_holds_a_memory_facts_strings_once() -> None:
    folded = DecisionState(1)
    for offset, ev in enumerate(EVENTS):
        folded.apply_event(offset, orjson.loads(orjson.dumps(ev)))
    loaded = DecisionState.from_snapshot(orjson.loads(orjson.dumps(folded.to_snapshot())))
    assert loaded.digest() == folded.digest()
    for state in (folded, loaded):
        a, b = state.agent("alice").memories[1], state.agent("alice").memories[3]
        assert a.source_id == "alice" and a.source_id is b.source_id


def test_rows_without_source_or_metadata_share_one_empty_dict_that_refuses_writes() -> None:
    bare = make_event("memory.stored", {"id": 7, "content": "no source", "metadata": {}}, agent="alice")
    rich = make_event("memory.stored", {"id": 8, "content": "some", "metadata": {"k": "v"}}, agent="alice")
    events = [*EVENTS, bare, rich, updated(8, "edited", agent="alice")]
    folded = fold(MemoriesProjection(), events)
    loaded = reloaded(folded, MemoriesProjection())
    for p in (folded, loaded):
        empty, full = p.rows[7], p.rows[8]
        assert empty.source == {} and empty.metadata == {} and empty.source is empty.metadata
        assert full.metadata == {"k": "v"} and full.source == {}
        assert orjson.dumps(p.to_snapshot()) == orjson.dumps(folded.to_snapshot())
        with pytest.raises(TypeError):
            empty.metadata["k"] = "v"  # would reach every row without metadata
        assert p.rows[1].metadata == {}
    assert digest_of(loaded) == digest_of(folded)
    body = orjson.loads(orjson.dumps(folded.to_snapshot()))
    at = body["columns"]["id"].index(7)
    table, codes = body["coded"]["source"]
    assert table[codes[at]] == {} and body["columns"]["metadata"][at] is None  # empty: null, not a dict per row


def test_rows_with_equal_sources_share_one_dict_that_refuses_writes() -> None:
    """Equal sources (keys in order, values and their types) are one dict, folded and loaded;
    unequal ones (a value of another type included) are not, and the snapshot bytes are the
    same as with a dict per row."""
    def with_source(mid: int, source: dict[str, Any]) -> dict[str, Any]:
        return make_event("memory.stored", {"id": mid, "content": "c", "source": source}, agent="alice")

    typed, flag = with_source(9, {"type": "Agent", "id": 1}), with_source(10, {"type": "Agent", "id": True})
    nested = {"type": "Agent", "id": "alice", "tags": ["x"]}
    events = [*EVENTS, typed, flag, with_source(11, nested), with_source(12, nested)]
    folded = fold(MemoriesProjection(), events)
    loaded = reloaded(folded, MemoriesProjection())
    for p in (folded, loaded):
        assert p.rows[1].source is p.rows[3].source and p.rows[1].source == {"type": "Agent", "id": "alice", "name": ""}
        assert p.rows[9].source is not p.rows[10].source and p.rows[10].source["id"] is True
        assert p.rows[11].source == nested and p.rows[11].source is not p.rows[12].source  # unhashable: own dict
        with pytest.raises(TypeError):
            p.rows[1].source["name"] = "x"  # would reach every row with this source
        assert orjson.dumps(p.to_snapshot()) == orjson.dumps(folded.to_snapshot())
    assert digest_of(loaded) == digest_of(folded)
    folded.apply(len(events), orjson.loads(orjson.dumps(make_event("memory.deleted", {"id": 1}, agent="alice"))))
    assert folded.sources.table == {}  # a drop empties the table: no erased source held by it
    again = fold(MemoriesProjection(), [stored(20, "after")])
    assert again.rows[20].source == folded.rows[3].source
