"""The embedded log: one SQLite file in WAL mode.

SQLite is the storage engine because its crash safety is proven and tested far beyond what a
home-made format could be: a committed transaction survives kill -9 (and, with
``synchronous=FULL``, power loss), an uncommitted one leaves no trace, so there are no torn
records to repair. Its write lock is also what makes several processes sharing one data
directory safe: ``BEGIN IMMEDIATE`` serialises every writer, and the decider runs inside that
transaction (see ``embedded_bus``).

Offsets are the table's integer primary key, assigned densely from 0 by the single writer
holding the lock. They are global across partitions, which is a valid special case of the
port's promise (ordered, offset-addressed per partition).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from memstream.streams.events import decode
from memstream.streams.keys.rotation import open_key_store
from memstream.streams.log.port import LogRecord
from memstream.streams.log.sealing import Sealer, is_sealed

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events(
    "offset" INTEGER PRIMARY KEY,
    partition INTEGER NOT NULL,
    agent TEXT NOT NULL,
    type TEXT NOT NULL,
    value BLOB NOT NULL,
    vector BLOB
);
CREATE INDEX IF NOT EXISTS events_by_agent ON events(agent, "offset");
-- An agent's embedding switches since the read models' offset are looked up on every store
-- (the engine's agent_model): a partial index keeps that lookup off the agent's whole tail.
CREATE INDEX IF NOT EXISTS events_switches ON events(agent, "offset") WHERE type = 'embedding.switched';
CREATE TABLE IF NOT EXISTS audit(
    "offset" INTEGER PRIMARY KEY,
    partition INTEGER NOT NULL,
    agent TEXT NOT NULL,
    kind TEXT NOT NULL,
    after_event INTEGER NOT NULL,
    value BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_by_agent ON audit(agent, kind, "offset");
CREATE TABLE IF NOT EXISTS key_scopes(
    key_id BLOB PRIMARY KEY,
    agent TEXT NOT NULL,
    scope TEXT NOT NULL,
    first_offset INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS key_scopes_by_agent ON key_scopes(agent, scope);
"""

DEFAULT_PARTITIONS = 16
BUSY_TIMEOUT_MS = 60_000
# SQLite's integers are signed 64-bit: no offset lies past this, and binding a larger Python int
# raises OverflowError, so reads from (or to) beyond it are answered here.
MAX_OFFSET = 2**63 - 1
KEYS_NAME = "keys.db"
# "off" makes a new data directory write clear events: only for the benchmark's comparison
# of sealing on and off (bench/erasure.py); never in service (docs/erasure.md).
SEALING_ENV = "MEMSTREAM_SEALING"


def sealing_wanted() -> bool:
    return os.environ.get(SEALING_ENV, "on").strip().lower() not in ("off", "0", "false", "no")


def open_sealer(log_path: Path, *, seal_new: bool | None = None) -> Sealer | None:
    """The sealer of the log at ``log_path``: its key store beside it, under the master key
    (``streams/keys/master.py``). None when sealing is off and no key store exists yet."""
    seal = sealing_wanted() if seal_new is None else seal_new
    keys_path = log_path.with_name(KEYS_NAME)
    if not seal and not keys_path.exists():
        return None
    # Reads through the log refresh before opening: an erasure's keys may leave the opening cache later.
    return Sealer(open_key_store(log_path.parent, keys_path), seal_new=seal, drop_later=True)


