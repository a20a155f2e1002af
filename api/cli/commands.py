"""The ``memstream`` command: serve, mcp, history, rebuild, reembed, export, import, backup, restore,
tail, erase, keys, seal."""

from __future__ import annotations

import os

# One BLAS thread per process, before numpy is first imported (it reads these once). Our matrix
# work is small (at most a window of 10k rows per query), and OpenBLAS's idle threads spin: on
# a small machine every memstream process (workers, router, rebuild jobs, the broker beside
# them) ran at about half speed while another one used numpy. Set the variable to override.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
# Each command imports what it runs inside its own function: the composition root may import
# anything, and this way a command loads only its own stack (faust for `worker`, uvicorn for
# `serve`, the embedder's runtime for what embeds), after the settings above.

import asyncio  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import click  # noqa: E402
import orjson  # noqa: E402

from memstream.api.cli.arenas import limit_arenas  # noqa: E402
from memstream.api.cli.progress import progress_bar, progress_option  # noqa: E402
from memstream.api.services.settings import Settings, SettingsError, load_settings  # noqa: E402


def _stderr_console() -> Any:
    """Progress bars go to stderr: stdout carries the command's JSON report, for pipes."""
    from rich.console import Console

    return Console(stderr=True)


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


def kafka_options(*, required: bool) -> Callable[[Any], Any]:
    """The options naming a Kafka deployment (each also read from its MEMSTREAM_KAFKA_* variable)."""
    options = [
        click.option("--kafka", "bootstrap", envvar="MEMSTREAM_KAFKA_BOOTSTRAP", required=required, help="host:port"),
        click.option("--prefix", envvar="MEMSTREAM_KAFKA_PREFIX", default="memstream", show_default=True),
        click.option("--partitions", envvar="MEMSTREAM_KAFKA_PARTITIONS", default=16, type=click.IntRange(1, 10_000)),
        click.option("--replication", envvar="MEMSTREAM_KAFKA_REPLICATION", default=1, type=click.IntRange(1, 16)),
    ]

    def apply(command: Any) -> Any:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


def kafka_config(bootstrap: str, prefix: str, partitions: int, replication: int) -> Any:
    from memstream.streams.log.kafka import KafkaConfig

    return KafkaConfig(bootstrap=bootstrap, prefix=prefix, partitions=partitions, replication=replication)


@click.group()
@click.option("--log-level", default="INFO", show_default=True, help="Python logging level.")
def main(log_level: str) -> None:
    """memstream: event-sourced memory for fleets of AI agents."""
    # One BLAS thread (set before numpy loads): recall's matrix-vector products are small, and
    # on a 2-core machine shared with the server's own threads a BLAS pool costs more p99 than
    # it saves (docs/vectors.md).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from memstream.api.services.logs import configure

    try:
        configure(log_level, stream=sys.stderr)  # MEMSTREAM_LOG_FORMAT=json for JSON lines
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


@main.command()
@data_dir_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--port", default=8765, show_default=True, type=int)
@kafka_options(required=False)
def serve(
    data_dir: Path | None, host: str, port: int, bootstrap: str | None, prefix: str, partitions: int, replication: int
) -> None:
    """Serve the HTTP API and MCP (streamable HTTP, at /mcp) on the embedded log; with --kafka,
    the HTTP API of a Kafka deployment (calls routed to the `memstream worker` owning each agent)."""
    limit_arenas(os.environ)
    from memstream.api.cli.banner import Served, serve_app
    from memstream.api.faces.http import create_app
    from memstream.api.services.acl import AclConfigError, load_configured

    settings = _settings(data_dir)
    if bootstrap:
        from memstream.api.kafka.router.app import router_app

        try:
            acl = load_configured(settings)  # as embedded: a bad file stops here, before Kafka is reached
        except AclConfigError as exc:
            raise click.ClickException(f"refusing to start: {exc}") from None
        _bind_notice(settings, host, port)
        cfg = kafka_config(bootstrap, prefix, partitions, replication)
        from memstream.streams.keys.master import MasterKeyError

        try:
            app = router_app(cfg, host=host, acl=acl, settings=settings)
        except MasterKeyError as exc:  # Kafka mode needs the deployment's master key
            raise click.ClickException(f"refusing to start: {exc}") from None
        kafka = f"{bootstrap}, topics {prefix}.*, {partitions} partitions"
        serve_app(app, host, port, Served("kafka", kafka, settings.acl_file))
        return
    try:
        app = create_app(settings, host=host)  # loads MEMSTREAM_ACL_FILE first: a bad file stops here
    except AclConfigError as exc:
        raise click.ClickException(f"refusing to start: {exc}") from None
    _bind_notice(settings, host, port)
    serve_app(app, host, port, Served("embedded", str(settings.data_dir), settings.acl_file))


