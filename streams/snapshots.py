"""Checkpoints of folds: ``(state, offsets)`` written atomically and verified on load.

A snapshot is only a shortcut; the log stays the truth. So a snapshot that is missing, torn
or fails its checksum is not an error: the loader reports it absent and the fold is rebuilt
from the log. Writes go to a temporary file, are fsynced, then renamed over the old one, so a
kill at any moment leaves either the old snapshot or the new one, never half of one.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import itertools
import logging
import mmap
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from memstream.streams import json_pieces

log = logging.getLogger(__name__)


# A checkpoint's payload as the pieces ``save`` hashes and writes one at a time; bench/erasure.py
# swaps in one ``orjson.dumps`` to time the erasure as it was (the same bytes).
payload_pieces: Callable[[Any], Iterable[bytes]] = json_pieces.pieces


# Temporary files this process is writing now: a sweep must not take them from under a save.
_writing: set[Path] = set()
_writing_lock = threading.Lock()
# Each save's own temporary name (``.<name>.<pid>-<n>.tmp``): a rebuild's checkpoint and the
# running server's of the same read model, in one process at once, shared ``.<name>.<pid>.tmp``;
# the second open truncated the first's file, and the later rename found nothing to move.
_save_numbers = itertools.count()

_MAGIC = b"MSSNAP1\n"
_BLOB_MAGIC = b"MSBLOB1\n"
_BLOB_HEADER = 64 + 1 + 20 + 1  # sha256 hex, space, zero-padded size, newline
_SNAP_HEADER = _BLOB_HEADER  # the same for a checkpoint (before wave 9 its size was not padded)
# Where a blob's payload starts in its file: a writer that wants its arrays aligned in a mapped
# blob (``map_blob``) pads its own layout to this.
BLOB_PAYLOAD_AT = len(_BLOB_MAGIC) + _BLOB_HEADER


# A file's identity while it is unchanged: checkpoints are never written in place (a save
# writes a new file and renames it over the old one), so the same identity means the same bytes.
_Identity = tuple[int, int, int, int]
# What hashing a file ahead found: its identity, where its payload starts, the payload's sha256 (hex).
_Checked = tuple[_Identity, int, bytes]


def _identity(fd: int) -> _Identity:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _payload_at(f: io.FileIO, magic: bytes) -> int:
    """Where a file's payload starts: after its magic and its header line."""
    head = f.read(BLOB_PAYLOAD_AT + 64)
    end = head.find(b"\n", len(magic)) if head.startswith(magic) else -1
    if end < 0:
        raise ValueError("bad header")
    return BLOB_PAYLOAD_AT if magic == _BLOB_MAGIC else end + 1


# The hashing thread's read size. Each read and each hash gives up the interpreter lock and must
# win it back from the loading thread (up to the 5 ms switch interval each time): with
# ``hashlib.file_digest``'s 256 KiB, 1.8 GB at 1M memories was ~14,000 waits, the thread fell
# behind the loads it was to spare, and they waited for it (py-spy, load 3).
_HASH_CHUNK = 32 << 20
# Below this many bytes in all, ``verify_ahead`` leaves the hashing to the loads. At 100k
# memories (209 MB, ~0.15 s of hashing) a start with it (and the erasure scan moved beside the
# loads) was not faster: to /health 2.40 -> 2.56 s, medians of 4 at load 2.5-3, each thread's
# lock handoffs costing about what it spared. At 1M (1.8 GB, ~1.2 s of hashing) it spares.
VERIFY_AHEAD_FROM = 512 << 20


def _hash_file(path: Path, magic: bytes, chunk: memoryview) -> _Checked | None:
    """The sha256 of the file's payload, read ``chunk`` at a time (the caller's buffer, one for
    all the files: a new 32 MiB one per file was ~0.3 CPU s of a 100k start), or None when it
    cannot be read: its load then checks it as if nothing had been done ahead."""
    try:
        with open(path, "rb", buffering=0) as f:
            ident = _identity(f.fileno())
            at = _payload_at(f, magic)
            f.seek(at)
            digest = hashlib.sha256()
            while n := f.readinto(chunk):
                digest.update(chunk[:n])
            return ident, at, digest.hexdigest().encode()
    except (OSError, ValueError):
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


