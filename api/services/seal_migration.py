"""`memstream seal`: bring a log written before sealing under it (issue 16, docs/erasure.md "Migration").

The plaintext log is replayed into a new file beside it, row for row (same offsets, partitions,
audit records, so ids and digests stay equal), each event sealed as the bus would seal it. The
records erased before the migration come out erased: their keys are destroyed before the new
log is verified. Only a verified log replaces the old one, by one rename; the old bytes are
then overwritten and deleted. A crash leaves the old log or the new one in place, never half.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from itertools import zip_longest
from pathlib import Path
from typing import Any

import orjson

from memstream.api.services.erasure import destroy_keys
from memstream.api.services.settings import Settings
from memstream.projections.catalog import ReadModelOptions, factories
from memstream.projections.runner import ProjectionRunner
from memstream.streams.buses.embedded import DECISION_SNAPSHOT, catch_up_decision_state, restore_decision_state
from memstream.streams.decision.state import DecisionState
from memstream.streams.events import decode
from memstream.streams.keys.rotation import KEYS_NAME, open_key_store
from memstream.streams.log.sealing import ERASURE_TYPES, Sealer, is_sealed
from memstream.streams.log.sqlite import SqliteLog, connect
from memstream.streams.snapshots import SnapshotStore

Progress = Callable[[str, int, int], None]

NEW_SUFFIX = ".sealing"  # the new log while it is written and verified
RETIRED_SUFFIX = ".retired"  # the old log between the swap and the overwrite of its bytes
BATCH = 2_000
SCRUB_CHUNK = 1 << 20

EventRow = tuple[int, int, str, str, bytes, bytes | None]
AuditRow = tuple[int, int, str, str, int, bytes]


class SealError(Exception):
    """The migration cannot run (a server holds the log) or its result did not verify: the old
    log stays in place."""


def _companions(path: Path) -> list[Path]:
    return [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]


def _scrub(path: Path) -> None:
    """Overwrite a file's bytes with zeros, make that durable, then delete it."""
    size = path.stat().st_size
    with open(path, "r+b") as f:
        zeros = bytes(SCRUB_CHUNK)
        done = 0
        while done < size:
            n = min(SCRUB_CHUNK, size - done)
            f.write(zeros[:n])
            done += n
        f.flush()
        os.fsync(f.fileno())
    path.unlink()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def clean_leftovers(log_path: Path) -> list[str]:
    """What an interrupted run left: a partial new log (deleted) and a retired old one
    (scrubbed, unless the crash came before the swap, when it is only a second name of the
    log in place)."""
    cleaned = []
    for p in _companions(log_path.with_name(log_path.name + NEW_SUFFIX)):
        if p.exists():
            p.unlink()
            cleaned.append(p.name)
    retired = log_path.with_name(log_path.name + RETIRED_SUFFIX)
    if retired.exists():
        if log_path.exists() and os.path.samefile(retired, log_path):
            retired.unlink()
        else:
            _scrub(retired)
        cleaned.append(retired.name)
    for p in _companions(retired)[1:]:
        p.unlink(missing_ok=True)
    return cleaned


def _exclusive(log_path: Path) -> sqlite3.Connection:
    """A connection holding the log exclusively, or SealError: every open connection (a server,
    a `Client.local`, a CLI command) holds a shared lock that refuses it."""
    conn = sqlite3.connect(log_path, isolation_level=None, timeout=0)
    try:
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        conn.execute("BEGIN EXCLUSIVE")
        conn.execute("SELECT COUNT(*) FROM meta").fetchone()
    except sqlite3.OperationalError as exc:
        conn.close()
        if "locked" in str(exc) or "busy" in str(exc):
            raise SealError(
                f"another process has {log_path} open (a server, a client, a CLI command): "
                "stop it, then run memstream seal"
            ) from None
        raise SealError(f"{log_path} is not a memstream log: {exc}") from None
    return conn


