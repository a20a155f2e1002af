"""The lexical index restored from its sidecar with postings and grams left packed
(projections/lexical/packed.py): it folds on, compacts and checkpoints again as the index that
never stopped; a sidecar of the previous format (1) still loads."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.projections.lexical import LexicalProjection, sidecar
from memstream.projections.lexical import index as indexmod
from memstream.projections.lexical import words as wordsmod
from memstream.projections.lexical.packed import Postings
from memstream.projections.lexical.rows import SnapshotRows, rows_of
from memstream.projections.runner import digest_of
from tests.unit.test_lexical import answers, deleted, fold, sample_events, stored, updated, via_sidecar, wiped

WORDS = ["kafka", "replay", "digest", "topic", "0xab01", "東京", "consumer", "groups", "memory", "partition"]


def text_of(picks: list[int]) -> str:
    return " ".join(WORDS[i] for i in picks)


texts = st.lists(st.integers(0, len(WORDS) - 1), min_size=1, max_size=5).map(text_of)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("store"), st.integers(1, 12), texts),
        st.tuples(st.just("update"), st.integers(1, 12), texts),
        st.tuples(st.just("delete"), st.integers(1, 12), st.just("")),
        st.tuples(st.just("wipe"), st.integers(1, 12), st.just("")),
    ),
    max_size=40,
)


def events_of(steps: list[tuple[str, int, str]]) -> list[dict[str, Any]]:
    out = []
    for op, mid, text in steps:
        if op == "store":
            out.append(stored(mid, text))
        elif op == "update":
            out.append(updated(mid, text))
        elif op == "delete":
            out.append(deleted(mid))
        else:
            out.append(wiped([mid, mid + 1], []))
    return out


@settings(max_examples=120, deadline=None)
@given(base=st.lists(texts, min_size=1, max_size=12), steps=ops, cut=st.integers(0, 40))
def test_a_restored_index_folds_and_checkpoints_as_the_live_one(
    base: list[str], steps: list[tuple[str, int, str]], cut: int
) -> None:
    events = [stored(i, t) for i, t in enumerate(base, 1)] + events_of(steps)
    cut = min(cut, len(events))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(indexmod, "COMPACT_MIN_DEAD", 2)  # compaction (which unpacks everything) happens
        m.setattr(wordsmod.WordIndex, "MERGE_MIN", 3)
        live = fold(*events)
        restored = via_sidecar(fold(*events[: len(base)]))
        fold(*events[len(base) : len(base) + cut], proj=restored)
        again = via_sidecar(restored)  # a checkpoint of a half-unpacked index, restored
        for p in (restored, again):
            fold(*events[len(base) + cut :], proj=p)
    for p in (restored, again):
        assert digest_of(p) == digest_of(live)
        assert answers(p) == answers(live)


def test_a_load_leaves_postings_packed_until_a_term_is_touched() -> None:
    restored = via_sidecar(fold(*sample_events()))
    post = restored.agents["a"].post
    assert isinstance(post, Postings) and not post.unpacked() and len(post) == len(post.base) > 0
    assert "kafka" in post and "kafka" in post.base
    fold(stored(20, "kafka again"), proj=restored)
    assert set(post.unpacked()) == {"kafka", "again"} and "kafka" not in post.base and "nosuchterm" not in post
    term = next(iter(post.base))
    assert post.get(term) is not None and term in post.unpacked()  # get sees the base, and unpacks
    slots, tfs = post["kafka"]
    assert list(slots)[-1] == restored.agents["a"].slot_of["mem:20"] and list(tfs)[-1] == 1


def as_format_2(blob: bytes) -> bytes:
    """The sidecar as format 2 wrote it: the header first, the arrays after it at offsets
    from its end (format 3 writes the arrays first, from byte 64, and the header last)."""
    assert struct.unpack_from("<Q", blob, 0)[0] == sidecar.TRAILED
    (head_len,) = struct.unpack_from("<Q", blob, len(blob) - 8)
    end = len(blob) - 8 - head_len
    header = orjson.loads(blob[end:-8])
    header["format"] = 2
    for e in header["agents"]:
        for spans in (e, e["columns"]):
            for key, span in spans.items():
                if isinstance(span, list) and len(span) == 2 and all(isinstance(x, int) for x in span):
                    spans[key] = [span[0] - 64, span[1]]
    head = orjson.dumps(header)
    new_len = len(head) + (-(len(head) + 8) % 64)
    return struct.pack("<Q", new_len) + head.ljust(new_len, b" ") + blob[64:end]


def as_format_1(blob: bytes, rows: dict[str, list[list[Any]]]) -> bytes:
    """The sidecar as the release before wrote it: each slot's ref in the header, no ``row_of``."""
    blob = as_format_2(blob)
    (head_len,) = struct.unpack_from("<Q", blob, 0)
    header = orjson.loads(blob[8 : 8 + head_len])
    base = 8 + head_len
    for e in header["agents"]:
        at, nbytes = e.pop("row_of")
        row_of = np.frombuffer(blob, dtype=np.int32, count=nbytes // 4, offset=base + at)
        e["refs"] = [rows[e["agent"]][i][0] for i in row_of.tolist()]
    header["format"] = 1
    head = orjson.dumps(header)
    new_len = len(head) + (-(len(head) + 8) % 64)
    return struct.pack("<Q", new_len) + head.ljust(new_len, b" ") + blob[base:]


@pytest.mark.parametrize("old_format", [1, 2])
def test_an_older_sidecar_still_loads_without_analysing_a_text(
    old_format: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    live = fold(*sample_events(), deleted(2))
    body = orjson.loads(orjson.dumps(live.to_snapshot()))
    rows_hash = body["blob"].removeprefix("lexical-")
    blob = b"".join(bytes(x) for x in sidecar.encode(live.agents, rows_hash))
    lists = {a: idx.snapshot_rows() for a, idx in live.agents.items() if idx.slot_of}
    old = as_format_1(blob, lists) if old_format == 1 else as_format_2(blob)

    def refuse(*_: object) -> None:
        raise AssertionError("a text was analysed")

    monkeypatch.setattr(indexmod.AgentIndex, "add", refuse)
    restored = LexicalProjection()
    restored.agents = sidecar.read(memoryview(bytearray(old)), rows_hash, rows_of(body))
    restored.offset = live.offset
    monkeypatch.undo()
    assert digest_of(restored) == digest_of(live) and answers(restored) == answers(live)
    more = [stored(20, "kafka replay"), updated(1, "consumer groups again"), deleted(6)]
    assert answers(fold(*more, proj=restored)) == answers(fold(*more, proj=live))


def test_a_sidecar_whose_slots_do_not_match_the_rows_is_refused() -> None:
    live = fold(*sample_events(), stored(7, "seventh"), stored(8, "eighth"))
    body = orjson.loads(orjson.dumps(live.to_snapshot()))
    rows_hash = body["blob"].removeprefix("lexical-")
    lists = {a: idx.snapshot_rows() for a, idx in live.agents.items() if idx.slot_of}
    lists["a"][0], lists["a"][1] = lists["a"][1], lists["a"][0]  # same rows, out of order
    swapped = {a: SnapshotRows.of_lists(rows) for a, rows in lists.items()}
    blob = bytearray(b"".join(bytes(x) for x in sidecar.encode(live.agents, rows_hash)))
    with pytest.raises(ValueError):
        sidecar.read(memoryview(blob), rows_hash, swapped)
