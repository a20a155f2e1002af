"""Whether the store holds a record already: what an import counts as skipped rather than written."""

from __future__ import annotations

from memstream.api.services.ports import Engine, Reads
from memstream.api.tools.sanitize import parse_timestamp
from memstream.streams import commands as c


def decided_already(engine: Engine, cmd: c.Command) -> bool:
    """Whether this command id was decided already (a dry run's guess at "skipped")."""
    state = engine.decision_state
    agent = None if state is None else state.agents.get(cmd.scope.agent_id)  # a lookup adds no agent
    return agent is not None and cmd.command_id in agent.commands


async def episode_exists(engine: Reads, cmd: c.ArchiveEpisode) -> bool:
    """Whether the agent has a live episode equal to the one ``cmd`` archives (episodes have no
    dedup rule of their own: an equal live one is this one)."""
    scope = cmd.scope
    start = cmd.start_time.isoformat() if cmd.start_time else None

    def query() -> bool:
        rows = engine.episodes.rows
        for i in engine.episodes.by_agent.get(scope.agent_id, {}):
            e = rows[i]
            if (e.summary, e.project_id, e.channel) == (cmd.summary, scope.project_id, scope.channel) and (
                start is None or e.start_time is None or parse_timestamp(e.start_time) == cmd.start_time
            ):
                return True
        return False

    return bool(await engine.read(query))


async def duplicate_memory(engine: Reads, cmd: c.StoreMemory) -> bool:
    """Whether the store rule would skip ``cmd`` as a duplicate (same content, or same msg_id)."""

    def query() -> bool:
        rows = engine.memories.rows
        for i in engine.memories.by_agent.get(cmd.scope.agent_id, {}):
            r = rows[i]
            if r.content == cmd.content and r.project_id in ("", cmd.scope.project_id):
                return True
            if cmd.msg_id is not None and r.msg_id == cmd.msg_id and r.project_id in ("", cmd.scope.project_id):
                return True
        return False

    return bool(await engine.read(query))