def _ends(conn: sqlite3.Connection) -> tuple[int, int]:
    ev = conn.execute('SELECT COALESCE(MAX("offset"), -1) + 1 FROM events').fetchone()[0]
    au = conn.execute('SELECT COALESCE(MAX("offset"), -1) + 1 FROM audit').fetchone()[0]
    return int(ev), int(au)


def _rows(conn: sqlite3.Connection, sql: str) -> Iterator[Any]:
    cur = conn.execute(sql)
    while rows := cur.fetchmany(BATCH):
        yield from rows


def _merged(old: sqlite3.Connection) -> Iterator[tuple[str, Any]]:
    """Events and audit records in the order the decider made them: an audit record decided
    after event k comes before event k + 1 (as ``catch_up_decision_state`` folds them), so
    keys are taken, and dropped at erasures, exactly as the bus would have."""
    audits = _rows(old, 'SELECT "offset", partition, agent, kind, after_event, value FROM audit ORDER BY "offset"')
    pending = next(audits, None)
    for row in _rows(old, 'SELECT "offset", partition, agent, type, value, vector FROM events ORDER BY "offset"'):
        while pending is not None and pending[4] < row[0]:
            yield "audit", pending
            pending = next(audits, None)
        yield "event", row
    while pending is not None:
        yield "audit", pending
        pending = next(audits, None)


def _copy(old: sqlite3.Connection, new: sqlite3.Connection, sealer: Sealer, total: int, progress: Progress) -> int:
    """Every row of the old log into the new one, plaintext rows sealed; returns how many were sealed."""
    sealed = done = 0
    events: list[EventRow] = []
    audits: list[AuditRow] = []

    def flush() -> None:
        new.execute("BEGIN IMMEDIATE")
        bindings = sealer.take_bindings()
        if bindings:
            new.executemany("INSERT INTO key_scopes VALUES (?,?,?,?)", bindings)
        new.executemany(
            'INSERT INTO events("offset", partition, agent, type, value, vector) VALUES (?,?,?,?,?,?)', events
        )
        new.executemany(
            'INSERT INTO audit("offset", partition, agent, kind, after_event, value) VALUES (?,?,?,?,?,?)', audits
        )
        new.execute("COMMIT")
        events.clear()
        audits.clear()

    for kind, row in _merged(old):
        if kind == "event":
            offset, partition, agent, type_, value, vector = row
            if not is_sealed(value):
                out = sealer.seal_event(offset, decode(value), vector)
                if out is not None:
                    value, vector = out
                    sealed += 1
            events.append((offset, partition, agent, type_, value, vector))
        else:
            offset, partition, agent, kind_, after, value = row
            if not is_sealed(value):
                out_value = sealer.seal_audit(after + 1, decode(value))
                if out_value is not None:
                    value = out_value
                    sealed += 1
            audits.append((offset, partition, agent, kind_, after, value))
        done += 1
        if len(events) + len(audits) >= BATCH:
            flush()
            progress("seal", done, total)
    flush()
    progress("seal", done, total)
    return sealed


def _same(old_value: bytes, old_vector: bytes | None, opened: tuple[bytes, bytes | None]) -> bool:
    return orjson.loads(old_value) == orjson.loads(opened[0]) and old_vector == opened[1]


def _verify_rows(
    old: sqlite3.Connection, new: sqlite3.Connection, sealer: Sealer, total: int, progress: Progress
) -> None:
    """Every row of the new log, opened, equals the old one (value, vector, place); every row
    that was plaintext is sealed now unless it holds nothing to seal."""
    done = 0
    pairs = [
        ('SELECT "offset", partition, agent, type, value, vector FROM events ORDER BY "offset"', 4, 5),
        ('SELECT "offset", partition, agent, kind, after_event, value, NULL FROM audit ORDER BY "offset"', 5, 6),
    ]
    for sql, v, vec in pairs:
        for a, b in zip_longest(_rows(old, sql), _rows(new, sql)):
            if a is None or b is None:
                raise SealError("the new log does not hold as many records as the old")
            if a[:v] != b[:v]:
                raise SealError(f"the new log differs from the old at offset {a[0]}: {a[:v]} != {b[:v]}")
            if a[v] == b[v] and a[vec] == b[vec]:
                pass  # copied as it was (sealed already, or nothing to seal)
            elif is_sealed(a[v]) or not _same(a[v], a[vec], sealer.open(b[v], b[vec])):
                raise SealError(f"the new log's record at offset {a[0]} does not open to the old one")
            done += 1
            if done % BATCH == 0:
                progress("verify", done, total)
    progress("verify", done, total)


