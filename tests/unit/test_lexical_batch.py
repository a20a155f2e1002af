"""The lexical fold in batches (``LexicalProjection.apply_many``, ``AgentIndex.add_many``, the
runner's ``fold_records``): the same index as ``apply`` of each event in turn, to the order of
every table, so the snapshot, its sidecar's bytes and every answer are the same."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstream.projections.catalog import ReadModelOptions, factories
from memstream.projections.lexical import LexicalProjection, pruning, sidecar
from memstream.projections.lexical import bm25 as bm25mod
from memstream.projections.lexical import index as indexmod
from memstream.projections.lexical import words as wordsmod
from memstream.projections.lexical.index import AgentIndex
from memstream.projections.runner import ProjectionRunner, digest_of, fold_record, fold_records
from memstream.projections.scope import ScopeFilter
from tests.unit.test_lexical import PROP_QUERIES, PROP_SCOPES, Log, fold, op_st, stored, to_events


def batched(events: list[dict[str, Any]], cuts: list[int], proj: LexicalProjection | None = None) -> LexicalProjection:
    """``events`` folded through ``apply_many``, in the runs the ``cuts`` make."""
    p = proj or LexicalProjection()
    bounds = sorted({min(c, len(events)) for c in cuts} | {0, len(events)})
    for a, b in itertools.pairwise(bounds):
        p.apply_many([(p.offset + 1 + i, ev) for i, ev in enumerate(events[a:b])])
        p.offset += b - a
    return p


def state_of(idx: AgentIndex) -> dict[str, Any]:
    """Everything an agent's index holds, tables in their order (what the sidecar writes follows it)."""
    n = idx.n
    kw = idx.kw
    kw.merge()  # the CSR's content does not depend on when the pending pairs were merged
    return {
        "n": n,
        "cap": idx.seq.shape[0],
        "columns": [getattr(idx, c)[:n].tolist() for c in ("seq", "dlen", "proj", "chan", "alive")],
        "refs": idx.refs,
        "texts": idx.texts,
        "slot_of": list(idx.slot_of.items()),
        "codes": list(idx.codes.items()),
        "buckets": list(idx.buckets.items()),
        "dead": idx.dead,
        "total_len": idx.total_len,
        "post": [(t, s.tolist(), f.tolist()) for t, (s, f) in idx.post.items()],
        "df": list(idx.df.items()),
        "words": list(kw.ids.items()),
        "grams": [(g, a.tolist()) for g, a in kw.grams.items()],
        "word_csr": (kw.ptr.tolist(), kw.flat.tolist()),
    }


def sidecar_bytes(p: LexicalProjection) -> bytes:
    rows_hash = p.to_snapshot()["blob"].removeprefix("lexical-")
    return b"".join(bytes(part) for part in sidecar.encode(p.agents, rows_hash))


def assert_same(a: LexicalProjection, b: LexicalProjection) -> None:
    assert list(a.agents) == list(b.agents)
    for agent in a.agents:
        assert state_of(a.agents[agent]) == state_of(b.agents[agent]), agent
    assert orjson.dumps(a.to_snapshot()) == orjson.dumps(b.to_snapshot())
    assert sidecar_bytes(a) == sidecar_bytes(b)
    assert [(a.search(s, q, 4), a.keyword(s, q, 4), a.count(s)) for s in PROP_SCOPES for q in PROP_QUERIES] == [
        (b.search(s, q, 4), b.keyword(s, q, 4), b.count(s)) for s in PROP_SCOPES for q in PROP_QUERIES
    ]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(op_st, min_size=1, max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=6),
    again=st.lists(st.integers(0, 59), max_size=3),
    small=st.booleans(),
)
def test_batches_fold_to_the_index_one_by_one_makes(
    ops: list[tuple], cuts: list[int], again: list[int], small: bool
) -> None:
    events = to_events(ops)
    for i in again:  # a create applied again (a replayed record) keeps its row and place
        if i < len(events) and events[i]["type"] in ("memory.stored", "episode.archived"):
            events.append(events[i])
    with pytest.MonkeyPatch.context() as m:
        if small:  # compaction, re-indexing and the keyword postings' merge inside short histories
            m.setattr(indexmod, "COMPACT_MIN_DEAD", 2)
            m.setattr(wordsmod.WordIndex, "MERGE_MIN", 2)
            m.setattr(indexmod.AgentIndex, "REBUILD_MIN_WORDS", 0)
        assert_same(fold(*events), batched(events, cuts))


def test_a_batch_after_a_query_made_dense_tables_adds_as_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A query of a common term tables its frequencies per slot (``pruning.dense_of``); rows
    added afterwards must land in that table too."""
    monkeypatch.setattr(pruning, "DENSE_MIN_ROWS", 100)
    monkeypatch.setattr(bm25mod, "PRUNE_MIN_POSTINGS", 0)
    common = [stored(i, f"kafka topic {'kafka ' * (i % 3)}note{i}") for i in range(1, 400)]
    one, many = fold(*common[:300]), batched(common[:300], [])
    for p in (one, many):
        p.search(ScopeFilter("a"), "kafka topic", 5)
    assert one.agents["a"].dense and many.agents["a"].dense
    fold(*common[300:], proj=one)
    batched(common[300:], [50], proj=many)
    assert_same(one, many)
    for t, table in one.agents["a"].dense.items():
        assert np.array_equal(table[: one.agents["a"].n], many.agents["a"].dense[t][: many.agents["a"].n])


def test_long_batches_grow_the_columns_as_single_adds_do() -> None:
    events = [stored(i, f"row {i} of many {'alpha ' * (i % 5)}") for i in range(1, 5_000)]
    assert_same(fold(*events), batched(events, [17, 1_000, 1_001]))


def test_the_runner_folds_batches_as_record_by_record() -> None:
    """Every read model of the catalog, folded by ``fold_records`` (the lexical one through
    ``apply_many``) and by ``fold_record`` of each record: equal digests."""
    log = Log()
    for ev in to_events(
        [("store", f"alpha beta {i}", "ab"[i % 2], "", "") for i in range(40)]
        + [("update", 3, "gamma"), ("delete", 5), ("archive", "delta", "a", "X", "C"), ("wipe", "b", 2)]
        + [("store", "after the wipe", "b", "", "")]
    ):
        log.append(ev)
    options = ReadModelOptions(vector_graphs=False)
    one = [make() for make in factories(None, options)]
    many = ProjectionRunner(log, factories(None, options))
    records = log.read(0)
    for rec in records:
        fold_record(one, rec.offset, rec.value, rec.vector)
    fold_records(many.projections, records[:7])
    fold_records(many.projections, records[:12])  # records a read model applied already are skipped
    many.catch_up()
    assert many.offset == records[-1].offset
    assert {p.name: digest_of(p) for p in one} == many.digests()
