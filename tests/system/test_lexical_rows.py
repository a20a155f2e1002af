"""The lexical snapshot's rows as columns (version 4): what they cost to make, that they are
canonical, that a damaged body is refused, and that a version-3 checkpoint still loads from
its sidecar. Memory is read with tracemalloc, which counts numpy's buffers."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from memstream.projections.lexical import LexicalProjection, sidecar
from memstream.projections.lexical.rows import SnapshotRows, rows_of
from memstream.projections.runner import digest_of
from memstream.streams.snapshots import SnapshotStore
from tests.system.test_lexical_checkpoint_memory import many_rows, traced_peak
from tests.system.test_lexical_snapshots import no_analysis
from tests.unit.test_lexical import answers, deleted, fold, sample_events, stored


def test_the_rows_cost_a_fraction_of_a_list_each() -> None:
    """At 1M memories a [ref, project, channel, seq, text] list each was ~0.19 GB at the top of a
    running server's checkpoint; the columns share the index's strings."""
    idx = many_rows(20_000).agents["a"]
    SnapshotRows.of_index(idx)  # numpy's first calls allocate for themselves
    as_lists = traced_peak(idx.snapshot_rows)
    as_columns = traced_peak(lambda: SnapshotRows.of_index(idx).to_json())
    assert as_columns < 0.4 * as_lists, (as_columns, as_lists)  # ~0.25x


def test_equal_live_rows_give_equal_snapshots_whatever_came_before() -> None:
    """The project and channel table holds only the names live rows use, sorted: an index that
    saw a since-deleted project first numbers its names otherwise, and must write the same."""
    beta, alpha = stored(2, "kept in beta", project="beta", channel="ops"), stored(3, "kept in alpha", project="alpha")
    live = fold(stored(1, "gone soon", project="zeta"), beta, alpha, deleted(1))
    assert live.agents["a"].names[0] == "zeta"
    rebuilt = LexicalProjection()
    rebuilt.apply(1, beta)  # the same rows at the same offsets, nothing before them
    rebuilt.apply(2, alpha)
    assert rebuilt.to_snapshot()["agents"] == live.to_snapshot()["agents"]
    assert live.to_snapshot()["agents"]["a"]["names"] == ["", "alpha", "beta", "ops"]
    assert list(rows_of(orjson.loads(orjson.dumps(live.to_snapshot())))["a"].rows()) == live.agents["a"].live_rows()


@pytest.mark.parametrize(
    "damage",
    [
        lambda c: c.update(n=c["n"] + 1),
        lambda c: c.update(texts=c["texts"][:-1]),
        lambda c: c.update(names=[]),
        lambda c: c.update(seq="not base64!"),
        lambda c: c.update(refs="mem:1"),
        lambda c: c.pop("channel"),
    ],
)
def test_a_damaged_body_is_refused(damage: object) -> None:
    live = fold(*sample_events())
    body = orjson.loads(orjson.dumps(live.to_snapshot()))
    damage(body["agents"]["a"])  # type: ignore[operator]
    with pytest.raises((ValueError, KeyError, TypeError)):
        LexicalProjection().load_snapshot(body)


def test_a_version_3_checkpoint_loads_from_its_sidecar_and_keeps_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SnapshotStore(tmp_path)
    live = fold(*sample_events(), deleted(2), proj=LexicalProjection(store))
    name = live.to_snapshot()["blob"]  # the sidecar, named by the rows as version 3 listed them
    lists = {a: idx.snapshot_rows() for a, idx in live.agents.items() if idx.slot_of}
    old = orjson.loads(orjson.dumps({"version": 3, "agents": lists, "blob": name}))
    restored = LexicalProjection(store)
    no_analysis(monkeypatch)
    restored.load_snapshot(old)
    monkeypatch.undo()
    restored.offset = live.offset
    assert digest_of(restored) == digest_of(live) and answers(restored) == answers(live)
    written = store.blob_path(name).stat().st_mtime_ns
    assert restored.to_snapshot()["blob"] == name and store.blob_path(name).stat().st_mtime_ns == written
    assert sidecar.FORMAT == 3  # the sidecar's own format did not change with the rows'
