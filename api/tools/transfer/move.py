"""A move's second half: deleting at the source what a merge copied into the target."""

from __future__ import annotations

import asyncio
from typing import Any

from memstream.api.services.ports import Engine
from memstream.api.tools.registry import Caller
from memstream.api.tools.transfer.command_ids import Envelope, command_seed
from memstream.streams import commands as c
from memstream.streams.events import Actor, Scope, utcnow


def moved_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What ``delete_moved`` needs of the source's records: kind, id and lock."""
    return [
        {"_type": r["_type"], "id": r.get("id"), "locked": r.get("locked", 0)}
        for r in records
        if r["_type"] in ("memory", "episode")
    ]


async def delete_moved(
    engine: Engine,
    caller: Caller,
    records: list[dict[str, Any]],
    imported_refs: dict[str, int],
    *,
    source: str,
    target: str,
    session_key: str,
) -> dict[str, Any]:
    """Delete at the source what the target now holds (``imported_refs``: the source's refs
    the target's import answered for, freshly or as a retry). Locked memories stay (W5: a
    lock protects from deletion, whoever asks) and so does the profile (memstream has no
    profile delete short of ``delete_agent_data``): both are reported in ``left_at_source``.
    Each delete's command id is derived from the source, target and record, so a re-run
    decides the deletes done already as retries."""
    actor = Actor(client_id=caller.client_id, agent_id=source, session_id=session_key)
    commands: list[c.Command] = []
    for r in records:
        ref = f"{'mem' if r['_type'] == 'memory' else 'ep'}:{r.get('id')}"
        if ref not in imported_refs:
            continue
        env: Envelope = {
            "command_id": f"move:{command_seed(source, target, ref)}",
            "scope": Scope(agent_id=source),
            "actor": actor,
            "received_at": utcnow(),
        }
        if r["_type"] == "memory" and not r.get("locked"):
            commands.append(c.DeleteMemory(**env, memory_id=r["id"]))
        elif r["_type"] == "episode":
            commands.append(c.DeleteEpisode(**env, episode_id=r["id"]))
    results = await asyncio.gather(*(engine.submit(cmd) for cmd in commands))
    deleted = {"memories": 0, "episodes": 0}
    for cmd, done in zip(commands, results, strict=True):
        if done.outcome.result == "applied":
            deleted["memories" if isinstance(cmd, c.DeleteMemory) else "episodes"] += 1

    def left() -> dict[str, int]:
        return {
            "memories": len(engine.memories.by_agent.get(source, {})),
            "episodes": len(engine.episodes.by_agent.get(source, {})),
            "profiles": int(source in engine.profiles.rows),
        }

    return {
        "source_deleted": {
            "ok": True,
            "agent_id": source,
            "deleted_memories": deleted["memories"],
            "deleted_profiles": 0,
            "deleted_episodes": deleted["episodes"],
            "deleted_pending_tasks": 0,
        },
        "left_at_source": await engine.read(left),
    }