def _digests(
    old_log: SqliteLog, new_log: SqliteLog, snapshots: SnapshotStore, options: ReadModelOptions, ends: tuple[int, int]
) -> tuple[dict[str, Any], ProjectionRunner, DecisionState]:
    """The old log's live digests (its checkpoints plus its tail, as a server would start)
    against a rebuild of the new log from offset 0 (api/services/rebuild.py does the same on one log)."""
    live = ProjectionRunner(old_log, factories(snapshots, ReadModelOptions(vector_graphs=False)), snapshots)
    live.restore()
    live.catch_up(ends[0])
    live_decision = restore_decision_state(old_log, snapshots)
    catch_up_decision_state(old_log, live_decision, stop=ends)
    before = {**live.digests(), "decision": live_decision.digest()}
    fresh = ProjectionRunner(new_log, factories(snapshots, options), snapshots=None)
    fresh.catch_up(ends[0])
    decision = DecisionState(new_log.num_partitions)
    catch_up_decision_state(new_log, decision, stop=ends)
    after = {**fresh.digests(), "decision": decision.digest()}
    report = {n: {"live": d, "rebuilt": after.get(n), "equal": d == after.get(n)} for n, d in before.items()}
    return report, fresh, decision


def _quiet(_stage: str, _done: int, _total: int) -> None:
    """What a run without a progress display reports to."""


