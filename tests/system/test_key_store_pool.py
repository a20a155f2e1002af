"""The embedded key store during an erasure's key destruction (streams/keys/sqlite.py): keys
taken from the pool never wait for a destruction transaction; a refill waits for one at most,
and everything destroyed is gone."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from memstream.streams.keys import sqlite as sqlite_keys
from memstream.streams.keys.sqlite import SqliteKeyStore

DEADLINE_S = 30.0


@pytest.fixture
def store(tmp_path: Path) -> SqliteKeyStore:
    return SqliteKeyStore(tmp_path / "keys.db", secrets.token_bytes(32))


def held_destruction(store: SqliteKeyStore, monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Patch the store so its first destruction transaction stops halfway until released."""
    inside, release = threading.Event(), threading.Event()
    real = SqliteKeyStore._destroy

    def destroy(self: SqliteKeyStore, key_ids: Sequence[bytes]) -> int:
        gone = real(self, key_ids)
        if not inside.is_set():
            inside.set()
            assert release.wait(DEADLINE_S)
        return gone

    monkeypatch.setattr(SqliteKeyStore, "_destroy", destroy)
    return inside, release


def test_take_from_the_pool_does_not_wait_for_a_destruction(
    store: SqliteKeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    doomed = [store.take()[0] for _ in range(5)]
    inside, release = held_destruction(store, monkeypatch)
    eraser = threading.Thread(target=store.destroy_ids, args=(doomed,))
    eraser.start()
    try:
        assert inside.wait(DEADLINE_S)
        taken: list[bytes] = []
        taker = threading.Thread(target=lambda: taken.append(store.take()[0]))
        taker.start()
        taker.join(DEADLINE_S)  # a deadline, not a timing: with the old lock it never returns here
        assert taken, "take() waited for the destruction transaction"
    finally:
        release.set()
        eraser.join(DEADLINE_S)
    assert all(store.get(k) is None for k in doomed)
    assert store.get(taken[0]) is not None
    store.close()


def test_a_refill_during_a_destruction_gets_fresh_durable_keys(
    store: SqliteKeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_keys, "DESTROY_CHUNK", 3)
    doomed = [store.take()[0] for _ in range(sqlite_keys.POOL)]  # the pool is empty now
    results: list[bytes] = []
    inside, release = held_destruction(store, monkeypatch)
    eraser = threading.Thread(target=store.destroy_ids, args=(doomed,))
    eraser.start()
    assert inside.wait(DEADLINE_S)
    taker = threading.Thread(target=lambda: results.append(store.take()[0]))
    taker.start()
    release.set()
    taker.join(DEADLINE_S)
    eraser.join(DEADLINE_S)
    assert len(results) == 1 and results[0] not in doomed
    assert store.get(results[0]) is not None
    assert all(store.get(k) is None for k in doomed)
    store.close()
