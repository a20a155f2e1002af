"""Admin tools that move memories between agents and stores: ``export_memories``,
``import_memories`` and ``merge_memories`` (CPersona 2.6's argument names and answer shapes).

The file is CPersona's JSONL export (a ``header`` line, then ``memory``, ``episode`` and
``profile`` records), which memstream extends per record with ``history`` (the record's events,
oldest first, vectors summarised) and, with ``include_embeddings``, the vector as
``embedding_b64`` (raw little-endian float32, as CPersona writes it) with its
``embedding_model``. A reader that does not know a key ignores it.

Imports and merges never write the log directly: every record becomes the command a caller
would send (store, archive_episode, update_profile) and goes through the same deciders, so
dedup, locks, model checks and the audit trail hold. Each command's id is derived from the
record it came from (``Importer._env``), so importing a file again, or resuming an import
that was interrupted, decides every record as a retry (W9): it appends nothing and is counted
as skipped.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import inspect
import os
import tempfile
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from pydantic import Field, StrictStr

from memstream.api.tools.common import CommandId, Flag, SessionKey
from memstream.api.tools.registry import Caller, Tool, ToolArgs, register
from memstream.api.tools.sanitize import (
    InputError,
    cap,
    check_size,
    check_utf8,
    clean_text,
    normalize_source,
    parse_timestamp,
)
from memstream.api.tools.views import history_entry
from memstream.streams import commands as c
from memstream.streams.events import Actor, Embedding, Scope, utcnow
from memstream.streams.log.port import LogRecord, resolved

FORMAT = "cpersona-export/1.1"
CHUNK = 64  # records per embedding call and per burst of commands (the bus batches them)
MAX_IMPORT_BYTES = 512 * 1024 * 1024


# -- paths ----------------------------------------------------------------------------------


def export_root(settings: Any) -> Path:
    """Where the tools may read and write files: ``MEMSTREAM_EXPORT_DIR`` or ``<data dir>/exports``."""
    root = os.environ.get("MEMSTREAM_EXPORT_DIR")
    return Path(root) if root else settings.data_dir / "exports"


def confine(settings: Any, raw: str) -> Path | None:
    """``raw`` resolved inside the export root, or None (absolute elsewhere, ``..``, a link out)."""
    if not raw or "\x00" in raw:
        return None
    root = export_root(settings).resolve()
    path = Path(raw)
    if ".." in path.parts:
        return None
    full = (path if path.is_absolute() else root / path).resolve()
    return full if full.is_relative_to(root) and full != root else None


# -- export ---------------------------------------------------------------------------------


def command_seed(*parts: Any) -> str:
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _vector_of(records: list[Any], model: str | None) -> tuple[str, bytes] | None:
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
    engine: Any, agent_id: str, *, include_embeddings: bool, include_history: bool = True
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and every record of an agent ('' = every agent), as of one read.

    ``engine`` is the embedded engine or, in Kafka mode, a worker's engine of one partition
    (api/kafka/worker/node.py): there '' means every agent of that partition, the offsets (the
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
                    r["embedding_b64"] = base64.b64encode(found[1]).decode("ascii")
                    r["embedding_model"] = found[0]

    for chunk in _chunks(memories + episodes, 500):
        offsets = sorted({o for r in chunk for o in r["_offsets"] if o <= offset})
        by_offset = {rec.offset: rec for rec in await _records_at(engine, offsets)}
        await loop.run_in_executor(None, attach, chunk, by_offset)
    header = export_header(agent_id, memories, episodes, profiles, log_offset=offset)
    return header, memories + episodes + profiles


async def _records_at(engine: Any, offsets: list[int]) -> list[LogRecord]:
    """The log records at ``offsets``: the embedded log reads its file (on a thread, as the
    loop must not wait on the disk); a Kafka worker's partition log reads the topic."""
    read = engine.log.read_offsets
    if inspect.iscoroutinefunction(read):
        return await resolved(read(offsets))
    records: list[LogRecord] = await asyncio.get_running_loop().run_in_executor(None, read, offsets)
    return records