def _bind_notice(settings: Settings, host: str, port: int) -> None:
    """Warn when the API binds a routable interface without tokens (both modes alike)."""
    from memstream.api.faces.auth import is_loopback

    logger = logging.getLogger("memstream")
    if settings.acl_file is None and not is_loopback(host):
        logger.warning(
            "NETWORK-EXPOSED WITHOUT TOKENS: binding %s with no MEMSTREAM_ACL_FILE; anyone who can reach "
            "this port can read, write and delete every agent's memories (docs/security.md)",
            host,
        )
    elif settings.acl_file is not None:
        logger.info("ACL mode: bearer tokens from %s required on %s:%d", settings.acl_file, host, port)


@main.command()
@data_dir_option
@kafka_options(required=False)
def mcp(data_dir: Path | None, bootstrap: str | None, prefix: str, partitions: int, replication: int) -> None:
    """Serve MCP over stdio (one process per agent host is fine: they share the data dir); with
    --kafka, every call goes to the `memstream worker` owning its agent."""
    limit_arenas(os.environ)
    from memstream.api.cli.mcp_stdio import serve_stdio
    from memstream.api.services.acl import AclConfigError
    from memstream.streams.keys.master import MasterKeyError

    cfg = kafka_config(bootstrap, prefix, partitions, replication) if bootstrap else None
    try:
        asyncio.run(serve_stdio(_settings(data_dir), kafka=cfg))
    except (AclConfigError, MasterKeyError) as exc:
        raise click.ClickException(f"refusing to start: {exc}") from None


@main.command()
@data_dir_option
@click.argument("ref", required=False)
@click.option("--agent", help="Every event of one agent instead of one memory.")
@click.option("--limit", default=1000, show_default=True)
def history(data_dir: Path | None, ref: str | None, agent: str | None, limit: int) -> None:
    """Print the history of a memory (mem:<id> / ep:<id>) or an agent, oldest first, as JSON lines."""
    from memstream.api.tools.views import history_entry
    from memstream.projections.catalog import HISTORY
    from memstream.projections.history import HistoryProjection
    from memstream.projections.runner import ProjectionRunner
    from memstream.streams.log.sqlite import SqliteLog
    from memstream.streams.snapshots import SnapshotStore

    if (ref is None) == (agent is None):
        raise click.UsageError("give either a REF (mem:<id>) or --agent")
    settings = _settings(data_dir)
    log = SqliteLog(settings.log_path, num_partitions=settings.partitions)
    try:
        if agent is not None:
            records = log.read(0, agent_id=agent, limit=limit)
        else:
            runner = ProjectionRunner(log, [HistoryProjection], SnapshotStore(settings.snapshot_dir))
            runner.restore()
            runner.catch_up()
            offsets = runner.get(HISTORY).of(str(ref))
            first = log.read_offsets(offsets[:1])
            if first:  # an erasure of everything of the agent names no record: the history adds it
                agent = history_entry(first[0])["scope"]["agent_id"]
                offsets = sorted({*offsets, *runner.get(HISTORY).erasures_after(agent, offsets[0])})
            records = log.read_offsets(offsets[:limit])
        for rec in records:
            click.echo(orjson.dumps(history_entry(rec)).decode())
    finally:
        log.close()


