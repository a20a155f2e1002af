"""Checkpoints of folds: ``(state, offsets)`` written atomically and verified on load.

A snapshot is only a shortcut; the log stays the truth. So a snapshot that is missing, torn
or fails its checksum is not an error: the loader reports it absent and the fold is rebuilt
from the log. Writes go to a temporary file, are fsynced, then renamed over the old one, so a
kill at any moment leaves either the old snapshot or the new one, never half of one.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger(__name__)

_MAGIC = b"MSSNAP1\n"


class SnapshotStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.snap"

    def save(self, name: str, body: dict[str, Any]) -> None:
        payload = orjson.dumps(body)
        header = hashlib.sha256(payload).hexdigest().encode() + b" " + str(len(payload)).encode() + b"\n"
        target = self.path(name)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(_MAGIC + header + payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def load(self, name: str) -> dict[str, Any] | None:
        """The snapshot's body, or None when absent or damaged (then: rebuild from the log)."""
        target = self.path(name)
        try:
            raw = target.read_bytes()
        except FileNotFoundError:
            return None
        try:
            if not raw.startswith(_MAGIC):
                raise ValueError("bad magic")
            header, _, payload = raw[len(_MAGIC) :].partition(b"\n")
            digest, size = header.split(b" ")
            if int(size) != len(payload) or hashlib.sha256(payload).hexdigest().encode() != digest:
                raise ValueError("checksum mismatch")
            body: dict[str, Any] = orjson.loads(payload)
            return body
        except (ValueError, orjson.JSONDecodeError) as exc:
            log.warning("snapshot %s is damaged (%s); it will be rebuilt from the log", target, exc)
            return None

    def drop(self, name: str) -> None:
        self.path(name).unlink(missing_ok=True)
