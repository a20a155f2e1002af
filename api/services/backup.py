"""Online backup and restore of the embedded log (``memstream backup`` / ``memstream restore``):
a consistent copy of ``log.sqlite3``, the only authoritative file. See docs/operations.md,
"Backup and restore".
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memstream.api.services.progress import Progress
from memstream.api.services.settings import Settings

LOG_NAME = "log.sqlite3"
STEP_PAGES = 1024  # pages copied between two progress reports (4 MiB at SQLite's default page size)


class BackupError(Exception):
    pass


def _ends(conn: sqlite3.Connection) -> tuple[int, int]:
    events = conn.execute('SELECT COALESCE(MAX("offset"), -1) + 1 FROM events').fetchone()[0]
    audit = conn.execute('SELECT COALESCE(MAX("offset"), -1) + 1 FROM audit').fetchone()[0]
    return int(events), int(audit)


def _copy(src_path: Path, dest_file: Path, progress: Progress | None = None) -> dict[str, Any]:
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
            events, audit = _ends(dst)
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
    return _copy(settings.log_path, target, progress)


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
    report = _copy(src, log_path, progress)
    if settings.snapshot_dir.exists():
        shutil.rmtree(settings.snapshot_dir)
    report["snapshots"] = "removed; the next start replays the log"
    return report
