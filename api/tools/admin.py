"""Admin tools: re-embedding from inside a running server (the CLI runs the same job).

The job runs as a task of the server's event loop, so recall keeps answering while it works
(it reads the same read models under the same lock as every other read) and a status call
can watch it. Only one re-embed runs per server at a time; a second request while one is
running gets the running job's status back instead of starting a rival.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pydantic import Field, StrictInt, StrictStr

from memstream.api.services.embedding import EmbeddingError
from memstream.api.services.failures import mark_failure
from memstream.api.services.jobs import ReembedJob
from memstream.api.services.ports import Engine
from memstream.api.services.reembed import Reembedder
from memstream.api.tools.common import Flag
from memstream.api.tools.registry import Caller, Tool, ToolArgs, register

log = logging.getLogger(__name__)


class ReembedArgs(ToolArgs):
    model: StrictStr = Field(min_length=1, max_length=200, description="Embedder name of the new model.")
    agent_id: StrictStr | None = Field(
        default=None, max_length=256, description="Only this agent (default: every agent)."
    )
    batch: StrictInt = Field(default=64, ge=1, le=1024, description="Records per model call.")
    wait: Flag = Field(default=False, description="Answer when the job has finished instead of at once.")


class StatusArgs(ToolArgs):
    pass


async def reembed(engine: Engine, caller: Caller, args: ReembedArgs) -> dict[str, Any]:
    current = engine.jobs.get("reembed")
    if current is not None and current.task is not None and not current.task.done():
        mark_failure("conflict")
        return {"ok": False, "error": "a re-embed is already running", "job": current.status()}
    try:
        target = engine.embedder_for(args.model)
    except EmbeddingError as exc:
        return {"ok": False, "error": str(exc)}
    job = ReembedJob(target.model_id, [args.agent_id] if args.agent_id else None)

    def progress(done: int, total: int) -> None:
        job.done, job.total = done, total

    worker = Reembedder(engine, target, batch=args.batch, progress=progress, client_id=caller.client_id)

    async def run() -> None:
        try:
            job.result = (await worker.run(job.agents)).to_dict()
        except Exception as exc:  # the job's failure is its status, not a crash of the server
            log.exception("re-embed to %s failed", job.model)
            job.error = f"{type(exc).__name__}: {exc}"

    job.task = asyncio.create_task(run(), name=f"memstream-reembed-{job.model}")
    engine.jobs["reembed"] = job
    if args.wait:
        await asyncio.shield(job.task)
    return {"ok": True, "job": job.status()}


async def reembed_status(engine: Engine, caller: Caller, args: StatusArgs) -> dict[str, Any]:
    job = engine.jobs.get("reembed")
    return {"job": job.status() if job is not None else None}


for _tool in (
    Tool(
        "reembed",
        ReembedArgs,
        reembed,
        "memstream: move agents' vectors to another embedding model; recall keeps answering meanwhile.",
        writes=True,
        admin=True,
    ),
    Tool("reembed_status", StatusArgs, reembed_status, "memstream: progress of the current or last re-embed."),
):
    register(_tool)
