"""``SnapshotStore.verify_ahead``: checkpoints hashed on a thread before their loads. A load of
an unchanged file takes that digest instead of hashing again; anything else (a file replaced
since, damaged, or not hashed yet) is still checked by the load itself."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from memstream.streams import snapshots
from memstream.streams.snapshots import SnapshotStore


def _settle(store: SnapshotStore) -> None:
    for ahead in list(store._ahead.values()):
        ahead.result(timeout=30)


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes the load's own ``hashlib.sha256`` calls hashed (the thread uses ``file_digest``)."""
    sizes: list[int] = []
    real = hashlib.sha256

    def counting(data: Any = None) -> Any:
        if data is None:  # the thread's own, fed a chunk at a time
            return real()
        sizes.append(memoryview(data).nbytes)
        return real(data)

    monkeypatch.setattr(hashlib, "sha256", counting)
    return sizes


@pytest.fixture(autouse=True)
def _ahead_of_small_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshots, "VERIFY_AHEAD_FROM", 0)


def _store(tmp_path: Path) -> SnapshotStore:
    store = SnapshotStore(tmp_path)
    store.save("rows", {"offset": 7, "state": {"n": list(range(1000))}})
    store.save_blob("rows-abc", b"\x01\x02" * 5000)
    store.save_blob("other-abc", b"\x03" * 100)
    return store


def test_an_unchanged_file_is_not_hashed_again(tmp_path: Path, hashes: list[int]) -> None:
    store = _store(tmp_path)
    hashes.clear()
    store.verify_ahead(["rows", "absent"])
    _settle(store)
    assert store.load("rows") == {"offset": 7, "state": {"n": list(range(1000))}}
    blob = store.map_blob("rows-abc")
    assert blob is not None and bytes(blob) == b"\x01\x02" * 5000
    assert hashes == []
    # Not named: hashed by its load as before.
    assert store.load_blob("other-abc") is not None and hashes == [100]
    # A digest is used once: a second load hashes again.
    assert store.load("rows") is not None and len(hashes) == 2


def test_a_file_replaced_or_damaged_since_is_checked_by_its_load(tmp_path: Path, hashes: list[int]) -> None:
    store = _store(tmp_path)
    store.verify_ahead(["rows"])
    _settle(store)
    store.save("rows", {"offset": 8, "state": {}})  # a new file, renamed over the hashed one
    assert store.load("rows") == {"offset": 8, "state": {}}
    store.verify_ahead(["rows"])
    _settle(store)
    path = store.path("rows")
    damaged = path.read_bytes().replace(b'"offset":8', b'"offset":9')
    tmp = path.with_name("rows.new")
    tmp.write_bytes(damaged)
    os.replace(tmp, path)
    assert store.load("rows") is None  # its checksum, computed by the load, does not match


def test_a_blob_damaged_before_the_hash_reads_as_absent(tmp_path: Path) -> None:
    store = _store(tmp_path)
    path = store.blob_path("rows-abc")
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))
    store.verify_ahead(["rows"])
    _settle(store)
    assert store.map_blob("rows-abc") is None
    assert store.load("rows") is not None


def test_a_hash_not_started_is_left_to_the_load(tmp_path: Path, hashes: list[int]) -> None:
    store = _store(tmp_path)
    hashes.clear()
    store.verify_ahead([])
    assert store._ahead == {}
    assert store.load("rows") is not None and len(hashes) == 1


def test_small_checkpoints_are_left_to_their_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(tmp_path)
    monkeypatch.setattr(snapshots, "VERIFY_AHEAD_FROM", 1 << 30)
    store.verify_ahead(["rows"])
    assert store._ahead == {}
