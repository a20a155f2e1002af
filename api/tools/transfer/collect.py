"""An agent's records as one read of the read models, with their history and vectors from the log."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import orjson

from memstream.api.services.ports import Engine, LogReads
from memstream.api.services.progress import Progress
from memstream.api.tools.transfer.batches import chunks
from memstream.api.tools.transfer.jsonl import export_header
from memstream.api.tools.transfer.vectors import vector_fields
from memstream.api.tools.views import history_entry
from memstream.streams.log.port import LogRecord, resolved


def _vector_of(records: list[LogRecord], model: str | None) -> tuple[str, bytes] | None:
    """The record's current vector: the last event that attached one of the row's model."""
    found: tuple[str, bytes] | None = None
    for rec in records:
        if rec.vector is None:
            continue
        emb = orjson.loads(rec.value)["payload"].get("embedding")
        if isinstance(emb, dict) and model is not None and emb.get("model") == model:
            found = (model, bytes(rec.vector))
    return found


async def collect(
    engine: Engine,
    agent_id: str,
    *,
    include_embeddings: bool,
    include_history: bool = True,
    progress: Progress | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and every record of an agent ('' = every agent), as of one read.
    ``progress`` hears how many records have their history and vector read from the log.

    ``engine`` is the embedded engine or, in Kafka mode, a worker's engine of one partition
    (api/kafka/worker/app.py): there '' means every agent of that partition, the offsets (the
    header's and the history's) are the partition's own, and the router joins the partitions'
    answers (api/kafka/router/transfers.py)."""

    def query() -> tuple[int, list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
        mem, eps, prof = engine.memories, engine.episodes, engine.profiles
        mem_ids = list(mem.by_agent.get(agent_id, {})) if agent_id else sorted(mem.rows)
        ep_ids = list(eps.by_agent.get(agent_id, {})) if agent_id else sorted(eps.rows)
        memories = []
        for i in mem_ids:
            r = mem.rows[i]
            memories.append(
                {
                    "_type": "memory",
                    "id": r.id,
                    "agent_id": r.agent_id,
                    "msg_id": r.msg_id,
                    "content": r.content,
                    "source": dict(r.source),
                    "timestamp": r.timestamp or r.created_at,  # the instant survives a re-import
                    "metadata": dict(r.metadata),
                    "created_at": r.created_at,
                    "project_id": r.project_id,
                    "channel": r.channel,
                    "locked": int(r.locked),
                    "_model": r.embedding_model,
                    "_offsets": list(engine.history.of(f"mem:{r.id}")),
                }
            )
        episodes = []
        for i in ep_ids:
            e = eps.rows[i]
            episodes.append(
                {
                    "_type": "episode",
                    "id": e.id,
                    "agent_id": e.agent_id,
                    "summary": e.summary,
                    "keywords": e.keywords,
                    "start_time": e.start_time,
                    "end_time": e.end_time,
                    "created_at": e.created_at,
                    "resolved": bool(e.resolved),
                    "project_id": e.project_id,
                    "channel": e.channel,
                    "metadata": dict(e.metadata),
                    "_model": e.embedding_model,
                    "_offsets": list(engine.history.of(f"ep:{e.id}")),
                }
            )
        agents = [agent_id] if agent_id else sorted(prof.rows)
        profiles = [
            {
                "_type": "profile",
                "agent_id": a,
                "user_id": "",
                "content": prof.rows[a].content,
                "updated_at": prof.rows[a].updated_at,
                "project_id": "",
            }
            for a in agents
            if a in prof.rows
        ]
        return engine.applied_offset, memories, episodes, profiles

    offset, memories, episodes, profiles = await engine.read(query)
    loop = asyncio.get_running_loop()

    def attach(chunk: list[dict[str, Any]], by_offset: dict[int, LogRecord]) -> None:
        for r in chunk:
            recs = [by_offset[o] for o in r.pop("_offsets") if o in by_offset]
            model = r.pop("_model")
            if include_history:
                r["history"] = [history_entry(rec) for rec in recs]
            if include_embeddings:
                found = _vector_of(recs, model)
                if found is not None:
                    r.update(vector_fields(*found))

    total, done = len(memories) + len(episodes) + len(profiles), 0
    if progress is not None:
        progress(done, total)
    for chunk in chunks(memories + episodes, 500):
        offsets = sorted({o for r in chunk for o in r["_offsets"] if o <= offset})
        by_offset = {rec.offset: rec for rec in await _records_at(engine.log, offsets)}
        await loop.run_in_executor(None, attach, chunk, by_offset)
        done += len(chunk)
        if progress is not None:
            progress(done, total)
    if progress is not None:
        progress(total, total)  # profiles need nothing from the log
    header = export_header(agent_id, memories, episodes, profiles, log_offset=offset)
    return header, memories + episodes + profiles


async def _records_at(log: LogReads, offsets: list[int]) -> list[LogRecord]:
    """The log records at ``offsets``: the embedded log reads its file (on a thread, as the
    loop must not wait on the disk); a Kafka worker's partition log reads the topic."""
    read = log.read_offsets
    if inspect.iscoroutinefunction(read):
        return await resolved(read(offsets))
    return await resolved(await asyncio.get_running_loop().run_in_executor(None, read, offsets))
