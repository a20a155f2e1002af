"""The embedded key store: ``keys.db`` beside the log.

Data keys are stored wrapped (AES-256-GCM under the master key, the key id as associated
data), so a copy of this file alone reads nothing. Destroying a key must leave no byte of it
in the file or its WAL: ``secure_delete`` overwrites deleted cells, and a TRUNCATE checkpoint
after each destruction moves the zeroed pages into the main file and empties the WAL.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from memstream.streams.keys.master import MasterKeyError
from memstream.streams.keys.port import DEK_BYTES, KEY_ID_BYTES

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS keys(
    key_id BLOB PRIMARY KEY,
    agent TEXT NOT NULL,
    scope TEXT NOT NULL,
    first_offset INTEGER NOT NULL,
    wrapped BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS keys_by_scope ON keys(agent, scope);
"""
NONCE = 12
CHECK_PLAIN = b"memstream master key check"
CHECKPOINT_TRIES = 50


def _wrap(master: AESGCM, key_id: bytes, dek: bytes) -> bytes:
    nonce = secrets.token_bytes(NONCE)
    return nonce + master.encrypt(nonce, dek, b"dek:" + key_id)


def _unwrap(master: AESGCM, key_id: bytes, wrapped: bytes) -> bytes:
    try:
        return master.decrypt(wrapped[:NONCE], wrapped[NONCE:], b"dek:" + key_id)
    except InvalidTag as exc:
        raise MasterKeyError(f"data key {key_id.hex()} does not open under this master key") from exc


class SqliteKeyStore:
    def __init__(self, path: Path, master: bytes) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._master = AESGCM(master)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=60)
        self._conn.execute("PRAGMA busy_timeout=60000")
        self._conn.execute("PRAGMA secure_delete=ON")
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._pending: list[tuple[bytes, str, str, int, bytes]] = []
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for stmt in SCHEMA.strip().split(";"):
                    if stmt.strip():
                        self._conn.execute(stmt)
                row = self._conn.execute("SELECT value FROM meta WHERE key='check'").fetchone()
                if row is None:
                    nonce = secrets.token_bytes(NONCE)
                    check = nonce + self._master.encrypt(nonce, CHECK_PLAIN, b"check")
                    self._conn.execute("INSERT INTO meta VALUES('check', ?)", (check.hex(),))
                    self._conn.execute("INSERT INTO meta VALUES('generation', '0')")
                    self._conn.execute("COMMIT")
                else:
                    self._conn.execute("COMMIT")
                    self._check(bytes.fromhex(row[0]))
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise

    def _check(self, check: bytes) -> None:
        try:
            self._master.decrypt(check[:NONCE], check[NONCE:], b"check")
        except InvalidTag as exc:
            raise MasterKeyError(
                f"the master key does not open {self.path}: it was made under another one "
                "(set MEMSTREAM_MASTER_KEY or MEMSTREAM_MASTER_KEY_FILE to that key)"
            ) from exc

    # -- the port ---------------------------------------------------------------------------

    def _reader(self) -> sqlite3.Connection:
        """A connection of this thread's own for reads: WAL lets them run while the writer
        connection commits (an fsync), so a read never waits behind a write."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=60)
            conn.execute("PRAGMA busy_timeout=60000")
            self._local.conn = conn
            with self._lock:
                self._readers.append(conn)
        return conn

    def get(self, key_id: bytes) -> bytes | None:
        row = self._reader().execute("SELECT wrapped FROM keys WHERE key_id=?", (key_id,)).fetchone()
        return None if row is None else _unwrap(self._master, key_id, row[0])

    def create(self, agent: str, scope: str, first_offset: int) -> tuple[bytes, bytes]:
        key_id = secrets.token_bytes(KEY_ID_BYTES)
        dek = AESGCM.generate_key(bit_length=DEK_BYTES * 8)
        self._pending.append((key_id, agent, scope, first_offset, _wrap(self._master, key_id, dek)))
        return key_id, dek

    def flush(self) -> None:
        if not self._pending:
            return
        rows, self._pending = self._pending, []
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany("INSERT INTO keys VALUES (?,?,?,?,?)", rows)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def discard_pending(self) -> None:
        self._pending = []

    def destroy(self, agent: str, scopes: Sequence[str] | None, before_offset: int) -> int:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                if scopes is None:
                    cur = self._conn.execute(
                        "DELETE FROM keys WHERE agent=? AND first_offset < ?", (agent, before_offset)
                    )
                    gone = cur.rowcount
                else:
                    gone = 0
                    for scope in scopes:
                        cur = self._conn.execute(
                            "DELETE FROM keys WHERE agent=? AND scope=? AND first_offset < ?",
                            (agent, scope, before_offset),
                        )
                        gone += cur.rowcount
                self._conn.execute(
                    "UPDATE meta SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT) WHERE key='generation'"
                )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._checkpoint()
        return gone

    def _checkpoint(self) -> None:
        """Move every WAL frame into the main file and truncate the WAL to nothing. A reader in
        another process can hold frames back for a moment: try again until it lets go."""
        for _ in range(CHECKPOINT_TRIES):
            busy, _log, _done = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy == 0:
                return
            time.sleep(0.02)
        raise OSError(f"could not checkpoint {self.path} (a reader holds it); the erasure completes at the next start")

    def generation(self) -> int:
        row = self._reader().execute("SELECT value FROM meta WHERE key='generation'").fetchone()
        return int(row[0]) if row else 0

    def scopes_of(self, agent: str) -> list[str]:
        with self._lock:
            return [r[0] for r in self._conn.execute("SELECT DISTINCT scope FROM keys WHERE agent=?", (agent,))]

    def erased_through(self) -> tuple[int, int]:
        with self._lock:
            rows = dict(
                self._conn.execute("SELECT key, value FROM meta WHERE key IN ('erased_through', 'last_erasure')")
            )
        return int(rows.get("erased_through", -1)), int(rows.get("last_erasure", -1))

    def mark_erased(self, offset: int) -> None:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for key in ("erased_through", "last_erasure"):
                    self._conn.execute(
                        "INSERT INTO meta VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = "
                        "CAST(MAX(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER)) AS TEXT)",
                        (key, str(offset)),
                    )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def count(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM keys").fetchone()[0])

    def rewrap(self, new_master: bytes, progress: Callable[[int, int], None] | None = None) -> int:
        """Re-wrap every data key under ``new_master`` in one transaction (all or nothing), then
        checkpoint, so the key store holds no key wrapped under the old master."""
        new = AESGCM(new_master)
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                rows = self._conn.execute("SELECT key_id, wrapped FROM keys").fetchall()
                total = len(rows)
                for i, (key_id, wrapped) in enumerate(rows, 1):
                    dek = _unwrap(self._master, key_id, wrapped)
                    self._conn.execute("UPDATE keys SET wrapped=? WHERE key_id=?", (_wrap(new, key_id, dek), key_id))
                    if progress is not None and (i % 1000 == 0 or i == total):
                        progress(i, total)
                nonce = secrets.token_bytes(NONCE)
                check = nonce + new.encrypt(nonce, CHECK_PLAIN, b"check")
                self._conn.execute("UPDATE meta SET value=? WHERE key='check'", (check.hex(),))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._master = new
            self._checkpoint()
        return total

    def close(self) -> None:
        with self._lock:
            for conn in self._readers:
                conn.close()
            self._readers = []
            self._conn.close()
        self._local = threading.local()
