"""CPersona's JSONL export file (header, then records), as memstream writes and reads it (docs/operations.md)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeAlias

import orjson

from memstream.api.tools.sanitize import InputError

FORMAT = "cpersona-export/1.1"
IMPORTED_KINDS = ("memory", "episode", "profile")
NOT_IMPORTED_KINDS = ("entity", "mention", "relation", "folder", "folder_member")

Numbered: TypeAlias = tuple[int, dict[str, Any]]  # a record and the line of the file it came from


def export_header(
    agent_id: str,
    memories: list[dict[str, Any]],
    episodes: list[dict[str, Any]],
    profiles: list[dict[str, Any]],
    **position: int | dict[str, int],
) -> dict[str, Any]:
    """A file's header: counts of the records it holds (``check_counts`` refuses a file cut
    short by them) and ``position``, the point of the log the records show: ``log_offset``
    on the embedded log, ``log_offsets`` per partition in Kafka mode."""
    return {
        "_type": "header",
        "version": FORMAT,
        "agent_id": agent_id,
        "exported_at": datetime.now(UTC).isoformat(),
        "memory_count": len(memories),
        "episode_count": len(episodes),
        "has_profile": bool(profiles),
        "profile_count": len(profiles),
        "producer": "memstream",
        **position,
    }


def dump_lines(header: dict[str, Any], records: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    yield orjson.dumps(header) + b"\n"
    for r in records:
        yield orjson.dumps(r) + b"\n"


def parse_lines(raw: bytes) -> tuple[dict[str, Any] | None, list[Numbered], list[str]]:
    """(header, [(line number, record)], errors). Lines are split on '\\n' only: U+2028 is
    legal inside a JSON string."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"the file is not UTF-8: {exc}") from None
    header: dict[str, Any] | None = None
    records: list[Numbered] = []
    errors: list[str] = []
    for n, line in enumerate(text.split("\n"), 1):
        line = line.strip()
        if not line:
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            errors.append(f"Line {n}: invalid JSON: {exc}")
            continue
        if not isinstance(rec, dict):
            errors.append(f"Line {n}: not a JSON object")
        elif rec.get("_type") == "header":
            header = rec
        else:
            records.append((n, rec))
    return header, records, errors


def check_counts(header: dict[str, Any] | None, records: list[Numbered]) -> str | None:
    """A file cut short (torn copy, full disk) is refused whole rather than half imported."""
    if header is None:
        return None
    for kind, key in (("memory", "memory_count"), ("episode", "episode_count"), ("profile", "profile_count")):
        want = header.get(key)
        have = sum(1 for _, r in records if r.get("_type") == kind)
        if isinstance(want, int) and not isinstance(want, bool) and want != have:
            return f"the header announces {want} {kind} records and the file holds {have}: truncated or edited"
    return None


def parse_export(raw: bytes, dry_run: bool) -> tuple[list[Numbered], list[str]] | dict[str, Any]:
    """The records of an export file and the errors of its unreadable lines, or the answer
    refusing the file whole (not UTF-8; header counts that say it was cut short)."""
    try:
        header, records, errors = parse_lines(raw)
    except InputError as exc:
        return {"ok": False, "error": str(exc)}
    problem = check_counts(header, records)
    if problem:
        return {"ok": False, "error": f"import refused, nothing was written: {problem}", "dry_run": dry_run}
    return records, errors


def split_types(records: list[Numbered]) -> tuple[dict[str, list[Numbered]], list[str]]:
    """The records by kind (memory, episode, profile; each in file order), and an error for
    each record of a kind memstream does not import."""
    typed: dict[str, list[Numbered]] = {kind: [] for kind in IMPORTED_KINDS}
    errors = []
    for n, rec in records:
        kind = rec.get("_type")
        if kind in typed:
            typed[kind].append((n, rec))
        elif kind in NOT_IMPORTED_KINDS:
            errors.append(f"Line {n}: {kind} records are not imported by memstream (declare them again)")
        else:
            errors.append(f"Line {n}: unknown type {kind!r}")
    return typed, errors
