"""The embedded key store: ``keys.db`` beside the log.

Data keys are stored wrapped (AES-256-GCM under the master key, the key id as associated
data), so a copy of this file alone reads nothing. Destroying a key must leave no byte of it
in the file or its WAL: ``secure_delete`` overwrites deleted cells, and a TRUNCATE checkpoint
after each destruction moves the zeroed pages into the main file and empties the WAL.
"""

from __future__ import annotations

import contextlib
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
POOL = 256
GET_CHUNK = 5_000  # key ids per query of ``get_many`` (SQLite binds up to 32,766 variables)
DESTROY_CHUNK = 1_000  # keys destroyed per transaction (``destroy_ids``)
DESTROY_PAUSE_S = 0.002  # between two of them


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
        self._lock = threading.Lock()  # the writer connection
        # The pool's own lock: a take() from a full pool never waits for the writer connection
        # (an erasure's destruction transactions hold it). Taken before ``_lock``, never after.
        self._pool_lock = threading.Lock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=60)
        self._conn.execute("PRAGMA busy_timeout=60000")
        self._conn.execute("PRAGMA secure_delete=ON")
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._pool: list[tuple[bytes, bytes]] = []  # durable keys this process has not handed out
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

    def get_many(self, key_ids: Sequence[bytes]) -> dict[bytes, bytes]:
        """``get`` of each, in one query per ``GET_CHUNK`` ids (the ``BatchKeys`` port)."""
        conn = self._reader()
        out: dict[bytes, bytes] = {}
        for start in range(0, len(key_ids), GET_CHUNK):
            chunk = list(key_ids[start : start + GET_CHUNK])
            sql = f"SELECT key_id, wrapped FROM keys WHERE key_id IN ({','.join('?' * len(chunk))})"
            for key_id, wrapped in conn.execute(sql, chunk):
                out[key_id] = _unwrap(self._master, key_id, wrapped)
        return out

    def take(self) -> tuple[bytes, bytes]:
        with self._pool_lock:
            if not self._pool:
                with self._lock:  # waits for at most one destruction transaction
                    self._refill()
            return self._pool.pop()

    def _refill(self) -> None:
        """Make POOL keys in one transaction: one fsync buys that many writes' keys."""
        fresh = [
            (secrets.token_bytes(KEY_ID_BYTES), AESGCM.generate_key(bit_length=DEK_BYTES * 8)) for _ in range(POOL)
        ]
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            self._conn.executemany(
                "INSERT INTO keys VALUES (?,?,?,?,?)",
                [(key_id, "", "", -1, _wrap(self._master, key_id, dek)) for key_id, dek in fresh],
            )
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._pool = fresh

    def destroy_ids(self, key_ids: Sequence[bytes]) -> int:
        """One transaction per ``DESTROY_CHUNK`` keys, the connection's lock let go between them:
        the bus takes new keys for other agents' writes meanwhile (one transaction for an
        agent's 100k keys held their stores up to 0.6 s); keys taken from the pool wait for
        none of them, a refill of the pool for one at most. A crash between two leaves the erasure
        half done in keys.db only: its event is in the log, and the next start finishes it
        (``complete_pending``). The WAL is emptied once, after the last."""
        gone = 0
        for start in range(0, len(key_ids), DESTROY_CHUNK):
            if start:
                time.sleep(DESTROY_PAUSE_S)  # a lock is not fair: let a waiting take() have it first
            with self._lock:
                gone += self._destroy(key_ids[start : start + DESTROY_CHUNK])
        with self._lock:
            if not key_ids:
                self._destroy([])  # the generation moves all the same, as it always did
            self._checkpoint()
        return gone

    def _destroy(self, key_ids: Sequence[bytes]) -> int:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            gone = 0
            for i in range(0, len(key_ids), 500):
                chunk = list(key_ids[i : i + 500])
                marks = ",".join("?" * len(chunk))
                gone += self._conn.execute(f"DELETE FROM keys WHERE key_id IN ({marks})", chunk).rowcount
            self._conn.execute(
                "UPDATE meta SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT) WHERE key='generation'"
            )
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
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
        with self._pool_lock, self._lock:
            if self._pool:  # never handed out: nothing was sealed with them
                unused = [key_id for key_id, _ in self._pool]
                self._pool = []
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("BEGIN IMMEDIATE")
                    self._conn.executemany("DELETE FROM keys WHERE key_id=?", [(k,) for k in unused])
                    self._conn.execute("COMMIT")
            for conn in self._readers:
                conn.close()
            self._readers = []
            self._conn.close()
        self._local = threading.local()
