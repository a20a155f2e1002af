"""Online backup and restore of the embedded log (``memstream backup`` / ``memstream restore``):
a consistent copy of ``log.sqlite3``, the only authoritative file, with the key store that
opens its sealed events (``keys.db``, and ``master.key`` when the master key is the data
directory's own). A restore applies the erasures recorded since the backup (the erasure
ledger), so an erased record never comes back. See docs/operations.md, "Backup and restore",
and docs/erasure.md.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from memstream.api.services.erasure import ledger_paths, read_ledgers, reapply_erasures
from memstream.api.services.progress import Progress
from memstream.api.services.settings import Settings
from memstream.streams.keys.master import ENV_FILE, ENV_KEY, LOCAL_NAME
from memstream.streams.log.sqlite import KEYS_NAME

LOG_NAME = "log.sqlite3"
STEP_PAGES = 1024  # pages copied between two progress reports (4 MiB at SQLite's default page size)


class BackupError(Exception):
    pass


def _ends(conn: sqlite3.Connection) -> tuple[int, int]:
    events = conn.execute('SELECT COALESCE(MAX("offset"), -1) + 1 FROM events').fetchone()[0]
    audit = conn.execute('SELECT COALESCE(MAX("offset"), -1) + 1 FROM audit').fetchone()[0]
    return int(events), int(audit)


def _copy(
    src_path: Path, dest_file: Path, progress: Progress | None = None, *, log: bool = True
) -> dict[str, Any]:
    """Copy the database at ``src_path`` into ``dest_file`` (which must not exist) atomically,
    reporting the bytes copied so far to ``progress``."""
    if dest_file.exists():
        raise BackupError(f"{dest_file} exists already; refusing to overwrite it")
    dest_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest_file.with_name(dest_file.name + ".partial")
    for stale in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-journal")):
        stale.unlink(missing_ok=True)
    started = time.perf_counter()
    src = sqlite3.connect(src_path, timeout=30, isolation_level=None)  # only read
    try:
        dst = sqlite3.connect(tmp)
        try:
            # One read transaction held across every step pins one snapshot of the source (WAL):
            # the copy is one consistent point of the log however many steps it takes, and
            # writers go on meanwhile. Steps only exist to report progress.
            src.execute("BEGIN")
            src.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # the read starts here
            page_size = int(src.execute("PRAGMA page_size").fetchone()[0])
            report = _pages_as_bytes(progress, page_size) if progress is not None else None
            src.backup(dst, pages=STEP_PAGES, progress=report)
            src.execute("COMMIT")
            # A self-contained file: no -wal beside it to forget when it is moved.
            dst.execute("PRAGMA journal_mode=DELETE")
            verdict = dst.execute("PRAGMA quick_check").fetchone()[0]
            events, audit = _ends(dst) if log else (0, 0)
        finally:
            dst.close()
    except sqlite3.Error as exc:
        tmp.unlink(missing_ok=True)
        raise BackupError(f"backup of {src_path} failed: {exc}") from exc
    finally:
        src.close()
    if verdict != "ok":
        tmp.unlink(missing_ok=True)
        raise BackupError(f"the copy failed its integrity check: {verdict}")
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, dest_file)
    dir_fd = os.open(dest_file.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return {
        "path": str(dest_file),
        "events": events,
        "audit_records": audit,
        "bytes": dest_file.stat().st_size,
        "seconds": round(time.perf_counter() - started, 3),
        "integrity": verdict,
    }


def _pages_as_bytes(progress: Progress, page_size: int) -> Callable[[int, int, int], None]:
    """sqlite3's backup callback (status, pages remaining, pages in all) as bytes done of bytes."""

    def step(_status: int, remaining: int, total: int) -> None:
        progress((total - remaining) * page_size, total * page_size)

    return step


def backup_log(settings: Settings, dest: Path, progress: Progress | None = None) -> dict[str, Any]:
    """Back the log of ``settings.data_dir`` up into ``dest`` (a directory: ``dest/log.sqlite3``,
    usable as a data directory as it is; or a file path ending in ``.sqlite3``)."""
    if not settings.log_path.exists():
        raise BackupError(f"no log at {settings.log_path}")
    target = dest if dest.suffix == ".sqlite3" else dest / LOG_NAME
    report = _copy(settings.log_path, target, progress)
    # The key store after the log: every event the copy holds has its key in it (keys are
    # durable before their events), unless an erasure destroyed it meanwhile, as it should.
    keys = settings.log_path.with_name(KEYS_NAME)
    if keys.exists():
        report["keys"] = _copy(keys, target.with_name(KEYS_NAME), log=False)["path"]
        master = settings.data_dir / LOCAL_NAME
        if master.exists() and not (os.environ.get(ENV_KEY) or os.environ.get(ENV_FILE)):
            # The data directory's own master key goes with it (a backup is then readable by
            # whoever holds it, as the data directory is: docs/security.md).
            copied = target.with_name(LOCAL_NAME)
            shutil.copyfile(master, copied)
            os.chmod(copied, 0o600)
            report["master_key"] = str(copied)
    return report


def restore_log(source: Path, settings: Settings, progress: Progress | None = None) -> dict[str, Any]:
    """Put a backup in place as the log of an empty data directory. Snapshots there (left by
    another log) are removed, so the next start replays the restored log from offset 0."""
    src = source / LOG_NAME if source.is_dir() else source
    if not src.is_file():
        raise BackupError(f"no backup at {src}")
    log_path = settings.log_path
    if any(p.exists() for p in (log_path, log_path.with_name(log_path.name + "-wal"))):
        raise BackupError(
            f"{settings.data_dir} already has a log; stop its servers and move {log_path.name} (and any -wal, -shm) "
            "aside first"
        )
    keys_src = src.with_name(KEYS_NAME)
    keys_dest = log_path.with_name(KEYS_NAME)
    if keys_dest.exists():
        raise BackupError(f"{settings.data_dir} already has a key store; move {KEYS_NAME} (and any -wal) aside first")
    # Read before anything is copied: the data directory's ledger and the one outside it.
    ledger = read_ledgers(ledger_paths(settings.data_dir))
    report = _copy(src, log_path, progress)
    if keys_src.exists():
        _copy(keys_src, keys_dest, log=False)
        master_src = src.with_name(LOCAL_NAME)
        master_dest = settings.data_dir / LOCAL_NAME
        if master_src.exists() and not master_dest.exists():
            shutil.copyfile(master_src, master_dest)
            os.chmod(master_dest, 0o600)
    if settings.snapshot_dir.exists():
        shutil.rmtree(settings.snapshot_dir)
    report["snapshots"] = "removed; the next start replays the log"
    # On a thread of its own: restore may be called where an event loop is running already.
    with ThreadPoolExecutor(max_workers=1) as pool:
        report["erasures_reapplied"] = pool.submit(asyncio.run, reapply_erasures(settings, ledger)).result()
    return report
