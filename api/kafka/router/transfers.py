"""The file transfers in Kafka mode (``export_memories``, ``import_memories``, ``merge_memories``),
answered by the router: they span partitions and use the router's files, so it runs the tools
itself and asks each worker for its partition's part (api/kafka/worker/transfer_parts.py).
How, and what differs from embedded mode: docs/kafka-operations.md, "Export, import, merge"."""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from typing import Any, Protocol

import orjson
from pydantic import BaseModel

from memstream.api.faces.http import STATUS
from memstream.api.kafka.router.gate import RouterGate
from memstream.api.kafka.wire import (
    COLLECT_PATH,
    DELETE_MOVED_PATH,
    IMPORT_PATH,
    PARTITION_HEADER,
    CollectBody,
    DeleteMovedBody,
    ImportBody,
)
from memstream.api.services.embedding import EmbeddingError
from memstream.api.services.settings import Settings, load_settings
from memstream.api.tools.dispatch import run_tool
from memstream.api.tools.registry import Caller, HandlerOf
from memstream.api.tools.sanitize import InputError
from memstream.api.tools.transfer.batches import CHUNK
from memstream.api.tools.transfer.export import ExportArgs
from memstream.api.tools.transfer.files import confine, path_refusal, read_export, write_export
from memstream.api.tools.transfer.importing import ImportArgs
from memstream.api.tools.transfer.jsonl import IMPORTED_KINDS, export_header, parse_export, split_types
from memstream.api.tools.transfer.merge import MergeArgs, merge_answer, merge_numbering, merge_refusal
from memstream.api.tools.transfer.move import moved_records
from memstream.api.tools.transfer.record_commands import record_agent
from memstream.api.tools.transfer.tally import Tally
from memstream.streams.buses.kafka import KafkaCommandBus
from memstream.streams.events import AuditRecord
from memstream.streams.log.kafka import KafkaConfig
from memstream.streams.log.port import LogUnavailable, partition_for

log = logging.getLogger(__name__)

# Records per request to a worker: a few of the Importer's bursts, so a request of a large
# file stays well inside the timeout below and a resent one redoes little.
IMPORT_BATCH = 8 * CHUNK
# One request's deadline: a batch is embedded (when the file brought no usable vectors) and
# decided on the worker; a partition's export reads the history of every record it holds.
REQUEST_TIMEOUT_S = 600.0
_LINE = re.compile(r"Line (\d+):")


class TransferFailed(RuntimeError):
    """A worker answered an internal transfer route with something other than its result or an
    unavailability: a fault (answered as ``internal``, with the details in the router's log)."""


class WorkerPost(Protocol):
    """POST to the worker owning a partition, following ownership changes (``Router.post``)."""

    async def __call__(
        self, partition: int, path: str, body: bytes, headers: dict[str, str], *, timeout_s: float | None = None
    ) -> tuple[int, bytes]: ...


