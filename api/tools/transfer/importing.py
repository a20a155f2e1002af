"""The ``import_memories`` tool: a JSONL export decided record by record through the normal write rules."""

from __future__ import annotations

from typing import Any

from pydantic import Field, StrictStr

from memstream.api.services.ports import Engine
from memstream.api.services.progress import Progress
from memstream.api.tools.common import CommandId, Flag, SessionKey
from memstream.api.tools.registry import Caller, ToolArgs
from memstream.api.tools.transfer.files import read_export
from memstream.api.tools.transfer.importer import Importer
from memstream.api.tools.transfer.jsonl import parse_export


class ImportArgs(ToolArgs):
    input_path: StrictStr = Field(max_length=4096, description="A file under the export directory.")
    target_agent_id: StrictStr = Field(default="", max_length=256, description="Import into this agent.")
    dry_run: Flag = Field(default=False, description="Count what would be imported; write nothing.")
    session_key: SessionKey = ""
    command_id: CommandId | None = Field(
        default=None, description="Accepted for uniformity; an import is idempotent by construction."
    )


async def import_file(
    engine: Engine,
    caller: Caller,
    raw: bytes,
    *,
    target: str = "",
    dry_run: bool = False,
    session_key: str = "",
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Import the bytes of an export file (the tool and ``memstream import`` share this);
    ``progress`` hears the records decided so far, of all the file holds."""
    parsed = parse_export(raw, dry_run)
    if isinstance(parsed, dict):
        return parsed
    records, errors = parsed
    importer = Importer(
        engine, caller, target=target, namespace="import", session_key=session_key, dry_run=dry_run, progress=progress
    )
    importer.tally.errors.extend(errors)
    tally = await importer.run(records)
    body = tally.answer()
    body["profile_updated"] = tally.profile_updated
    return body


async def import_memories(engine: Engine, caller: Caller, args: ImportArgs) -> dict[str, Any]:
    raw = await read_export(engine.settings, args.input_path)
    if isinstance(raw, dict):
        return raw
    return await import_file(
        engine, caller, raw, target=args.target_agent_id, dry_run=args.dry_run, session_key=args.session_key
    )