@main.command()
@data_dir_option
@click.option("--to-offset", type=int, default=None, help="Rebuild the state as of this offset (exclusive).")
@click.option("--no-save", is_flag=True, help="Only compare; don't replace the snapshots.")
@kafka_options(required=False)
@click.option("--partition", "partition_ids", type=int, multiple=True, help="Kafka: only this partition (repeatable).")
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Kafka: processes folding partitions in parallel (default: one per CPU).",
)
def rebuild(
    data_dir: Path | None,
    to_offset: int | None,
    no_save: bool,
    bootstrap: str | None,
    prefix: str,
    partitions: int,
    replication: int,
    partition_ids: tuple[int, ...],
    jobs: int | None,
) -> None:
    """Replay the log from offset 0 into fresh projections; compare digests with the live ones.

    With --kafka: fold partitions of the events topic from offset 0 (up to --to-offset within
    each) and print each read model's digest per partition, to compare with a worker's
    GET /digests."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from memstream.api.services.rebuild import rebuild_all

    if bootstrap:
        from memstream.api.kafka.worker.replay import rebuild_partitions
        from memstream.streams.keys.kafka import kafka_master_key
        from memstream.streams.keys.master import MasterKeyError

        try:
            kafka_master_key(os.environ)  # the events are sealed: opening them needs the deployment's key
        except MasterKeyError as exc:
            raise click.ClickException(str(exc)) from None
        cfg = kafka_config(bootstrap, prefix, partitions, replication)
        columns = (TextColumn("[bold]events"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*columns, console=_stderr_console()) as bar:
            task = bar.add_task("events", total=None)
            report = asyncio.run(
                rebuild_partitions(
                    cfg,
                    list(partition_ids) or None,
                    stop=to_offset,
                    progress=lambda done, total: bar.update(task, completed=done, total=max(total, 1)),
                    jobs=jobs or os.cpu_count() or 1,
                )
            )
        click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode())
        return
    settings = _settings(data_dir)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeRemainingColumn(),
        transient=False,
        console=_stderr_console(),
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
    if not report["equal"] and "erasure_meanwhile" in report:
        # Its sides may have opened an erased record on either side of its keys' destruction:
        # no finding either way. EX_TEMPFAIL, so a script can tell it from a real difference.
        click.echo(f"rebuild: {report['erasure_meanwhile']}; nothing was saved, run it again", err=True)
        sys.exit(75)
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

    from memstream.api.services.embedding import EmbeddingError, load_local_embedder
    from memstream.api.services.engine import EmbeddedEngine
    from memstream.api.services.reembed import Reembedder

    settings = _settings(data_dir)
    try:
        target = load_local_embedder(model)
    except EmbeddingError as exc:
        raise click.UsageError(str(exc)) from None

    async def run() -> dict[str, Any]:
        engine = EmbeddedEngine(settings)
        await engine.start()
        try:
            columns = (TextColumn("[bold]re-embed"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
            with Progress(*columns, console=_stderr_console()) as bar:
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


@main.command("export")
@data_dir_option
@click.option("--agent", default="", help="The agent to export (default: every agent).")
@click.option("--embeddings/--no-embeddings", default=True, show_default=True, help="Write each record's vector.")
@click.option("--history/--no-history", default=True, show_default=True, help="Write each record's events.")
@progress_option
def export_(data_dir: Path | None, agent: str, embeddings: bool, history: bool, show_progress: bool | None) -> None:
    """Write an agent's memories, episodes and profile to stdout as JSONL (CPersona's export
    format, plus each record's history and vector). Safe beside running servers."""
    from memstream.api.services.engine import EmbeddedEngine
    from memstream.api.tools.transfer.collect import collect
    from memstream.api.tools.transfer.jsonl import dump_lines

    settings = _settings(data_dir)

    async def run() -> None:
        engine = EmbeddedEngine(settings)
        await engine.start()
        try:
            with progress_bar("export", unit="records", show=show_progress) as progress:
                header, records = await collect(
                    engine, agent, include_embeddings=embeddings, include_history=history, progress=progress
                )
        finally:
            await engine.close()
        out = sys.stdout.buffer
        out.writelines(dump_lines(header, records))
        out.flush()
        click.echo(
            f"exported {header['memory_count']} memories, {header['episode_count']} episodes, "
            f"{header['profile_count']} profiles (log offset {header['log_offset']})",
            err=True,
        )

    asyncio.run(run())


