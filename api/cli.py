"""The ``memstream`` command: serve, mcp, history, rebuild, reembed, tail."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import click
import orjson

from memstream.api.settings import Settings, SettingsError, load_settings


def _settings(data_dir: Path | None) -> Settings:
    try:
        return load_settings(data_dir=data_dir)
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from None


data_dir_option = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Data directory (default: $MEMSTREAM_DATA_DIR or ~/.local/share/memstream).",
)


@click.group()
@click.option("--log-level", default="INFO", show_default=True, help="Python logging level.")
def main(log_level: str) -> None:
    """memstream: event-sourced memory for fleets of AI agents."""
    # One BLAS thread (set before numpy loads): recall's matrix-vector products are small, and
    # on a 2-core machine shared with the server's own threads a BLAS pool costs more p99 than
    # it saves (docs/vectors.md).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@main.command()
@data_dir_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--port", default=8765, show_default=True, type=int)
def serve(data_dir: Path | None, host: str, port: int) -> None:
    """Serve the HTTP API and MCP (streamable HTTP, at /mcp) on the embedded log."""
    import uvicorn

    from memstream.api.acl import AclConfigError
    from memstream.api.auth import is_loopback
    from memstream.api.http_app import create_app

    settings = _settings(data_dir)
    try:
        app = create_app(settings)  # loads MEMSTREAM_ACL_FILE first: a bad file stops here
    except AclConfigError as exc:
        raise click.ClickException(f"refusing to start: {exc}") from None
    logger = logging.getLogger("memstream")
    if settings.acl_file is None and not is_loopback(host):
        logger.warning(
            "NETWORK-EXPOSED WITHOUT TOKENS: binding %s with no MEMSTREAM_ACL_FILE; anyone who can reach "
            "this port can read, write and delete every agent's memories (docs/security.md)",
            host,
        )
    elif settings.acl_file is not None:
        logger.info("ACL mode: bearer tokens from %s required on %s:%d", settings.acl_file, host, port)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


@main.command()
@data_dir_option
def mcp(data_dir: Path | None) -> None:
    """Serve MCP over stdio (one process per agent host is fine: they share the data dir)."""
    from memstream.api.acl import AclConfigError
    from memstream.api.mcp_server import run_stdio

    try:
        asyncio.run(run_stdio(_settings(data_dir)))
    except AclConfigError as exc:
        raise click.ClickException(f"refusing to start: {exc}") from None


@main.command()
@data_dir_option
@click.argument("ref", required=False)
@click.option("--agent", help="Every event of one agent instead of one memory.")
@click.option("--limit", default=1000, show_default=True)
def history(data_dir: Path | None, ref: str | None, agent: str | None, limit: int) -> None:
    """Print the history of a memory (mem:<id> / ep:<id>) or an agent, oldest first, as JSON lines."""
    from memstream.api.views import history_entry
    from memstream.projections.history import HistoryProjection
    from memstream.streams.runner import ProjectionRunner
    from memstream.streams.snapshots import SnapshotStore
    from memstream.streams.sqlite_log import SqliteLog

    if (ref is None) == (agent is None):
        raise click.UsageError("give either a REF (mem:<id>) or --agent")
    settings = _settings(data_dir)
    log = SqliteLog(settings.log_path, num_partitions=settings.partitions)
    try:
        if agent is not None:
            records = log.read(0, agent_id=agent, limit=limit)
        else:
            proj = HistoryProjection()
            runner = ProjectionRunner(log, [proj], SnapshotStore(settings.snapshot_dir))
            runner.restore()
            runner.catch_up()
            records = log.read_offsets(proj.of(str(ref))[:limit])
        for rec in records:
            click.echo(orjson.dumps(history_entry(rec)).decode())
    finally:
        log.close()


@main.command()
@data_dir_option
@click.option("--to-offset", type=int, default=None, help="Rebuild the state as of this offset (exclusive).")
@click.option("--no-save", is_flag=True, help="Only compare; don't replace the snapshots.")
def rebuild(data_dir: Path | None, to_offset: int | None, no_save: bool) -> None:
    """Replay the log from offset 0 into fresh projections; compare digests with the live ones."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from memstream.api.rebuild import rebuild_all

    settings = _settings(data_dir)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeRemainingColumn(),
        transient=False,
    ) as bar:
        tasks: dict[str, Any] = {}
        started = time.perf_counter()

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=max(total, 1), rate="")
            elapsed = max(time.perf_counter() - started, 1e-9)
            bar.update(tasks[stage], completed=done, total=max(total, 1), rate=f"{done / elapsed:,.0f} ev/s")

        report = rebuild_all(settings, stop=to_offset, save=not no_save and to_offset is None, progress=progress)
    click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    if not report["equal"]:
        sys.exit(1)


@main.command()
@data_dir_option
@click.option("--model", required=True, help="Embedder name of the new model (see docs/embedding.md).")
@click.option("--agent", "agents", multiple=True, help="Only this agent (repeatable; default: every agent).")
@click.option("--batch", default=64, show_default=True, type=click.IntRange(1, 1024), help="Records per model call.")
def reembed(data_dir: Path | None, model: str, agents: tuple[str, ...], batch: int) -> None:
    """Move agents' vectors to another embedding model.

    Safe beside a running server on the same data directory (recall keeps answering from the
    current model until each agent is complete) and safe to interrupt: run it again to go on.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from memstream.api.engine import Engine
    from memstream.api.reembed import Reembedder
    from memstream.streams.embedding import EmbeddingError, load_local_embedder

    settings = _settings(data_dir)
    try:
        target = load_local_embedder(model)
    except EmbeddingError as exc:
        raise click.UsageError(str(exc)) from None

    async def run() -> dict[str, Any]:
        engine = Engine(settings)
        await engine.start()
        try:
            columns = (TextColumn("[bold]re-embed"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
            with Progress(*columns) as bar:
                task = bar.add_task("re-embed", total=None)

                def progress(done: int, total: int) -> None:
                    bar.update(task, completed=done, total=max(total, 1))

                report = await Reembedder(engine, target, batch=batch, progress=progress).run(list(agents) or None)
            return report.to_dict()
        finally:
            await engine.close()

    report = asyncio.run(run())
    click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    if not report["complete"]:
        sys.exit(1)


@main.command()
@data_dir_option
@click.option("--from", "start", type=int, default=None, help="First offset (default: the last 10 events).")
@click.option("--agent", help="Only this agent's events.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new events as they are appended.")
@click.option("--audit", is_flag=True, help="Tail the audit trail (refused and skipped commands) instead.")
def tail(data_dir: Path | None, start: int | None, agent: str | None, follow: bool, audit: bool) -> None:
    """Print events (or audit records) as JSON lines."""
    from memstream.api.views import audit_entry, history_entry
    from memstream.streams.sqlite_log import SqliteLog

    settings = _settings(data_dir)
    log = SqliteLog(settings.log_path, num_partitions=settings.partitions)
    end = log.audit_end_offset if audit else log.end_offset
    read = log.read_audit if audit else log.read
    show = audit_entry if audit else history_entry
    pos = max(0, end() - 10) if start is None else start
    try:
        while True:
            records = read(pos, agent_id=agent, limit=1000)
            for rec in records:
                click.echo(orjson.dumps(show(rec)).decode())
                pos = rec.offset + 1
            if not records:
                if not follow:
                    return
                time.sleep(0.2)
    except KeyboardInterrupt:
        return
    finally:
        log.close()


if __name__ == "__main__":
    main()
