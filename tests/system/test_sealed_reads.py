"""Opening sealed records once and cheaply (streams/log/sealing.py, wave 8): a batch's keys in
one query of the key store (``Sealer.fetch``, ``SqliteKeyStore.get_many``), records opened
straight into the dicts a fold takes (``Sealer.open_decoded``, ``SqliteLog.read_decoded``),
and erasure intact: a key fetched into the cache and then destroyed opens nothing."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from memstream.streams.keys.sqlite import SqliteKeyStore
from memstream.streams.log import sealing
from memstream.streams.log.sealing import Sealer
from memstream.streams.log.sqlite import SqliteLog
from tests.unit.test_sealing import VECTOR, event

MASTER = bytes(range(32))


class CountingStore(SqliteKeyStore):
    """keys.db, counting the calls a reader makes of it."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, MASTER)
        self.gets = 0
        self.batches: list[int] = []

    def get(self, key_id: bytes) -> bytes | None:
        self.gets += 1
        return super().get(key_id)

    def get_many(self, key_ids: Sequence[bytes]) -> dict[bytes, bytes]:
        self.batches.append(len(key_ids))
        return super().get_many(key_ids)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CountingStore]:
    keys = CountingStore(tmp_path / "keys.db")
    yield keys
    keys.close()


def sealed_records(writer: Sealer, n: int) -> list[tuple[dict[str, Any], bytes, bytes | None]]:
    out = []
    for i in range(n):
        ev = event(i, f"text {i}")
        value, vector = writer.seal_event(i, ev, VECTOR) or (b"", None)
        out.append((ev, value, vector))
    return out


def test_a_batch_s_keys_come_in_one_query_and_open_without_another(store: CountingStore) -> None:
    records = sealed_records(Sealer(store), 300)
    reader = Sealer(store, seal_new=False)
    reader.fetch(value for _, value, _ in records)
    assert store.batches == [300]
    for ev, value, vector in records:
        assert reader.open_decoded(value, vector) == (ev, VECTOR)
    assert store.gets == 0  # every key came with the batch
    reader.fetch(value for _, value, _ in records)  # all cached: the store is not asked again
    assert store.batches == [300]


def test_get_many_leaves_out_destroyed_and_unknown_keys(store: CountingStore) -> None:
    taken = [store.take()[0] for _ in range(10)]
    store.destroy_ids(taken[:4])
    got = store.get_many([*taken, b"\x00" * 16])
    assert sorted(got) == sorted(taken[4:])
    assert all(got[k] == store.get(k) for k in taken[4:])


def test_open_decoded_is_open_parsed(store: CountingStore) -> None:
    """Sealed, redacted (key destroyed) and clear records: the dict is what parsing ``open``'s bytes gives."""
    writer = Sealer(store)
    records = sealed_records(writer, 3)
    clear = orjson.dumps({**event(9), "type": "memory.deleted", "payload": {"id": 9}})
    store.destroy_ids([k for k, *_ in writer.take_bindings()][:1])
    reader = Sealer(store, seal_new=False)
    for value, vector in [(v, vec) for _, v, vec in records] + [(clear, None)]:
        opened, opened_vector = reader.open(value, vector)
        assert reader.open_decoded(value, vector) == (orjson.loads(opened), opened_vector)
    assert reader.open_decoded(records[0][1], records[0][2])[0]["redacted"] is True


def test_a_fetched_key_destroyed_afterwards_opens_nothing(store: CountingStore) -> None:
    """The erasure contract with a batch's keys cached ahead of opening: once the key is
    destroyed (by any process: here through another connection's store) the next read of the
    log refreshes, drops the cache, and the record reads redacted."""
    records = sealed_records(Sealer(store), 5)
    reader = Sealer(store, seal_new=False)
    reader.fetch(value for _, value, _ in records)
    other = SqliteKeyStore(store.path, MASTER)  # another process's view of keys.db
    key_id = records[2][1][4:20]
    assert other.destroy_ids([key_id]) == 1
    other.close()
    reader.refresh()
    reader.fetch(value for _, value, _ in records)
    ev, vector = reader.open_decoded(records[2][1], records[2][2])
    assert ev["redacted"] is True and vector is None and "content" not in ev["payload"]
    assert reader.open_decoded(records[3][1], records[3][2]) == (records[3][0], VECTOR)


def test_the_log_reads_decoded_events_as_it_reads_records(tmp_path: Path) -> None:
    """``SqliteLog.read_decoded``: each record opened into its dict, equal to ``read``'s bytes
    parsed, with the keys of a read fetched in one query."""
    store = CountingStore(tmp_path / "keys.db")
    writer = Sealer(store)
    log = SqliteLog(tmp_path / "log.sqlite3", sealer=Sealer(store, seal_new=False))
    try:
        rows = []
        for i, (ev, value, vector) in enumerate(sealed_records(writer, 20)):
            rows.append((i, 0, "a", ev["type"], value, vector))
        conn = log.connection()
        conn.executemany(
            'INSERT INTO events("offset", partition, agent, type, value, vector) VALUES (?,?,?,?,?,?)', rows
        )
        decoded = log.read_decoded(0, None, limit=100, vectors=True)
        assert store.batches == [20] and store.gets == 0
        log.sealer = Sealer(store, seal_new=False)
        plain = log.read(0, None, limit=100)
        assert [(o, ev, v) for o, ev, v in decoded] == [(r.offset, orjson.loads(r.value), r.vector) for r in plain]
        assert decoded[5][1]["payload"]["content"] == "text 5" and decoded[5][2] == VECTOR
    finally:
        log.close()


def test_the_opening_cache_stays_bounded_over_a_whole_fold(
    store: CountingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key per record: a fold of the whole log kept every one cached for the life of the
    process (16 MB per 100k records). Past ``OPEN_CACHE`` the cache is emptied; a read's keys
    still come in one query and every record opens."""
    monkeypatch.setattr(sealing, "OPEN_CACHE", 150)
    records = sealed_records(Sealer(store), 400)
    reader = Sealer(store, seal_new=False)
    for start in range(0, 400, 100):  # reads of 100, as the log's reads are of 5,000
        batch = records[start : start + 100]
        reader.fetch(value for _, value, _ in batch)
        for ev, value, vector in batch:
            assert reader.open_decoded(value, vector) == (ev, VECTOR)
        assert len(reader._open) <= 150
    assert store.batches == [100] * 4 and store.gets == 0
    one_by_one = Sealer(store, seal_new=False)  # without fetch: each key looked up as it is met
    for ev, value, vector in records:
        assert one_by_one.open_decoded(value, vector) == (ev, VECTOR)
        assert len(one_by_one._open) <= 150
