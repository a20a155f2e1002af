"""The ``merge_memories`` tool: one agent's records copied (or moved) into another through the write rules."""

from __future__ import annotations

from typing import Any

from pydantic import Field, StrictStr

from memstream.api.services.ports import Engine
from memstream.api.tools.common import CommandId, Flag, SessionKey
from memstream.api.tools.registry import Caller, ToolArgs
from memstream.api.tools.transfer.collect import collect
from memstream.api.tools.transfer.command_ids import command_seed
from memstream.api.tools.transfer.importer import Importer
from memstream.api.tools.transfer.jsonl import Numbered
from memstream.api.tools.transfer.move import delete_moved, moved_records
from memstream.api.tools.transfer.tally import Tally

_MERGE_ORDER = (
    "ok",
    "dry_run",
    "source_agent_id",
    "target_agent_id",
    "strategy",
    "mode",
    "merged_memories",
    "skipped_memories",
    "merged_episodes",
    "skipped_episodes",
    "profile_copied",
    "skipped_profile",
)


class MergeArgs(ToolArgs):
    source_agent_id: StrictStr = Field(min_length=1, max_length=256, description="Copy from this agent.")
    target_agent_id: StrictStr = Field(min_length=1, max_length=256, description="Into this agent.")
    strategy: StrictStr = Field(default="skip", description="'skip': a record the target has already is skipped.")
    mode: StrictStr = Field(default="copy", description="'copy', or 'move' (then deleted at the source).")
    dry_run: Flag = Field(default=False, description="Count what would be merged; write nothing.")
    session_key: SessionKey = ""
    command_id: CommandId | None = Field(
        default=None, description="Accepted for uniformity; a merge is idempotent by construction."
    )


def merge_refusal(args: MergeArgs) -> dict[str, Any] | None:
    """The answer refusing a merge before anything is read or written, if any."""
    if args.strategy != "skip":
        return {"ok": False, "error": f"Unsupported strategy '{args.strategy}'. Currently supported: 'skip'"}
    if args.mode not in ("copy", "move"):
        return {"ok": False, "error": f"Invalid mode '{args.mode}'. Supported: 'copy', 'move'"}
    if args.source_agent_id == args.target_agent_id:
        return {"ok": False, "error": "source_agent_id and target_agent_id must differ"}
    return None


def merge_namespace(source: str) -> str:
    """The command-id namespace of merges from ``source``: the same for copy and move, so a
    move re-run after a copy (or after stopping midway) finds its stores done already."""
    return f"merge:{command_seed(source)[:16]}"


def merge_numbering(records: list[dict[str, Any]]) -> list[Numbered]:
    """A source's records as a merge numbers them in its errors: memories and episodes by
    position, the profile as 0."""
    texts = [r for r in records if r["_type"] != "profile"]
    return list(enumerate(texts)) + [(0, r) for r in records if r["_type"] == "profile"][:1]


async def merge_into(
    engine: Engine,
    caller: Caller,
    records: list[Numbered],
    *,
    source: str,
    target: str,
    session_key: str,
    dry_run: bool,
) -> tuple[Tally, bool]:
    """The target's half of a merge (all of it, or one batch of it: the records of a batch
    land in ``merge_numbering``'s order, so batches in order land as the whole would):
    memories and episodes, then the source's profile unless the target has one ('skip': a
    target's own profile is kept). The tally, and whether the profile was copied."""
    importer = Importer(
        engine, caller, target=target, namespace=merge_namespace(source), session_key=session_key, dry_run=dry_run
    )
    had_profile = await engine.read(lambda: target in engine.profiles.rows)
    tally = await importer.run([(n, r) for n, r in records if r["_type"] != "profile"])
    profiles = [(n, r) for n, r in records if r["_type"] == "profile"][:1]
    profile_copied = False
    if profiles and not had_profile:
        tally.profile_updated = False
        await importer.run(profiles)
        profile_copied = tally.profile_updated
    return tally, profile_copied


def merge_answer(args: MergeArgs, tally: Tally, *, profile_copied: bool, source_profile: bool) -> dict[str, Any]:
    """``merge_memories``' answer, before a move's deletions are added (CPersona's key order)."""
    body = tally.answer("merged")
    body.update(
        {
            "source_agent_id": args.source_agent_id,
            "target_agent_id": args.target_agent_id,
            "strategy": args.strategy,
            "mode": args.mode,
            "profile_copied": profile_copied,
            "skipped_profile": source_profile and not profile_copied,
        }
    )
    return {k: body[k] for k in _MERGE_ORDER if k in body} | body


async def merge_memories(engine: Engine, caller: Caller, args: MergeArgs) -> dict[str, Any]:
    """A saga of per-partition commands: stores into the target's partition, then (move)
    deletes in the source's. Re-running a merge that stopped midway finishes it."""
    refused = merge_refusal(args)
    if refused is not None:
        return refused
    _, records = await collect(engine, args.source_agent_id, include_embeddings=True, include_history=False)
    tally, profile_copied = await merge_into(
        engine,
        caller,
        merge_numbering(records),
        source=args.source_agent_id,
        target=args.target_agent_id,
        session_key=args.session_key,
        dry_run=args.dry_run,
    )
    source_profile = any(r["_type"] == "profile" for r in records)
    body = merge_answer(args, tally, profile_copied=profile_copied, source_profile=source_profile)
    if args.mode == "move" and not args.dry_run:
        body.update(
            await delete_moved(
                engine,
                caller,
                moved_records(records),
                tally.imported_refs,
                source=args.source_agent_id,
                target=args.target_agent_id,
                session_key=args.session_key,
            )
        )
    return body