@main.command("import")
@data_dir_option
@click.argument("file", type=click.File("rb"))
@click.option("--target-agent", default="", help="Import every record into this agent (default: the file's).")
@click.option("--dry-run", is_flag=True, help="Count what would be imported; write nothing.")
@progress_option
def import_(data_dir: Path | None, file: Any, target_agent: str, dry_run: bool, show_progress: bool | None) -> None:
    """Import a JSONL export (FILE, or - for stdin) through the normal write rules. Importing
    the same file again changes nothing; an interrupted import is finished by running it again."""
    from memstream.api.services.engine import EmbeddedEngine
    from memstream.api.tools.registry import Caller
    from memstream.api.tools.transfer.importing import import_file

    settings = _settings(data_dir)
    raw = file.read()

    async def run() -> dict[str, Any]:
        engine = EmbeddedEngine(settings)
        await engine.start()
        try:
            with progress_bar("import", unit="records", show=show_progress) as progress:
                caller = Caller(client_id="cli")
                return await import_file(engine, caller, raw, target=target_agent, dry_run=dry_run, progress=progress)
        finally:
            await engine.close()

    report = asyncio.run(run())
    click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    if not report.get("ok"):
        sys.exit(1)


@main.command()
@data_dir_option
@click.argument("dest", type=click.Path(path_type=Path))
@progress_option
def backup(data_dir: Path | None, dest: Path, show_progress: bool | None) -> None:
    """Online backup of the log into DEST (a new data directory), while servers keep writing.

    The copy is one consistent point of the log (SQLite's backup API under a read
    transaction); every write acknowledged before it started is in it."""
    from memstream.api.services.backup import BackupError, backup_log

    settings = _settings(data_dir)
    try:
        with progress_bar("backup", unit="bytes", show=show_progress) as progress:
            report = backup_log(settings, dest, progress)
    except BackupError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())


@main.command()
@data_dir_option
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@progress_option
def restore(data_dir: Path | None, source: Path, show_progress: bool | None) -> None:
    """Restore a backup (a data directory or a log.sqlite3 file made by `memstream backup`)
    into an empty data directory. Servers on it must be stopped; the next start replays."""
    from memstream.api.services.backup import BackupError, restore_log

    settings = _settings(data_dir)
    try:
        with progress_bar("restore", unit="bytes", show=show_progress) as progress:
            report = restore_log(source, settings, progress)
    except BackupError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())


@main.command()
@kafka_options(required=True)
@click.option("--session-timeout", default=10.0, show_default=True, help="Seconds before a silent worker is replaced.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface of the worker's query server.")
@click.option("--port", default=0, show_default=True, type=int, help="Port of the query server (0: any free one).")
def worker(
    bootstrap: str, prefix: str, partitions: int, replication: int, session_timeout: float, host: str, port: int
) -> None:
    """Run a Kafka-mode worker: decider (faust) + read models + query server for its partitions.

    Start several: they split the partitions, and `memstream serve --kafka` routes each call to
    the worker that owns its agent."""
    limit_arenas(os.environ)
    from memstream.api.faces.auth import is_loopback
    from memstream.api.kafka.worker.app import run_worker
    from memstream.streams.keys.master import MasterKeyError
    from memstream.streams.log.kafka import KafkaLogError

    settings = _settings(None)
    if settings.worker_token is None and not is_loopback(host):
        logging.getLogger("memstream").warning(
            "NETWORK-EXPOSED WORKER WITHOUT A TOKEN: binding %s with no MEMSTREAM_WORKER_TOKEN; anyone who can "
            "reach this port can act as any client on its agents, past the routers' access control "
            "(docs/security.md)",
            host,
        )
    try:
        run_worker(
            kafka_config(bootstrap, prefix, partitions, replication),
            settings,
            host=host,
            port=port,
            loglevel=logging.getLevelName(logging.getLogger().level),
            session_timeout_s=session_timeout,
        )
    except (KafkaLogError, MasterKeyError) as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
