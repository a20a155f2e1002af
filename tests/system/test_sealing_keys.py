"""The embedded key store (streams/keys/): destroyed keys leave its files, a wrong master key
is a clear error, the master key's supply, and re-wrapping under a new master key."""

from __future__ import annotations

import base64
import os
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest

from memstream.streams.keys import master
from memstream.streams.keys import sqlite as sqlite_keys
from memstream.streams.keys.master import MasterKeyError, parse_master_key, resolve_master_key
from memstream.streams.keys.sqlite import POOL, SqliteKeyStore
from memstream.streams.log.sealing import Sealer
from tests.unit.test_sealing import VECTOR, event

MASTER = bytes(range(32))


def sealed(sealer: Sealer, ev: dict[str, Any], offset: int = 0) -> tuple[bytes, bytes | None]:
    out = sealer.seal_event(offset, ev, VECTOR)
    assert out is not None
    return out


@pytest.mark.parametrize("chunk", [sqlite_keys.DESTROY_CHUNK, 7])  # one transaction, or several
def test_destroyed_key_bytes_leave_the_key_store_files(
    tmp_path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_keys, "DESTROY_CHUNK", chunk)
    keys = SqliteKeyStore(tmp_path / "keys.db", MASTER)
    taken = [keys.take()[0] for _ in range(50)]
    with sqlite3.connect(tmp_path / "keys.db") as db:
        wrapped = [db.execute("SELECT wrapped FROM keys WHERE key_id=?", (k,)).fetchone()[0] for k in taken]
    generation = keys.generation()
    assert keys.destroy_ids(taken[:45]) == 45
    assert keys.generation() > generation  # readers drop their cached keys
    assert [keys.get(k) is None for k in taken] == [True] * 45 + [False] * 5
    assert keys.destroy_ids(taken) == 5
    for name in ("keys.db", "keys.db-wal"):
        path = tmp_path / name
        data = path.read_bytes() if path.exists() else b""
        assert not any(w in data for w in wrapped), name
    keys.close()


def test_two_first_starts_in_one_process_agree_on_one_master_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both threads have written their key file and are about to link it in: one wins, and
    # both then read the winner's key (one temporary name for both lost a file, or a key).
    both_written = threading.Barrier(2, timeout=30)
    link = os.link

    def link_together(src: Any, dst: Any) -> None:
        both_written.wait()
        link(src, dst)

    monkeypatch.setattr(master.os, "link", link_together)
    with ThreadPoolExecutor(max_workers=2) as pool:
        keys = list(pool.map(lambda _: resolve_master_key(tmp_path, {}), range(2)))
    assert (
        keys[0]
        == keys[1]
        == (parse_master_key((tmp_path / "master.key").read_text(), "x"), str(tmp_path / "master.key"))
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["master.key"]


def test_the_wrong_master_key_is_a_clear_error(tmp_path: Path) -> None:
    SqliteKeyStore(tmp_path / "keys.db", MASTER).close()
    with pytest.raises(MasterKeyError, match="master key"):
        SqliteKeyStore(tmp_path / "keys.db", bytes(32))


def test_master_key_supply(tmp_path: Path) -> None:
    text = base64.b64encode(MASTER).decode()
    assert resolve_master_key(tmp_path, {"MEMSTREAM_MASTER_KEY": text}) == (MASTER, "MEMSTREAM_MASTER_KEY")
    key_file = tmp_path / "outside.key"
    key_file.write_text(text + "\n")
    assert resolve_master_key(tmp_path, {"MEMSTREAM_MASTER_KEY_FILE": str(key_file)})[0] == MASTER
    generated, where = resolve_master_key(tmp_path / "data", {})
    assert len(generated) == 32 and where.endswith("master.key")
    assert os.stat(where).st_mode & 0o777 == 0o600
    assert resolve_master_key(tmp_path / "data", {})[0] == generated  # made once, then read
    for bad in ("not base64!", base64.b64encode(b"short").decode()):
        with pytest.raises(MasterKeyError):
            parse_master_key(bad, "test")


def test_rewrap_moves_every_key_to_the_new_master(tmp_path: Path) -> None:
    keys = SqliteKeyStore(tmp_path / "keys.db", MASTER)
    sealer = Sealer(keys)
    value, vector = sealed(sealer, event())
    new_master = bytes(reversed(range(32)))
    seen: list[tuple[int, int]] = []
    # Every key in the store: the one in use and the rest of the pool it came from.
    assert keys.rewrap(new_master, progress=lambda done, total: seen.append((done, total))) == POOL
    assert seen[-1] == (POOL, POOL)
    keys.close()
    with pytest.raises(MasterKeyError):
        SqliteKeyStore(tmp_path / "keys.db", MASTER)
    reopened = Sealer(SqliteKeyStore(tmp_path / "keys.db", new_master))
    assert orjson.loads(reopened.open(value, vector)[0]) == event()
