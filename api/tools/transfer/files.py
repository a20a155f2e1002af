"""The files transfers read and write: confined to the export directory, written whole or not at all."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

from memstream.api.services.settings import Settings
from memstream.api.tools.transfer.jsonl import dump_lines

MAX_IMPORT_BYTES = 512 * 1024 * 1024


def export_root(settings: Settings) -> Path:
    """Where the tools may read and write files: ``MEMSTREAM_EXPORT_DIR`` or ``<data dir>/exports``."""
    root = os.environ.get("MEMSTREAM_EXPORT_DIR")
    return Path(root) if root else settings.data_dir / "exports"


def confine(settings: Settings, raw: str) -> Path | None:
    """``raw`` resolved inside the export root, or None (absolute elsewhere, ``..``, a link out)."""
    if not raw or "\x00" in raw:
        return None
    root = export_root(settings).resolve()
    path = Path(raw)
    if ".." in path.parts:
        return None
    full = (path if path.is_absolute() else root / path).resolve()
    return full if full.is_relative_to(root) and full != root else None


def path_refusal(kind: str, raw: str) -> dict[str, Any]:
    return {"ok": False, "error": f"{kind} rejected (path traversal or outside export dir): {raw}"}


async def write_export(
    raw_path: str, path: Path, header: dict[str, Any], records: list[dict[str, Any]]
) -> dict[str, Any]:
    """Write an export file at ``path`` (confined already) and answer as ``export_memories``.
    The file appears whole or not at all: written to a temporary file beside it, synced, then
    renamed over it, so a reader never sees a half-written export."""

    def write() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".tmp.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.writelines(dump_lines(header, records))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    try:
        await asyncio.get_running_loop().run_in_executor(None, write)
    except OSError as exc:
        return {"ok": False, "error": f"could not write {raw_path}: {exc.strerror or exc}"}
    return {
        "ok": True,
        "path": raw_path,
        "memories": header["memory_count"],
        "episodes": header["episode_count"],
        "profiles": header["profile_count"],
    }


async def read_export(settings: Settings, raw_path: str) -> bytes | dict[str, Any]:
    """The bytes of the file ``raw_path`` names under the export directory, or the answer
    refusing it (outside the directory, missing, unreadable, larger than MAX_IMPORT_BYTES)."""
    path = confine(settings, raw_path)
    if path is None:
        return path_refusal("input_path", raw_path)

    def read() -> bytes:
        with open(path, "rb") as f:
            return f.read(MAX_IMPORT_BYTES + 1)

    try:
        raw = await asyncio.get_running_loop().run_in_executor(None, read)
    except FileNotFoundError:
        return {"ok": False, "error": f"File not found: {raw_path}"}
    except OSError as exc:
        return {"ok": False, "error": f"could not read {raw_path}: {exc.strerror or exc}"}
    if len(raw) > MAX_IMPORT_BYTES:
        return {"ok": False, "error": f"input file exceeds {MAX_IMPORT_BYTES} bytes: {raw_path}"}
    return raw