REWRITE_LOCK = ".rewrite.lock"


class _Held:
    """One directory's lock in this process: a thread lock (re-entered by its holder) over the
    ``flock`` that excludes other processes, taken by the first entry and dropped by the last."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.thread_lock = threading.RLock()
        self.depth = 0
        self.fd: int | None = None


_held: dict[Path, _Held] = {}
_held_lock = threading.Lock()


class RewriteLock:
    """Held while a checkpoint directory is written: each read model's checkpoint with its
    sidecars' collection (``ProjectionRunner.checkpoint_to``), and a rebuild's whole save, which
    checks while holding it that no erasure landed since it read the log (docs/erasure.md). So a
    rebuild beside a server neither saves state an erasure has since rewritten, nor has its
    sidecars collected by the server's checkpoint (or the server's by its own) between a
    checkpoint naming them and its collection. Re-entered by the thread holding it; other
    threads and processes wait. The ``flock`` goes with its descriptor, even on a kill."""

    def __init__(self, directory: Path) -> None:
        path = directory.resolve() / REWRITE_LOCK
        with _held_lock:
            self._held = _held.setdefault(path, _Held(path))

    def acquire(self, blocking: bool = True) -> bool:
        """Take it (waiting, unless not ``blocking``); whether it was taken."""
        held = self._held
        if not held.thread_lock.acquire(blocking):
            return False
        if held.depth == 0:
            try:
                fd = os.open(held.path, os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BaseException:
                    os.close(fd)
                    raise
            except BlockingIOError:
                held.thread_lock.release()
                return False
            except BaseException:
                held.thread_lock.release()
                raise
            held.fd = fd
        held.depth += 1
        return True

    def release(self) -> None:
        held = self._held
        held.depth -= 1
        if held.depth == 0 and held.fd is not None:
            fd, held.fd = held.fd, None
            os.close(fd)
        held.thread_lock.release()

    def __enter__(self) -> RewriteLock:
        self.acquire()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()


class SnapshotStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._ahead: dict[Path, Future[_Checked | None]] = {}
        self._ahead_lock = threading.Lock()
        self.sweep_orphans()

    def verify_ahead(self, names: Iterable[str]) -> None:
        """Hash the named checkpoints and their blobs (``NAME-*.blob``) on a thread, in that
        order, ahead of their loads: a load whose file is unchanged since (``_Identity``) then
        compares the header with that digest instead of hashing on its own thread.

        A start loads the checkpoints one after another on one thread, and their sha256s were
        ~2 s of it at 1M memories (1.8 GB, most of it the vectors' blob). hashlib releases the
        interpreter lock, so on a second core the hashing overlaps the JSON parses and builds
        (docs/benchmarks.md, "Restart", sixth round). Nothing is trusted that a load would not
        check itself: a file not hashed yet, replaced since, or unreadable is hashed by its load."""
        files: list[tuple[Path, bytes]] = []
        for name in names:
            files.append((self.path(name), _MAGIC))
            files.extend((self.blob_path(b), _BLOB_MAGIC) for b in self.blob_names(f"{name}-"))
        sizes: dict[Path, int] = {}
        for path, _ in files:
            try:
                sizes[path] = path.stat().st_size
            except OSError:
                continue  # absent (or gone since): its load says so
        if not sizes or sum(sizes.values()) < VERIFY_AHEAD_FROM:
            return
        # One buffer for every file: the pool's one thread hashes them one after another.
        chunk = memoryview(bytearray(min(_HASH_CHUNK, max(sizes.values()))))
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verify-ahead")
        with self._ahead_lock:
            for path, magic in files:
                if path in sizes:
                    self._ahead[path] = pool.submit(_hash_file, path, magic, chunk)
        pool.shutdown(wait=False)  # the thread ends once the list is done

    def _hashed_ahead(self, path: Path, ident: _Identity, at: int, digest: bytes) -> bool:
        """Whether ``verify_ahead`` hashed this very file (``ident``) to ``digest``. A hash not
        started yet is dropped (the load hashes the file itself, rather than wait behind others)."""
        with self._ahead_lock:
            ahead = self._ahead.pop(path, None)
        if ahead is None or ahead.cancel():
            return False
        return ahead.result() == (ident, at, digest)

    def sweep_orphans(self) -> list[Path]:
        """Delete temporary files a killed writer left behind. A save killed between its write
        and its rename leaves ``.<name>.<pid>-<n>.tmp`` (``.<name>.<pid>.tmp`` before wave 14)
        holding folded state (plaintext of records an erasure may take later), which no load
        reads and nothing else would ever remove. A file is an orphan when its writer's process
        is gone, or when the pid is this process's (a restarted container often reuses it) but
        no save of this process is writing it."""
        removed = []
        for tmp in self.directory.glob(".*.tmp"):
            try:
                pid = int(tmp.name.rsplit(".", 2)[-2].partition("-")[0])
            except (IndexError, ValueError):
                continue  # not one of ours
            with _writing_lock:
                in_flight = tmp in _writing
            if in_flight or (pid != os.getpid() and _pid_alive(pid)):
                continue
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
        if removed:
            log.warning("removed %d temporary file(s) a killed writer left in %s", len(removed), self.directory)
        return removed

    def _begin(self, target: Path) -> Path:
        with _writing_lock:
            tmp = target.with_name(f".{target.name}.{os.getpid()}-{next(_save_numbers)}.tmp")
            _writing.add(tmp)
        return tmp

    @staticmethod
    def _end(tmp: Path) -> None:
        with _writing_lock:
            _writing.discard(tmp)

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.snap"

    def save(self, name: str, body: dict[str, Any]) -> None:
        # In pieces: one dump of megabytes held the interpreter lock, and every other thread
        # (the event loop, the bus's writer) waited for it (streams/json_pieces.py). Each piece
        # is hashed and written as it comes, the header (its size zero-padded to a fixed width,
        # which ``load`` reads as before) filled in last: joined first, a 157 MB checkpoint was
        # held twice over at once, at the top of a cold start's peak (docs/benchmarks.md, "The
        # cold start's peak (wave 9)").
        target = self.path(name)
        tmp = self._begin(target)
        try:
            with open(tmp, "wb") as f:
                f.write(_MAGIC + b" " * (_SNAP_HEADER - 1) + b"\n")
                digest = hashlib.sha256()
                size = 0
                for piece in payload_pieces(body):
                    digest.update(piece)
                    f.write(piece)
                    size += len(piece)
                f.seek(len(_MAGIC))
                f.write(digest.hexdigest().encode() + b" " + str(size).zfill(20).encode() + b"\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a full disk must not keep a half-written copy around
            raise
        finally:
            self._end(tmp)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def load(self, name: str) -> dict[str, Any] | None:
        """The snapshot's body, or None when absent or damaged (then: rebuild from the log)."""
        target = self.path(name)
        try:
            with open(target, "rb") as f:
                ident = _identity(f.fileno())
                raw = f.read()
        except FileNotFoundError:
            return None
        try:
            if not raw.startswith(_MAGIC):
                raise ValueError("bad magic")
            end = raw.find(b"\n", len(_MAGIC))
            if end < 0:
                raise ValueError("no header")
            digest, size = raw[len(_MAGIC) : end].split(b" ")
            payload = memoryview(raw)[end + 1 :]  # not a copy: a checkpoint is up to ~150 MB at 1M memories
            if int(size) != len(payload):
                raise ValueError("size mismatch")
            if (
                not self._hashed_ahead(target, ident, end + 1, digest)
                and hashlib.sha256(payload).hexdigest().encode() != digest
            ):
                raise ValueError("checksum mismatch")
            body: dict[str, Any] = orjson.loads(payload)
            return body
        except (ValueError, orjson.JSONDecodeError) as exc:
            log.warning("snapshot %s is damaged (%s); it will be rebuilt from the log", target, exc)
            return None

    def drop(self, name: str) -> None:
        self.path(name).unlink(missing_ok=True)

    # -- binary sidecars ----------------------------------------------------------------------
    # Large binary state (vectors, graph indexes) beside a JSON snapshot, with the same
    # discipline: written to a temporary file, fsynced, renamed; verified on load (magic, size,
    # sha256), so a torn or damaged blob reads as absent, never as wrong data.

    def blob_path(self, name: str) -> Path:
        return self.directory / f"{name}.blob"

    def save_blob(self, name: str, data: bytes | bytearray | memoryview | Iterable[Any]) -> str:
        """Write ``data`` (one bytes-like, or an iterable of bytes-likes written in order, so a
        large blob never has to exist as one object) atomically; returns the payload's sha256."""
        parts = [data] if isinstance(data, bytes | bytearray | memoryview) else data
        target = self.blob_path(name)
        tmp = self._begin(target)
        digest = hashlib.sha256()
        size = 0
        try:
            with open(tmp, "wb") as f:
                f.write(_BLOB_MAGIC + b" " * (_BLOB_HEADER - 1) + b"\n")
                for part in parts:
                    view = memoryview(part)  # type: ignore[arg-type]  # parts are bytes-like or arrays
                    if view.nbytes == 0:
                        continue
                    view = view.cast("B")
                    digest.update(view)
                    f.write(view)
                    size += view.nbytes
                f.seek(len(_BLOB_MAGIC))
                f.write(digest.hexdigest().encode() + b" " + str(size).zfill(20).encode() + b"\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            self._end(tmp)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return digest.hexdigest()

    def load_blob(self, name: str) -> memoryview | None:
        """The blob's payload (a writable view over one buffer), or None when absent or damaged."""
        return self._verified_blob(name, _read_payload)

    def map_blob(self, name: str) -> memoryview | None:
        """The blob's payload as a private, writable memory map of its file (writes stay in
        this process), or None when absent or damaged: pages are read when touched and, until
        written, are the page cache's, not a copy. Verified like ``load_blob``; the mapping
        lasts while any view of it does, even once the file is dropped."""
        return self._verified_blob(name, _map_payload)

    def _verified_blob(self, name: str, payload: Callable[[io.BufferedReader, int], memoryview]) -> memoryview | None:
        target = self.blob_path(name)
        try:
            with open(target, "rb") as f:
                ident = _identity(f.fileno())
                head = f.read(BLOB_PAYLOAD_AT)
                try:
                    if not head.startswith(_BLOB_MAGIC) or len(head) != BLOB_PAYLOAD_AT:
                        raise ValueError("bad magic")
                    digest, size_text = head[len(_BLOB_MAGIC) : -1].split(b" ")
                    view = payload(f, int(size_text))
                    if (
                        not self._hashed_ahead(target, ident, BLOB_PAYLOAD_AT, digest)
                        and hashlib.sha256(view).hexdigest().encode() != digest
                    ):
                        raise ValueError("checksum mismatch")
                except ValueError as exc:
                    log.warning("blob %s is damaged (%s); it will be rebuilt from the log", target, exc)
                    return None
        except FileNotFoundError:
            return None
        return view

    def drop_blob(self, name: str) -> None:
        self.blob_path(name).unlink(missing_ok=True)

    def blob_names(self, prefix: str = "") -> list[str]:
        """Names of the stored blobs that start with ``prefix``, sorted."""
        return sorted(p.name[: -len(".blob")] for p in self.directory.glob(f"{prefix}*.blob"))


def _read_payload(f: io.BufferedReader, size: int) -> memoryview:
    """The rest of the file, read into one buffer; ``ValueError`` when it is not ``size`` bytes."""
    view = memoryview(bytearray(size))
    got = 0
    while got < size:
        n = f.readinto(view[got:])
        if not n:
            break
        got += n
    if got != size or f.read(1):
        raise ValueError("size mismatch")
    return view


def _map_payload(f: io.BufferedReader, size: int) -> memoryview:
    """The rest of the file, mapped copy-on-write; ``ValueError`` when it is not ``size`` bytes."""
    if os.fstat(f.fileno()).st_size != BLOB_PAYLOAD_AT + size:
        raise ValueError("size mismatch")
    if size == 0:
        return memoryview(bytearray())
    return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY))[BLOB_PAYLOAD_AT:]
