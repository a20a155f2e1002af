"""The three transfer tools in the registry (imported by the package, so ``api.tools`` registers them)."""

from __future__ import annotations

from memstream.api.tools.registry import Tool, register
from memstream.api.tools.transfer.export import ExportArgs, export_memories
from memstream.api.tools.transfer.importing import ImportArgs, import_memories
from memstream.api.tools.transfer.merge import MergeArgs, merge_memories

for _tool in (
    Tool(
        "export_memories",
        ExportArgs,
        export_memories,
        "Export an agent's memories, episodes and profile (with history; vectors on request) as JSONL "
        "under the export directory.",
        admin=True,
    ),
    Tool(
        "import_memories",
        ImportArgs,
        import_memories,
        "Import a JSONL export through the normal write rules; importing the same file again changes nothing.",
        writes=True,
        admin=True,
    ),
    Tool(
        "merge_memories",
        MergeArgs,
        merge_memories,
        "Copy (or move) one agent's memories, episodes and profile into another; re-running changes nothing.",
        writes=True,
        admin=True,
    ),
):
    register(_tool)