def connect(path: Path, *, synchronous: str = "FULL") -> sqlite3.Connection:
    """A connection configured the one way memstream uses the file."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    # Only takes effect on a new file. An event with its vector is ~2 KB: on 4 KB pages that
    # spills into an overflow page per row (twice the disk, slower scans); 16 KB keeps it inline.
    conn.execute("PRAGMA page_size=16384")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    return conn


class SqliteLog:
    """Reader side of the embedded log (the bus holds its own writer connection)."""

    def __init__(
        self,
        path: Path,
        *,
        num_partitions: int = DEFAULT_PARTITIONS,
        synchronous: str = "FULL",
        sealer: Sealer | Literal["auto"] | None = "auto",
    ) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.sealer: Sealer | None = open_sealer(path) if sealer == "auto" else sealer
        # Events before this offset were written before sealing began: they hold plaintext
        # until the log is migrated (docs/erasure.md). 0: sealed from the first event.
        self.sealed_from = 0
        self.synchronous = synchronous
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        conn = self.connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            for stmt in SCHEMA.strip().split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            row = conn.execute("SELECT value FROM meta WHERE key='partitions'").fetchone()
            if row is None:
                conn.execute("INSERT INTO meta VALUES('partitions', ?)", (str(num_partitions),))
                self.num_partitions = num_partitions
            else:
                # Partition count is fixed at creation: ids and agent placement depend on it.
                self.num_partitions = int(row[0])
            sealed = conn.execute("SELECT value FROM meta WHERE key='sealed_from'").fetchone()
            if sealed is not None:
                self.sealed_from = int(sealed[0])
            elif self.sealer is not None and self.sealer.seal_new:
                end = conn.execute('SELECT COALESCE(MAX("offset"), -1) + 1 FROM events').fetchone()[0]
                conn.execute("INSERT INTO meta VALUES('sealed_from', ?)", (str(end),))
                self.sealed_from = int(end)
            else:
                self.sealed_from = -1  # never sealed (the benchmark's comparison)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect(self.path, synchronous=self.synchronous)
            with self._lock:
                self._all.append(conn)
        return conn

    def writer_connection(self) -> sqlite3.Connection:
        return connect(self.path, synchronous=self.synchronous)

    def end_offset(self) -> int:
        row = self.connection().execute('SELECT MAX("offset") FROM events').fetchone()
        return 0 if row[0] is None else int(row[0]) + 1

    def audit_end_offset(self) -> int:
        row = self.connection().execute('SELECT MAX("offset") FROM audit').fetchone()
        return 0 if row[0] is None else int(row[0]) + 1

    def _rows(
        self,
        start: int,
        stop: int | None,
        *,
        agent_id: str | None = None,
        limit: int = 10_000,
        vectors: bool = True,
        types: Sequence[str] | None = None,
    ) -> list[LogRecord]:
        """The events of ``read`` as stored (sealed ones not opened)."""
        if start > MAX_OFFSET:
            return []
        start = max(start, 0)  # offsets start at 0: an earlier start reads the same rows
        stop = None if stop is None or stop > MAX_OFFSET else max(stop, 0)
        column = "vector" if vectors else "NULL"
        sql = f'SELECT "offset", partition, agent, type, value, {column} FROM events WHERE "offset" >= ?'
        args: list[object] = [start]
        if stop is not None:
            sql += ' AND "offset" < ?'
            args.append(stop)
        if agent_id is not None:
            sql += " AND agent = ?"
            args.append(agent_id)
        if types is not None:
            # One type as ``=``: SQLite then matches partial indexes on it (events_switches).
            sql += " AND type = ?" if len(types) == 1 else f" AND type IN ({','.join('?' * len(types))})"
            args.extend(types)
        sql += ' ORDER BY "offset" LIMIT ?'
        args.append(limit)
        return [LogRecord(*row) for row in self.connection().execute(sql, args)]

    def read(
        self,
        start: int = 0,
        stop: int | None = None,
        *,
        agent_id: str | None = None,
        limit: int = 10_000,
        vectors: bool = True,
        types: Sequence[str] | None = None,
    ) -> list[LogRecord]:
        return self._opened(self._rows(start, stop, agent_id=agent_id, limit=limit, vectors=vectors, types=types))

    def read_decoded(
        self, start: int = 0, stop: int | None = None, *, limit: int = 10_000, vectors: bool = True
    ) -> list[tuple[int, dict[str, Any], bytes | None]]:
        """(offset, event, vector) of the events ``read`` answers, each record opened straight
        into the dict a fold takes (``Sealer.open_decoded``), not opened to bytes and parsed again."""
        records = self._rows(start, stop, limit=limit, vectors=vectors)
        sealer = self.sealer
        if sealer is None:
            return [(r.offset, decode(r.value), r.vector) for r in records]
        sealer.refresh()
        sealer.fetch(r.value for r in records)
        return [(r.offset, *sealer.open_decoded(r.value, r.vector)) for r in records]

    def _opened(self, records: list[LogRecord]) -> list[LogRecord]:
        """Records as their readers see them: sealed ones opened, or redacted once their key is gone."""
        sealer = self.sealer
        if sealer is None or not any(is_sealed(r.value) for r in records):
            return records
        sealer.refresh()
        sealer.fetch(r.value for r in records)  # their keys in one query, not one each
        out = []
        for r in records:
            value, vector = sealer.open(r.value, r.vector)
            out.append(r if value is r.value else LogRecord(r.offset, r.partition, r.agent_id, r.type, value, vector))
        return out

    def read_offsets(self, offsets: Sequence[int]) -> list[LogRecord]:
        out: list[LogRecord] = []
        conn = self.connection()
        offsets = [o for o in offsets if 0 <= o <= MAX_OFFSET]
        for i in range(0, len(offsets), 500):
            chunk = list(offsets[i : i + 500])
            marks = ",".join("?" * len(chunk))
            sql = f'SELECT "offset", partition, agent, type, value, vector FROM events WHERE "offset" IN ({marks})'
            out.extend(LogRecord(*row) for row in conn.execute(sql, chunk))
        out.sort(key=lambda r: r.offset)
        return self._opened(out)

    def read_audit(
        self,
        start: int = 0,
        stop: int | None = None,
        *,
        agent_id: str | None = None,
        kind: str | None = None,
        limit: int = 10_000,
    ) -> list[LogRecord]:
        if start > MAX_OFFSET:
            return []
        start = max(start, 0)  # offsets start at 0: an earlier start reads the same rows
        stop = None if stop is None or stop > MAX_OFFSET else max(stop, 0)
        sql = 'SELECT "offset", partition, agent, kind, value FROM audit WHERE "offset" >= ?'
        args: list[object] = [start]
        if stop is not None:
            sql += ' AND "offset" < ?'
            args.append(stop)
        if agent_id is not None:
            sql += " AND agent = ?"
            args.append(agent_id)
        if kind is not None:
            sql += " AND kind = ?"
            args.append(kind)
        sql += ' ORDER BY "offset" LIMIT ?'
        args.append(limit)
        return self._opened([LogRecord(*row) for row in self.connection().execute(sql, args)])

    def key_ids(self, agent: str, scopes: Sequence[str] | None, before_offset: int) -> list[bytes]:
        """The keys that seal the agent's data of ``scopes`` (None: all of it), first used
        before ``before_offset`` (an erasure's: the agent's later writes have new keys)."""
        conn = self.connection()
        sql = "SELECT key_id FROM key_scopes WHERE agent = ? AND first_offset < ?"
        if scopes is None:
            return [r[0] for r in conn.execute(sql, (agent, before_offset))]
        out: list[bytes] = []
        for scope in scopes:
            out.extend(r[0] for r in conn.execute(sql + " AND scope = ?", (agent, before_offset, scope)))
        return out

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()
        if self.sealer is not None:
            self.sealer.keys.close()