@data_dir_option
@click.option("--from", "start", type=int, default=None, help="First offset (default: the last 10 events).")
@click.option("--agent", help="Only this agent's events.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new events as they are appended.")
@click.option("--audit", is_flag=True, help="Tail the audit trail (refused and skipped commands) instead.")
def tail(data_dir: Path | None, start: int | None, agent: str | None, follow: bool, audit: bool) -> None:
    """Print events (or audit records) as JSON lines."""
    from memstream.api.tools.views import audit_entry, history_entry
    from memstream.streams.log.sqlite import SqliteLog

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


@main.command()
@data_dir_option
@click.option("--agent", "agent_id", required=True, help="The agent whose data is erased.")
@click.option("--memory", "memory_id", type=int, default=None, help="Erase this memory.")
@click.option("--ref", default=None, help="Erase this record (mem:<id> or ep:<id>).")
@click.option("--source", default=None, help="Erase the agent's memories of this source id.")
@click.option("--all", "everything", is_flag=True, help="Erase everything of the agent.")
@click.option("--reason", required=True, help="Why (kept in the clear in the log: name no one).")
def erase(
    data_dir: Path | None,
    agent_id: str,
    memory_id: int | None,
    ref: str | None,
    source: str | None,
    everything: bool,
    reason: str,
) -> None:
    """Erase a record, one source's memories, or all of an agent's data, for good: its keys are
    destroyed, so nothing of it stays readable in the log, checkpoints or later backups
    (docs/erasure.md). Prints what was erased and what sealing could not reach."""
    from memstream.api.services.engine import EmbeddedEngine
    from memstream.api.tools.dispatch import dispatch
    from memstream.api.tools.registry import Caller

    chosen = [x for x in (memory_id is not None, ref is not None, source is not None, everything) if x]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --memory, --ref, --source and --all")
    settings = _settings(data_dir)
    args: dict[str, Any] = {"agent_id": agent_id, "reason": reason}
    if memory_id is not None or ref is not None:
        tool = "erase_memory"
        args.update({"memory_id": memory_id} if memory_id is not None else {"ref": ref})
    else:
        tool = "erase_agent_data"
        if source is not None:
            args["source"] = source

    async def run() -> dict[str, Any]:
        engine = EmbeddedEngine(settings)
        await engine.start()
        try:
            return await dispatch(engine, Caller(client_id="cli"), tool, args)
        finally:
            await engine.close()

    report = asyncio.run(run())
    click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    if not report.get("ok"):
        sys.exit(1)


@main.group()
def keys() -> None:
    """The key store that seals the log (docs/security.md)."""


@keys.command("rotate")
@data_dir_option
@click.option(
    "--new-key-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The new master key (base64 of 32 bytes). Default: a new one replaces the data directory's master.key.",
)
@progress_option
@kafka_options(required=False)
def keys_rotate(
    data_dir: Path | None,
    new_key_file: Path | None,
    show_progress: bool | None,
    bootstrap: str | None,
    prefix: str,
    partitions: int,
    replication: int,
) -> None:
    """Re-wrap every data key under a new master key (only the key store changes; the log is
    not rewritten). Stop the servers on the data directory first.

    With --kafka: the deployment's keys topic, from the key MEMSTREAM_MASTER_KEY or _FILE gives
    to the key in --new-key-file (required); stop every worker and router first, and start them
    with the new key."""
    from memstream.streams.keys.rotation import rotate_master_key

    if bootstrap:
        _rotate_kafka(kafka_config(bootstrap, prefix, partitions, replication), new_key_file, show_progress)
        return
    settings = _settings(data_dir)
    with progress_bar("keys", unit="keys", show=show_progress) as progress:
        report = rotate_master_key(settings.log_path, new_key_file, progress)
    click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())