def seal_data_dir(settings: Settings, progress: Progress | None = None) -> dict[str, Any]:
    """Migrate the data directory's log under sealing. Returns the report the CLI prints."""
    report_progress = progress or _quiet
    log_path = settings.log_path
    if not log_path.is_file():
        raise SealError(f"no log at {log_path}")
    started = time.perf_counter()
    cleaned = clean_leftovers(log_path)
    lock = _exclusive(log_path)
    try:
        meta = dict(lock.execute("SELECT key, value FROM meta").fetchall())
        ends = _ends(lock)
    finally:
        lock.close()
    sealed_from = int(meta.get("sealed_from", ends[0]))
    if sealed_from == 0:
        return {"sealed": False, "already_sealed": True, "events": ends[0], "cleaned_up": cleaned}
    size = sum(p.stat().st_size for p in _companions(log_path) if p.exists())
    free = shutil.disk_usage(log_path.parent).free
    if free < size * 1.2:
        raise SealError(f"the migration writes a second copy of the log ({size:,} bytes): {free:,} bytes are free")
    partitions = int(meta.get("partitions", settings.partitions))
    new_path = log_path.with_name(log_path.name + NEW_SUFFIX)
    keys = open_key_store(settings.data_dir, log_path.with_name(KEYS_NAME))
    sealer = Sealer(keys, seal_new=True)
    new_log = SqliteLog(new_path, num_partitions=partitions, synchronous="OFF", sealer=sealer)
    old_log = SqliteLog(log_path, num_partitions=partitions, sealer=Sealer(keys, seal_new=False))
    total = ends[0] + ends[1]
    phases: dict[str, float] = {}
    try:
        old = old_log.connection()
        old.execute("BEGIN")  # one snapshot of the old log for the whole copy
        new = new_log.writer_connection()
        try:
            new.executemany(
                "INSERT OR IGNORE INTO meta VALUES (?, ?)",
                [(k, v) for k, v in meta.items() if k not in ("partitions", "sealed_from")],
            )
            new.executemany(
                "INSERT INTO key_scopes VALUES (?,?,?,?)",
                old.execute("SELECT key_id, agent, scope, first_offset FROM key_scopes").fetchall(),
            )
            mark = time.perf_counter()
            sealed = _copy(old, new, sealer, total, report_progress)
            copied_s = phases["copy"] = time.perf_counter() - mark
            mark = time.perf_counter()
            _verify_rows(old, new, sealer, total, report_progress)
            phases["verify"] = time.perf_counter() - mark
        finally:
            old.execute("COMMIT")
            new.close()
        # Records erased before the migration: their events were just sealed under new keys; those
        # keys go now, before the rebuild below reads them (as redacted, like any erased record).
        destroyed = 0
        for rec in new_log.read(0, types=tuple(sorted(ERASURE_TYPES)), vectors=False, limit=10_000_000):
            destroyed += destroy_keys(new_log, rec.offset, decode(rec.value))
        snapshots = SnapshotStore(settings.snapshot_dir)
        report_progress("digests", 0, 1)
        mark = time.perf_counter()
        digests, fresh, decision = _digests(old_log, new_log, snapshots, settings.read_model_options, ends)
        report_progress("digests", 1, 1)
        phases["digests"] = time.perf_counter() - mark
        if not all(d["equal"] for d in digests.values()):
            unequal = sorted(name for name, d in digests.items() if not d["equal"])
            raise SealError(f"a rebuild of the new log does not digest equal to the live read models: {unequal}")
    except BaseException:
        old_log.close()
        new_log.close()
        clean_leftovers(log_path)
        raise
    old_log.close()
    new_log.close()
    mark = time.perf_counter()
    _retire(log_path, new_path, ends)
    phases["retire"] = time.perf_counter() - mark
    # Checkpoints are rewritten from the new log's rebuild: none keeps anything the old one knew.
    mark = time.perf_counter()
    fresh.checkpoint_to(snapshots)
    snapshots.save(DECISION_SNAPSHOT, decision.to_snapshot())
    phases["checkpoints"] = time.perf_counter() - mark
    seconds = time.perf_counter() - started
    return {
        "sealed": True,
        "events": ends[0],
        "audit_records": ends[1],
        "records_sealed": sealed,
        "plaintext_offsets": f"0..{sealed_from - 1}",
        "erased_keys_destroyed": destroyed,
        "digests_equal": True,
        "seconds": round(seconds, 3),
        "records_per_second": round(total / copied_s) if copied_s > 0 else None,
        "phases_s": {name: round(s, 3) for name, s in phases.items()},
        "cleaned_up": cleaned,
    }


def _retire(log_path: Path, new_path: Path, ends: tuple[int, int]) -> None:
    """Swap the verified new log in for the old one, then overwrite the old bytes.

    The old log is held exclusively once more (no process opened it meanwhile, nothing was
    appended), so closing it checkpoints and removes its WAL: no stale WAL can be replayed
    onto the new file. The new file is left in rollback-journal mode, one self-contained file,
    and renamed over the old name; the old inode keeps a second name until it is scrubbed."""
    lock = _exclusive(log_path)
    try:
        if _ends(lock) != ends:
            raise SealError(f"{log_path} was written to during the migration: run memstream seal again")
    finally:
        lock.close()
    conn = connect(new_path)
    try:
        conn.execute("PRAGMA journal_mode=DELETE")
    finally:
        conn.close()
    for p in [*_companions(log_path)[1:], *_companions(new_path)[1:]]:
        if p.exists() and p.stat().st_size > 0 and p.name.endswith("-wal"):
            raise SealError(f"{p} still holds writes: the log is in use")
        p.unlink(missing_ok=True)
    fd = os.open(new_path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    retired = log_path.with_name(log_path.name + RETIRED_SUFFIX)
    os.link(log_path, retired)
    os.replace(new_path, log_path)
    _fsync_dir(log_path.parent)
    _scrub(retired)
    _fsync_dir(log_path.parent)