class KafkaTransfers:
    """The engine ``run_tool`` runs the three tools over in the router: what they need of a
    deployment (the router's settings and export directory, the workers' parts) and where a
    refusal is audited. Grants were checked by the router before (``acl`` is None here)."""

    acl = None  # checked by ``Router.denied`` before the call gets here
    metrics = None  # the router's calls are not measured per tool

    def __init__(
        self, cfg: KafkaConfig, settings: Settings | None, post: WorkerPost, gate: RouterGate | None = None
    ) -> None:
        self.cfg = cfg
        self.router_settings = settings
        self.post = post
        self.gate = gate
        self._settings: Settings | None = None
        self._bus: KafkaCommandBus | None = None
        self._bus_lock = asyncio.Lock()

    @property
    def settings(self) -> Settings:
        """The router's settings: where its export directory is (``export_root``)."""
        if self._settings is None:
            self._settings = self.router_settings or load_settings()
        return self._settings

    @property
    def partitions(self) -> int:
        return self.cfg.partitions

    async def answer(self, name: str, args: Any, caller: Caller) -> tuple[int, bytes]:
        """One call of a transfer tool: (HTTP status, JSON body) as a worker answers a tool."""
        body, code = await run_tool(self, caller, name, args, handler=HANDLERS[name])
        return (200 if code is None else STATUS.get(code, 400)), orjson.dumps(body)

    async def refuse(self, record: AuditRecord) -> None:
        """Audit a refused transfer call as embedded mode does: on the audit topic of the named
        agent's partition, through the commands topic (its decider is the only writer there).
        In ACL mode the gate's bus does it; otherwise a bus of this router's, started on the
        first refusal."""
        if self.gate is not None:
            await self.gate.refuse(record)
            return
        async with self._bus_lock:
            if self._bus is None:
                bus = KafkaCommandBus(self.cfg, instance_id=f"router-transfer-{uuid.uuid4().hex}")
                await bus.start()
                self._bus = bus
        await self._bus.record_refusal(record)

    async def record_owner(self, kind: str, ident: int) -> str | None:
        """Asked only by a grant check, which ran before (``acl`` is None here): the gate's answer."""
        return None if self.gate is None else await self.gate.record_owner(kind, ident)

    async def close(self) -> None:
        if self._bus is not None:
            await self._bus.close()
            self._bus = None

    async def ask(self, partition: int, path: str, body: BaseModel, caller: Caller) -> dict[str, Any]:
        """POST an internal transfer route to the owner of ``partition``, as ``caller``."""
        headers = {
            "content-type": "application/json",
            "x-client-id": caller.client_id,
            PARTITION_HEADER: str(partition),
        }
        if caller.session_id:
            headers["x-session-id"] = caller.session_id
        content = orjson.dumps(body.model_dump())
        status, answer = await self.post(partition, path, content, headers, timeout_s=REQUEST_TIMEOUT_S)
        if status == 200:
            parsed: dict[str, Any] = orjson.loads(answer)
            return parsed
        error = _error_of(answer)
        if status == 503 and error.startswith("embedding_unavailable: "):
            raise EmbeddingError(error.removeprefix("embedding_unavailable: "))
        if status == 503:
            raise LogUnavailable(f"partition {partition}: {error.removeprefix('log_unavailable: ')}")
        raise TransferFailed(f"the worker of partition {partition} answered {status} to {path}: {error}")

    async def collect(
        self, agent_id: str, caller: Caller, *, include_embeddings: bool, include_history: bool
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """``collect`` across the deployment: the agent's partition, or ('') every partition,
        joined in embedded mode's order (docs/kafka-operations.md)."""
        body = CollectBody(agent_id=agent_id, include_embeddings=include_embeddings, include_history=include_history)
        partitions = [partition_for(agent_id, self.partitions)] if agent_id else list(range(self.partitions))
        answers = await asyncio.gather(*(self.ask(p, COLLECT_PATH, body, caller) for p in partitions))
        offsets = {str(p): int(a["header"]["log_offset"]) for p, a in zip(partitions, answers, strict=True)}
        records = [r for a in answers for r in a["records"]]
        memories = [r for r in records if r["_type"] == "memory"]
        episodes = [r for r in records if r["_type"] == "episode"]
        profiles = [r for r in records if r["_type"] == "profile"]
        if not agent_id:  # each partition's rows are in order; the partitions interleave
            memories.sort(key=lambda r: int(r["id"]))
            episodes.sort(key=lambda r: int(r["id"]))
            profiles.sort(key=lambda r: str(r["agent_id"]))
        header = export_header(agent_id, memories, episodes, profiles, log_offsets=offsets)
        return header, memories + episodes + profiles


def _error_of(content: bytes) -> str:
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        return content[:300].decode("utf-8", "replace")
    return str(body.get("error") if isinstance(body, dict) else body)[:1000]


async def export_memories(transfers: KafkaTransfers, caller: Caller, args: ExportArgs) -> dict[str, Any]:
    path = confine(transfers.settings, args.output_path)
    if path is None:
        return path_refusal("output_path", args.output_path)
    header, records = await transfers.collect(
        args.agent_id, caller, include_embeddings=args.include_embeddings, include_history=True
    )
    return await write_export(args.output_path, path, header, records)


async def import_memories(transfers: KafkaTransfers, caller: Caller, args: ImportArgs) -> dict[str, Any]:
    raw = await read_export(transfers.settings, args.input_path)
    if isinstance(raw, dict):
        return raw
    parsed = parse_export(raw, args.dry_run)
    if isinstance(parsed, dict):
        return parsed  # nothing was sent to any worker
    records, errors = parsed
    typed, type_errors = split_types(records)
    unplaced: list[str] = []
    groups: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    for kind in IMPORTED_KINDS:  # embedded mode's order: memories, episodes, profiles
        for n, rec in typed[kind]:
            try:
                agent = record_agent(rec, args.target_agent_id)
            except InputError as exc:
                unplaced.append(f"Line {n}: {kind}: {exc}")
                continue
            groups.setdefault(partition_for(agent, transfers.partitions), []).append((n, rec))

    async def one_partition(partition: int, mine: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
        parts = []
        for i in range(0, len(mine), IMPORT_BATCH):
            batch = ImportBody(
                records=mine[i : i + IMPORT_BATCH],
                target=args.target_agent_id,
                session_key=args.session_key,
                dry_run=args.dry_run,
            )
            parts.append((await transfers.ask(partition, IMPORT_PATH, batch, caller))["tally"])
        return parts

    tally = Tally(args.dry_run)
    for parts in await asyncio.gather(*(one_partition(p, mine) for p, mine in sorted(groups.items()))):
        for part in parts:
            tally.add(part)
    kinds = {n: str(rec.get("_type")) for n, rec in records}
    tally.errors = errors + type_errors + sorted(unplaced + tally.errors, key=lambda e: _error_order(e, kinds))
    body = tally.answer()
    body["profile_updated"] = tally.profile_updated
    return body


def _error_order(error: str, kinds: dict[int, str]) -> tuple[int, int]:
    """Where an error of a record stands: by the record's kind as embedded mode imports them
    (memories, episodes, profiles), then by line."""
    found = _LINE.match(error)
    line = int(found.group(1)) if found else 0
    kind = kinds.get(line, "")
    return (IMPORTED_KINDS.index(kind) if kind in IMPORTED_KINDS else len(IMPORTED_KINDS), line)


async def merge_memories(transfers: KafkaTransfers, caller: Caller, args: MergeArgs) -> dict[str, Any]:
    """Embedded mode's saga across workers: the source's records from its worker, stored by the
    target's worker (in batches, in order), then for a move deleted by the source's worker."""
    refused = merge_refusal(args)
    if refused is not None:
        return refused
    _, records = await transfers.collect(args.source_agent_id, caller, include_embeddings=True, include_history=False)
    numbered = merge_numbering(records)
    target = partition_for(args.target_agent_id, transfers.partitions)
    tally = Tally(args.dry_run)
    profile_copied = False
    for i in range(0, len(numbered), IMPORT_BATCH):
        batch = ImportBody(
            records=numbered[i : i + IMPORT_BATCH],
            target=args.target_agent_id,
            merge_source=args.source_agent_id,
            session_key=args.session_key,
            dry_run=args.dry_run,
        )
        answer = await transfers.ask(target, IMPORT_PATH, batch, caller)
        tally.add(answer["tally"])
        profile_copied = profile_copied or bool(answer["profile_copied"])
    source_profile = any(r["_type"] == "profile" for r in records)
    body = merge_answer(args, tally, profile_copied=profile_copied, source_profile=source_profile)
    if args.mode == "move" and not args.dry_run:
        moved = DeleteMovedBody(
            records=moved_records(records),
            imported_refs=tally.imported_refs,
            source=args.source_agent_id,
            target=args.target_agent_id,
            session_key=args.session_key,
        )
        source = partition_for(args.source_agent_id, transfers.partitions)
        body.update(await transfers.ask(source, DELETE_MOVED_PATH, moved, caller))
    return body


HANDLERS: dict[str, HandlerOf[KafkaTransfers]] = {
    "export_memories": export_memories,
    "import_memories": import_memories,
    "merge_memories": merge_memories,
}
