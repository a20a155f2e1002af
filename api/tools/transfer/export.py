"""The ``export_memories`` tool: an agent's records written as a JSONL file under the export directory."""

from __future__ import annotations

from typing import Any

from pydantic import Field, StrictStr

from memstream.api.services.ports import Engine
from memstream.api.tools.common import Flag
from memstream.api.tools.registry import Caller, ToolArgs
from memstream.api.tools.transfer.collect import collect
from memstream.api.tools.transfer.files import confine, path_refusal, write_export


class ExportArgs(ToolArgs):
    agent_id: StrictStr = Field(max_length=256, description="The agent to export ('' = every agent).")
    output_path: StrictStr = Field(max_length=4096, description="File under the export directory.")
    include_embeddings: Flag = Field(default=False, description="Write each record's vector (base64 float32).")


async def export_memories(engine: Engine, caller: Caller, args: ExportArgs) -> dict[str, Any]:
    path = confine(engine.settings, args.output_path)
    if path is None:
        return path_refusal("output_path", args.output_path)
    header, records = await collect(engine, args.agent_id, include_embeddings=args.include_embeddings)
    return await write_export(args.output_path, path, header, records)