def export_header(
    agent_id: str,
    memories: list[dict[str, Any]],
    episodes: list[dict[str, Any]],
    profiles: list[dict[str, Any]],
    **position: Any,
) -> dict[str, Any]:
    """A file's header: counts of the records it holds (``check_counts`` refuses a file cut
    short by them) and ``position``, the point of the log the records show: ``log_offset``
    on the embedded log, ``log_offsets`` per partition in Kafka mode."""
    return {
        "_type": "header",
        "version": FORMAT,
        "agent_id": agent_id,
        "exported_at": datetime.now(UTC).isoformat(),
        "memory_count": len(memories),
        "episode_count": len(episodes),
        "has_profile": bool(profiles),
        "profile_count": len(profiles),
        "producer": "memstream",
        **position,
    }


def _chunks(items: list[Any], n: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def dump_lines(header: dict[str, Any], records: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    yield orjson.dumps(header) + b"\n"
    for r in records:
        yield orjson.dumps(r) + b"\n"


class ExportArgs(ToolArgs):
    agent_id: StrictStr = Field(max_length=256, description="The agent to export ('' = every agent).")
    output_path: StrictStr = Field(max_length=4096, description="File under the export directory.")
    include_embeddings: Flag = Field(default=False, description="Write each record's vector (base64 float32).")


def path_refusal(kind: str, raw: str) -> dict[str, Any]:
    return {"ok": False, "error": f"{kind} rejected (path traversal or outside export dir): {raw}"}


async def write_export(
    raw_path: str, path: Path, header: dict[str, Any], records: list[dict[str, Any]]
) -> dict[str, Any]:
    """Write an export file at ``path`` (confined already) and answer as ``export_memories``.
    The file appears whole or not at all: written to a temporary file beside it, synced, then
    renamed over it, so a reader never sees a half-written export."""

    def write() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".tmp.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.writelines(dump_lines(header, records))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    try:
        await asyncio.get_running_loop().run_in_executor(None, write)
    except OSError as exc:
        return {"ok": False, "error": f"could not write {raw_path}: {exc.strerror or exc}"}
    return {
        "ok": True,
        "path": raw_path,
        "memories": header["memory_count"],
        "episodes": header["episode_count"],
        "profiles": header["profile_count"],
    }


async def export_memories(engine: Any, caller: Caller, args: ExportArgs) -> dict[str, Any]:
    path = confine(engine.settings, args.output_path)
    if path is None:
        return path_refusal("output_path", args.output_path)
    header, records = await collect(engine, args.agent_id, include_embeddings=args.include_embeddings)
    return await write_export(args.output_path, path, header, records)


# -- import ---------------------------------------------------------------------------------


class Tally:
    def __init__(self, dry_run: bool) -> None:
        self.dry_run = dry_run
        self.imported_memories = self.skipped_memories = 0
        self.imported_episodes = self.skipped_episodes = 0
        self.profile_updated = False
        self.errors: list[str] = []
        self.imported_refs: dict[str, int] = {}  # source "mem:<id>" -> the id it has now (merge's move)

    def answer(self, prefix: str = "imported") -> dict[str, Any]:
        body: dict[str, Any] = {
            "ok": True,
            "dry_run": self.dry_run,
            f"{prefix}_memories": self.imported_memories,
            "skipped_memories": self.skipped_memories,
            f"{prefix}_episodes": self.imported_episodes,
            "skipped_episodes": self.skipped_episodes,
        }
        if self.errors:
            body["errors"] = self.errors[:100] + ([f"... and {len(self.errors) - 100} more"] * (len(self.errors) > 100))
        return body

    def as_dict(self) -> dict[str, Any]:
        """Everything counted, errors uncut: a part of an import run elsewhere (Kafka mode runs
        each partition's records on its worker), for ``add`` to join into the whole."""
        return {
            "imported_memories": self.imported_memories,
            "skipped_memories": self.skipped_memories,
            "imported_episodes": self.imported_episodes,
            "skipped_episodes": self.skipped_episodes,
            "profile_updated": self.profile_updated,
            "errors": list(self.errors),
            "imported_refs": dict(self.imported_refs),
        }

    def add(self, part: dict[str, Any]) -> None:
        """Join a part's ``as_dict`` into this tally."""
        self.imported_memories += int(part["imported_memories"])
        self.skipped_memories += int(part["skipped_memories"])
        self.imported_episodes += int(part["imported_episodes"])
        self.skipped_episodes += int(part["skipped_episodes"])
        self.profile_updated = self.profile_updated or bool(part["profile_updated"])
        self.errors.extend(str(e) for e in part["errors"])
        self.imported_refs.update({str(k): int(v) for k, v in part["imported_refs"].items()})


def parse_lines(raw: bytes) -> tuple[dict[str, Any] | None, list[tuple[int, dict[str, Any]]], list[str]]:
    """(header, [(line number, record)], errors). Lines are split on '\\n' only: U+2028 is
    legal inside a JSON string."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"the file is not UTF-8: {exc}") from None
    header, records, errors = None, [], []
    for n, line in enumerate(text.split("\n"), 1):
        line = line.strip()
        if not line:
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            errors.append(f"Line {n}: invalid JSON: {exc}")
            continue
        if not isinstance(rec, dict):
            errors.append(f"Line {n}: not a JSON object")
        elif rec.get("_type") == "header":
            header = rec
        else:
            records.append((n, rec))
    return header, records, errors


def check_counts(header: dict[str, Any] | None, records: list[tuple[int, dict[str, Any]]]) -> str | None:
    """A file cut short (torn copy, full disk) is refused whole rather than half imported."""
    if header is None:
        return None
    for kind, key in (("memory", "memory_count"), ("episode", "episode_count"), ("profile", "profile_count")):
        want = header.get(key)
        have = sum(1 for _, r in records if r.get("_type") == kind)
        if isinstance(want, int) and not isinstance(want, bool) and want != have:
            return f"the header announces {want} {kind} records and the file holds {have}: truncated or edited"
    return None


IMPORTED_KINDS = ("memory", "episode", "profile")
NOT_IMPORTED_KINDS = ("entity", "mention", "relation", "folder", "folder_member")


def split_types(
    records: list[tuple[int, dict[str, Any]]],
) -> tuple[dict[str, list[tuple[int, dict[str, Any]]]], list[str]]:
    """The records by kind (memory, episode, profile; each in file order), and an error for
    each record of a kind memstream does not import."""
    typed: dict[str, list[tuple[int, dict[str, Any]]]] = {kind: [] for kind in IMPORTED_KINDS}
    errors = []
    for n, rec in records:
        kind = rec.get("_type")
        if kind in typed:
            typed[kind].append((n, rec))
        elif kind in NOT_IMPORTED_KINDS:
            errors.append(f"Line {n}: {kind} records are not imported by memstream (declare them again)")
        else:
            errors.append(f"Line {n}: unknown type {kind!r}")
    return typed, errors


def record_agent(rec: dict[str, Any], target: str) -> str:
    """The agent a record lands in: ``target`` when given, else the record's own."""
    aid = target or rec.get("agent_id")
    if not isinstance(aid, str) or not aid or len(aid) > 256:
        raise InputError("no agent: the record has no agent_id and no target_agent_id was given")
    check_utf8(aid, "agent_id")
    return aid


class Importer:
    """Turns records into commands and submits them, CHUNK at a time."""

    def __init__(
        self, engine: Any, caller: Caller, *, target: str, namespace: str, session_key: str, dry_run: bool
    ) -> None:
        self.engine = engine
        self.caller = caller
        self.target = target
        self.namespace = namespace
        self.session_key = session_key
        self.tally = Tally(dry_run)
        self._models: dict[str, str | None] = {}

    def _env(self, rec: dict[str, Any], aid: str, kind: str) -> dict[str, Any]:
        project, channel = rec.get("project_id") or "", rec.get("channel") or ""
        if not isinstance(project, str) or not isinstance(channel, str):
            raise InputError("project_id and channel must be strings")
        seed = {k: v for k, v in rec.items() if k not in ("history", "embedding_b64", "embedding_model")}
        return {
            "command_id": f"{self.namespace}:{command_seed(aid, kind, seed)}",
            "scope": Scope(agent_id=aid, project_id=project, channel=channel),
            "actor": Actor(client_id=self.caller.client_id, agent_id=aid, session_id=self.session_key),
            "received_at": utcnow(),
        }

    async def _model_for(self, aid: str) -> str | None:
        """The model a vector from the file must have to be kept for agent ``aid``."""
        if aid not in self._models:
            eng = self.engine
            model = await resolved(eng.agent_model(aid))  # a Kafka worker reads its read models
            if model is None and eng.embedders.enabled:
                model = eng.embedder.model_id
            self._models[aid] = model
        return self._models[aid]

    async def _embedding(self, rec: dict[str, Any], aid: str) -> Embedding | bool | None:
        """The file's vector when it is of the agent's model; False: embed the text anew."""
        b64, model = rec.get("embedding_b64"), rec.get("embedding_model")
        if not isinstance(b64, str) or not isinstance(model, str) or model != await self._model_for(aid):
            return False
        try:
            blob = base64.b64decode(b64, validate=True)
        except ValueError:
            return False
        if not blob or len(blob) % 4:
            return False
        vec = np.frombuffer(blob, dtype="<f4")
        return Embedding.from_vector(model, vec) if np.isfinite(vec).all() else False

    def agent_of(self, rec: dict[str, Any]) -> str:
        return record_agent(rec, self.target)

    def memory_command(self, rec: dict[str, Any]) -> tuple[c.StoreMemory, str]:
        s = self.engine.settings
        aid = self.agent_of(rec)
        content = rec.get("content")
        if not isinstance(content, str) or not content:
            raise InputError("empty content")
        check_size(content, "content", s.max_input_chars)
        check_utf8(content, "content")
        text, _ = cap(clean_text(content), s.max_content_chars)
        if not text:
            raise InputError("empty after sanitization")
        msg_id = rec.get("msg_id")
        if msg_id is not None and (not isinstance(msg_id, str) or len(msg_id) > 256):
            raise InputError("msg_id must be a string of at most 256 characters")
        when = rec.get("timestamp")
        if when is not None and not isinstance(when, str):
            raise InputError("timestamp must be a string")
        metadata = rec.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise InputError("metadata must be an object")
        if len(orjson.dumps(metadata)) > s.max_metadata_chars * 4:
            raise InputError("metadata too large")
        cmd = c.StoreMemory(
            **self._env(rec, aid, "mem"),
            content=text,
            msg_id=msg_id,
            source=normalize_source(rec.get("source"), aid),
            metadata=metadata,
            timestamp=parse_timestamp(when),
            lock=bool(rec.get("locked")),
        )
        return cmd, text

    def episode_command(self, rec: dict[str, Any]) -> tuple[c.ArchiveEpisode, str]:
        s = self.engine.settings
        aid = self.agent_of(rec)
        summary, keywords = rec.get("summary"), rec.get("keywords") or ""
        if not isinstance(summary, str) or not isinstance(keywords, str):
            raise InputError("summary and keywords must be strings")
        check_size(summary, "summary", s.max_input_chars)
        check_utf8(summary, "summary")
        check_utf8(keywords, "keywords")
        text, _ = cap(clean_text(summary), s.max_content_chars)
        if not text:
            raise InputError("empty summary")
        metadata = rec.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise InputError("metadata must be an object")
        times = {}
        for key in ("start_time", "end_time"):
            raw = rec.get(key)
            if raw is not None and not isinstance(raw, str):
                raise InputError(f"{key} must be a string")
            times[key] = parse_timestamp(raw, key)
        resolved = rec.get("resolved")
        cmd = c.ArchiveEpisode(
            **self._env(rec, aid, "ep"),
            summary=text,
            keywords=keywords,
            resolved=None if resolved is None else bool(resolved),
            metadata=metadata,
            **times,
        )
        return cmd, text

    def profile_command(self, rec: dict[str, Any]) -> c.UpdateProfile:
        aid = self.agent_of(rec)
        content = rec.get("content")
        if not isinstance(content, str) or not clean_text(content):
            raise InputError("empty profile")
        check_utf8(content, "profile")
        text, _ = cap(clean_text(content), self.engine.settings.max_profile_chars)
        return c.UpdateProfile(**self._env({"content": text}, aid, "profile"), content=text)

    def _known(self, cmd: c.Command) -> bool:
        """Whether this command id was decided already (a dry run's guess at "skipped")."""
        state = getattr(self.engine.bus, "state", None)
        agent = None if state is None else state.agents.get(cmd.scope.agent_id)  # a lookup adds no agent
        return agent is not None and cmd.command_id in agent.commands

    async def run(self, records: list[tuple[int, dict[str, Any]]]) -> Tally:
        t = self.tally
        typed, errors = split_types(records)
        t.errors.extend(errors)
        for chunk in _chunks(typed["memory"], CHUNK):
            await self._texts(chunk, self.memory_command, "memory")
        for chunk in _chunks(typed["episode"], CHUNK):
            await self._texts(chunk, self.episode_command, "episode")
        for n, rec in typed["profile"]:
            try:
                cmd = self.profile_command(rec)
            except (InputError, ValueError) as exc:
                t.errors.append(f"Line {n}: profile: {exc}")
                continue
            current = await self.engine.read(lambda a=cmd.scope.agent_id: self.engine.profiles.rows.get(a))
            if t.dry_run or (current is not None and current.content == cmd.content):
                t.profile_updated = True  # as CPersona says it: the profile is the file's
                continue
            out = (await self.engine.submit(cmd)).outcome
            if out.result == "applied":
                t.profile_updated = True
            else:
                t.errors.append(f"Line {n}: profile: {out.reason or out.error}")
        return t

    async def _texts(self, chunk: list[tuple[int, dict[str, Any]]], build: Any, kind: str) -> None:
        t = self.tally
        ready: list[tuple[int, dict[str, Any], Any, str]] = []
        for n, rec in chunk:
            try:
                cmd, text = build(rec)
            except (InputError, ValueError) as exc:
                t.errors.append(f"Line {n}: {kind}: {exc}")
                continue
            ready.append((n, rec, cmd, text))
        if kind == "episode":  # episodes have no dedup rule of their own: an equal live one is this one
            kept = []
            for item in ready:
                if not self._known(item[2]) and await self._episode_exists(item[2]):
                    self._count(kind, imported=False)
                else:
                    kept.append(item)
            ready = kept
        if t.dry_run:
            for _, _, cmd, _ in ready:
                skipped = self._known(cmd) or (kind == "memory" and await self._duplicate(cmd))
                self._count(kind, imported=not skipped)
            return
        # Embed what the file brought no usable vector for, one model call per agent.
        vectors: dict[int, Any] = {}
        need: dict[str, list[int]] = {}
        for i, (_, rec, cmd, _) in enumerate(ready):
            emb = await self._embedding(rec, cmd.scope.agent_id)
            if emb is False:
                need.setdefault(cmd.scope.agent_id, []).append(i)
            else:
                vectors[i] = emb
        for aid, idx in need.items():
            embedded = await self.engine.embed([ready[i][3] for i in idx], agent_id=aid)
            vectors.update(zip(idx, embedded, strict=True))
        commands = [cmd.model_copy(update={"embedding": vectors[i]}) for i, (_, _, cmd, _) in enumerate(ready)]
        results = await asyncio.gather(*(self.engine.submit(cmd) for cmd in commands))
        for (n, rec, _, _), done in zip(ready, results, strict=True):
            out = done.outcome
            if out.result == "rejected":
                t.errors.append(f"Line {n}: {kind}: {out.reason or out.error}")
                continue
            # A retried command id (this record imported before) appends nothing: skipped.
            if out.id is not None and isinstance(rec.get("id"), int):
                t.imported_refs[f"{'mem' if kind == 'memory' else 'ep'}:{rec['id']}"] = out.id
            self._count(kind, imported=out.result == "applied" and done.offset is not None)

    async def _episode_exists(self, cmd: c.ArchiveEpisode) -> bool:
        eng = self.engine
        scope = cmd.scope
        start = cmd.start_time.isoformat() if cmd.start_time else None

        def query() -> bool:
            rows = eng.episodes.rows
            for i in eng.episodes.by_agent.get(scope.agent_id, {}):
                e = rows[i]
                if (e.summary, e.project_id, e.channel) == (cmd.summary, scope.project_id, scope.channel) and (
                    start is None or e.start_time is None or parse_timestamp(e.start_time) == cmd.start_time
                ):
                    return True
            return False

        return bool(await eng.read(query))

    async def _duplicate(self, cmd: c.StoreMemory) -> bool:
        eng = self.engine

        def query() -> bool:
            rows = eng.memories.rows
            for i in eng.memories.by_agent.get(cmd.scope.agent_id, {}):
                r = rows[i]
                if r.content == cmd.content and r.project_id in ("", cmd.scope.project_id):
                    return True
                if cmd.msg_id is not None and r.msg_id == cmd.msg_id and r.project_id in ("", cmd.scope.project_id):
                    return True
            return False

        return bool(await eng.read(query))

    def _count(self, kind: str, *, imported: bool) -> None:
        t = self.tally
        if kind == "memory":
            if imported:
                t.imported_memories += 1
            else:
                t.skipped_memories += 1
        elif imported:
            t.imported_episodes += 1
        else:
            t.skipped_episodes += 1


class ImportArgs(ToolArgs):
    input_path: StrictStr = Field(max_length=4096, description="A file under the export directory.")
    target_agent_id: StrictStr = Field(default="", max_length=256, description="Import into this agent.")
    dry_run: Flag = Field(default=False, description="Count what would be imported; write nothing.")
    session_key: SessionKey = ""
    command_id: CommandId | None = Field(
        default=None, description="Accepted for uniformity; an import is idempotent by construction."
    )


def parse_export(raw: bytes, dry_run: bool) -> tuple[list[tuple[int, dict[str, Any]]], list[str]] | dict[str, Any]:
    """The records of an export file and the errors of its unreadable lines, or the answer
    refusing the file whole (not UTF-8; header counts that say it was cut short)."""
    try:
        header, records, errors = parse_lines(raw)
    except InputError as exc:
        return {"ok": False, "error": str(exc)}
    problem = check_counts(header, records)
    if problem:
        return {"ok": False, "error": f"import refused, nothing was written: {problem}", "dry_run": dry_run}
    return records, errors


async def import_file(
    engine: Any, caller: Caller, raw: bytes, *, target: str = "", dry_run: bool = False, session_key: str = ""
) -> dict[str, Any]:
    """Import the bytes of an export file (the tool and ``memstream import`` share this)."""
    parsed = parse_export(raw, dry_run)
    if isinstance(parsed, dict):
        return parsed
    records, errors = parsed
    importer = Importer(engine, caller, target=target, namespace="import", session_key=session_key, dry_run=dry_run)
    importer.tally.errors.extend(errors)
    tally = await importer.run(records)
    body = tally.answer()
    body["profile_updated"] = tally.profile_updated
    return body


async def read_export(settings: Any, raw_path: str) -> bytes | dict[str, Any]:
    """The bytes of the file ``raw_path`` names under the export directory, or the answer
    refusing it (outside the directory, missing, unreadable, larger than MAX_IMPORT_BYTES)."""
    path = confine(settings, raw_path)
    if path is None:
        return path_refusal("input_path", raw_path)

    def read() -> bytes:
        with open(path, "rb") as f:
            return f.read(MAX_IMPORT_BYTES + 1)

    try:
        raw = await asyncio.get_running_loop().run_in_executor(None, read)
    except FileNotFoundError:
        return {"ok": False, "error": f"File not found: {raw_path}"}
    except OSError as exc:
        return {"ok": False, "error": f"could not read {raw_path}: {exc.strerror or exc}"}
    if len(raw) > MAX_IMPORT_BYTES:
        return {"ok": False, "error": f"input file exceeds {MAX_IMPORT_BYTES} bytes: {raw_path}"}
    return raw


async def import_memories(engine: Any, caller: Caller, args: ImportArgs) -> dict[str, Any]:
    raw = await read_export(engine.settings, args.input_path)
    if isinstance(raw, dict):
        return raw
    return await import_file(
        engine, caller, raw, target=args.target_agent_id, dry_run=args.dry_run, session_key=args.session_key
    )


# -- merge ----------------------------------------------------------------------------------


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


def merge_numbering(records: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """A source's records as a merge numbers them in its errors: memories and episodes by
    position, the profile as 0."""
    texts = [r for r in records if r["_type"] != "profile"]
    return list(enumerate(texts)) + [(0, r) for r in records if r["_type"] == "profile"][:1]


async def merge_into(
    engine: Any,
    caller: Caller,
    records: list[tuple[int, dict[str, Any]]],
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


async def merge_memories(engine: Any, caller: Caller, args: MergeArgs) -> dict[str, Any]:
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


def moved_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What ``delete_moved`` needs of the source's records: kind, id and lock."""
    return [
        {"_type": r["_type"], "id": r.get("id"), "locked": r.get("locked", 0)}
        for r in records
        if r["_type"] in ("memory", "episode")
    ]


async def delete_moved(
    engine: Any,
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
        env = {
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
