"""The lexical projection's snapshots on disk (a SnapshotStore in a temporary directory): the
analysed index read back from its sidecar without analysing a text, the fallbacks (missing,
damaged or foreign sidecar, a version-2 snapshot) that analyse the texts again, and the
collection of old sidecars. The fold and the sidecar's format: tests/unit/test_lexical.py."""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson
import pytest

from memstream.projections.lexical import LexicalProjection, sidecar
from memstream.projections.lexical.index import AgentIndex
from memstream.projections.runner import digest_of
from memstream.streams.snapshots import SnapshotStore
from tests.support.blob_watch import mapped_rss_kb as mapped_kb
from tests.unit.test_lexical import answers, deleted, fold, sample_events, stored, updated
from tests.unit.test_lexical_packed import as_format_1


def checkpointed(store: SnapshotStore, p: LexicalProjection) -> dict:
    body = orjson.loads(orjson.dumps(p.to_snapshot()))
    store.save("lexical", {"offset": p.offset, "state": body})
    return body


def no_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> None:
        raise AssertionError("a text was analysed")

    monkeypatch.setattr(AgentIndex, "add", refuse)


def test_restore_reads_the_index_without_analysing_a_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SnapshotStore(tmp_path)
    live = fold(*sample_events(), proj=LexicalProjection(store))
    body = checkpointed(store, live)
    assert body["version"] == 4 and store.blob_path(body["blob"]).exists()
    expected = answers(live)
    with monkeypatch.context() as m:
        no_analysis(m)
        restored = LexicalProjection(store)
        restored.load_snapshot(body)
    restored.offset = live.offset  # as the runner sets it from the checkpoint
    assert digest_of(restored) == digest_of(live)
    assert answers(restored) == expected
    # the restored index folds on as the live one does
    more = [stored(20, "a new row about kafka"), updated(20, "kafka replay digest"), deleted(2)]
    fold(*more, proj=live)
    fold(*more, proj=restored)
    assert digest_of(restored) == digest_of(live) and answers(restored) == answers(live)


@pytest.mark.parametrize("damage", ["missing", "truncated", "flipped", "foreign"])
def test_a_bad_sidecar_costs_an_analysis_not_the_snapshot(tmp_path: Path, damage: str) -> None:
    store = SnapshotStore(tmp_path)
    live = fold(*sample_events(), proj=LexicalProjection(store))
    body = checkpointed(store, live)
    path = store.blob_path(body["blob"])
    raw = path.read_bytes()
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "flipped":
        path.write_bytes(raw[:-100] + bytes([raw[-100] ^ 0xFF]) + raw[-99:])
    else:  # a sound sidecar of another state under this name
        other = fold(stored(1, "something else entirely"), proj=LexicalProjection(store))
        other_body = other.to_snapshot()
        path.write_bytes(store.blob_path(other_body["blob"]).read_bytes())
    restored = LexicalProjection(store)
    restored.load_snapshot(body)
    assert digest_of(restored) == digest_of(live)
    assert answers(restored) == answers(live)


def test_a_version_2_snapshot_loads_by_analysing_its_texts(tmp_path: Path) -> None:
    live = fold(*sample_events())
    lists = {a: idx.snapshot_rows() for a, idx in live.agents.items() if idx.slot_of}
    old = orjson.loads(orjson.dumps({"version": 2, "agents": lists}))  # what an older release wrote
    restored = LexicalProjection(SnapshotStore(tmp_path))
    restored.load_snapshot(old)
    assert digest_of(restored) == digest_of(live) and answers(restored) == answers(live)
    with pytest.raises(ValueError):
        restored.load_snapshot({"version": 1, "agents": {}})