def _rotate_kafka(cfg: Any, new_key_file: Path | None, show_progress: bool | None) -> None:
    from memstream.streams.keys.kafka import KeysUnavailable
    from memstream.streams.keys.master import MasterKeyError
    from memstream.streams.keys.rotation import rotate_kafka_master_key

    if new_key_file is None:
        raise click.UsageError("--kafka needs --new-key-file: every process of the deployment must get the new key")
    try:
        with progress_bar("keys", unit="keys", show=show_progress) as progress:
            report = rotate_kafka_master_key(cfg, new_key_file, progress)
    except (MasterKeyError, KeysUnavailable) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())


@main.command()
@data_dir_option
@progress_option
@kafka_options(required=False)
@click.option("--new-prefix", default=None, help="Kafka: the prefix of the sealed topics to write.")
@click.option("--delete-old", is_flag=True, help="Kafka: delete the old prefix's topics once the copy verified.")
def seal(
    data_dir: Path | None,
    show_progress: bool | None,
    bootstrap: str | None,
    prefix: str,
    partitions: int,
    replication: int,
    new_prefix: str | None,
    delete_old: bool,
) -> None:
    """Bring a log written before sealing under it: replay it into a new sealed log (the same
    offsets, so ids and digests stay equal; records erased before come out erased), verify it,
    then replace the old log and overwrite its bytes (docs/erasure.md, "Migration"). Stop the
    servers on the data directory first.

    With --kafka: replay the deployment's topics into sealed ones under --new-prefix (the
    master key from MEMSTREAM_MASTER_KEY or _FILE); stop every worker and router first."""
    from memstream.api.services.seal_migration import SealError, seal_data_dir

    if bootstrap:
        cfg = kafka_config(bootstrap, prefix, partitions, replication)
        from memstream.api.kafka.worker.checkpoints import checkpoint_dir

        # With --delete-old, this machine's worker checkpoints of the old topics go too.
        checkpoints = checkpoint_dir(_settings(data_dir).data_dir, cfg, 0).parent
        _seal_kafka(cfg, new_prefix, delete_old, checkpoints, show_progress)
        return
    settings = _settings(data_dir)
    with progress_bar("seal", unit="records", show=show_progress) as progress:

        def stages(stage: str, done: int, total: int) -> None:
            # One bar over both passes (seal every record, then read each back to verify it).
            if stage != "digests":
                progress(done + (total if stage == "verify" else 0), 2 * total)

        try:
            report = seal_data_dir(settings, stages)
        except SealError as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())


def _seal_kafka(
    cfg: Any, new_prefix: str | None, delete_old: bool, old_checkpoints: Path, show_progress: bool | None
) -> None:
    from memstream.api.services.kafka_seal_migration import KafkaSealError, seal_topics
    from memstream.streams.keys.kafka import kafka_master_key
    from memstream.streams.keys.master import MasterKeyError

    if not new_prefix:
        raise click.UsageError("--kafka needs --new-prefix: the sealed topics are written beside the old ones")
    try:
        master, _ = kafka_master_key(os.environ)
        with progress_bar("seal", unit="records", show=show_progress) as progress:
            migration = seal_topics(
                cfg, new_prefix, master, delete_old=delete_old, old_checkpoints=old_checkpoints, progress=progress
            )
            report = asyncio.run(migration)
    except (KafkaSealError, MasterKeyError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