def test_old_sidecars_are_dropped_once_a_newer_checkpoint_names_another(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    live = fold(stored(1, "first row"), proj=LexicalProjection(store))
    first = checkpointed(store, live)["blob"]
    fold(stored(2, "second row"), proj=live)
    second = live.to_snapshot()["blob"]  # a digest or a checkpoint in progress: the disk's is kept
    assert store.blob_names("lexical-") == sorted([first, second])
    checkpointed(store, live)
    fold(stored(3, "third row"), proj=live)
    third = checkpointed(store, live)["blob"]
    assert store.blob_names("lexical-") == sorted([second, third])
    assert len({first, second, third}) == 3


def test_drop_stale_sidecars_keeps_only_the_last_snapshots(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    live = fold(stored(1, "a secret row"), stored(2, "kept row"), proj=LexicalProjection(store))
    checkpointed(store, live)
    fold(deleted(1), proj=live)
    last = checkpointed(store, live)["blob"]
    assert len(store.blob_names("lexical-")) == 2  # the previous checkpoint's is still there
    live.drop_stale_sidecars()  # as the runner does once the new checkpoint is saved
    assert store.blob_names("lexical-") == [last]
    assert b"secret" not in store.blob_path(last).read_bytes()


def refuse_to_read_the_checkpoint(monkeypatch: pytest.MonkeyPatch, store: SnapshotStore) -> None:
    def refuse(name: str) -> None:
        raise AssertionError(f"read {name}.snap back (at 1M memories, ~0.14 GB of rows parsed)")

    monkeypatch.setattr(store, "load", refuse)


def test_a_checkpoint_after_a_saved_one_does_not_read_it_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SnapshotStore(tmp_path)
    live = fold(stored(1, "first row"), proj=LexicalProjection(store))
    first = checkpointed(store, live)["blob"]
    live.drop_stale_sidecars()  # as the runner does once the checkpoint is saved
    refuse_to_read_the_checkpoint(monkeypatch, store)
    fold(stored(2, "second row"), proj=live)
    second = live.to_snapshot()["blob"]
    fold(stored(3, "third row"), proj=live)
    third = live.to_snapshot()["blob"]
    assert first in store.blob_names("lexical-")  # what the checkpoint on disk names
    assert third in store.blob_names("lexical-")
    assert store.blob_names("lexical-") == sorted({first, second, third})  # the previous kept (below)
    fold(stored(4, "fourth row"), proj=live)
    fourth = live.to_snapshot()["blob"]
    assert store.blob_names("lexical-") == sorted([first, third, fourth])  # second: never saved


def test_a_restored_checkpoint_is_not_read_back_for_the_next(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SnapshotStore(tmp_path)
    live = fold(stored(1, "first row"), proj=LexicalProjection(store))
    first = checkpointed(store, live)["blob"]
    restored = LexicalProjection(store)
    body = store.load("lexical")
    assert body is not None
    restored.load_snapshot(body["state"])
    refuse_to_read_the_checkpoint(monkeypatch, store)
    fold(stored(2, "second row"), proj=restored)
    second = restored.to_snapshot()["blob"]
    assert store.blob_names("lexical-") == sorted([first, second])
    restored.drop_stale_sidecars()
    assert store.blob_names("lexical-") == [second]


def test_a_save_not_confirmed_keeps_the_sidecar_it_may_have_left_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SnapshotStore(tmp_path)
    live = fold(stored(1, "first row"), proj=LexicalProjection(store))
    checkpointed(store, live)
    live.drop_stale_sidecars()
    fold(stored(2, "second row"), proj=live)
    second = checkpointed(store, live)["blob"]  # renamed into place, then the save raised: no confirmation
    fold(stored(3, "third row"), proj=live)
    live.to_snapshot()
    assert second in store.blob_names("lexical-")
    restored = LexicalProjection(store)
    body = store.load("lexical")
    assert body is not None and body["state"]["blob"] == second
    expected = answers(fold(stored(1, "first row"), stored(2, "second row")))
    no_analysis(monkeypatch)
    restored.load_snapshot(body["state"])  # the sidecar it names is there: nothing analysed again
    assert answers(restored) == expected


def test_the_next_checkpoint_of_the_same_rows_replaces_a_format_1_sidecar(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    live = fold(*sample_events())
    agents = orjson.loads(orjson.dumps({a: idx.snapshot_rows() for a, idx in live.agents.items() if idx.slot_of}))
    old_hash = hashlib.sha256(orjson.dumps(agents)).hexdigest()[:32]  # how the previous release named it
    old_name = f"lexical-{old_hash}"
    store.save_blob(old_name, as_format_1(b"".join(bytes(x) for x in sidecar.encode(live.agents, old_hash)), agents))
    restored = LexicalProjection(store)
    restored.load_snapshot({"version": 3, "agents": agents, "blob": old_name})
    assert answers(restored) == answers(live)
    body = restored.to_snapshot()
    assert body["blob"] != old_name and store.blob_path(body["blob"]).exists()
    restored.drop_stale_sidecars()
    assert store.blob_names("lexical-") == [body["blob"]]


def test_a_checkpoint_after_a_restore_hands_back_the_loaded_sidecars_pages(tmp_path: Path) -> None:
    """The next checkpoint reads every posting of the mapped sidecar to write its own; those
    pages then leave the process (at 1M memories ~0.16 GB stayed resident: wave 11)."""
    store = SnapshotStore(tmp_path)
    live = fold(*[stored(i, f"row {i} about harbour number {i * 7919 % 10007}") for i in range(1, 20_001)],
                proj=LexicalProjection(store))  # fmt: skip
    body = checkpointed(store, live)
    restored = LexicalProjection(store)
    restored.load_snapshot(body)
    old = store.blob_path(body["blob"])
    assert old.stat().st_size > 1_000_000
    fold(stored(20_001, "one more row"), proj=restored)
    restored.to_snapshot()
    assert mapped_kb(old) < 64  # read whole for the new sidecar, then handed back
    assert answers(restored) == answers(fold(stored(20_001, "one more row"), proj=live))
