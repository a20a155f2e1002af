"""A worker's parts of the router's file transfers: the internal routes the router asks for one
partition's records, imports and a move's deletions (the router's half and the narrative:
api/kafka/router/transfers.py)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from memstream.api.faces.http import caller_of, json_response
from memstream.api.kafka.wire import (
    COLLECT_PATH,
    DELETE_MOVED_PATH,
    IMPORT_PATH,
    PARTITION_HEADER,
    CollectBody,
    DeleteMovedBody,
    ImportBody,
    TransferBody,
)
from memstream.api.services.embedding import EmbeddingError
from memstream.api.services.ports import Engine
from memstream.api.tools.dispatch import describe_validation, failure
from memstream.api.tools.registry import Caller
from memstream.api.tools.sanitize import InputError
from memstream.api.tools.transfer.collect import collect
from memstream.api.tools.transfer.importer import Importer
from memstream.api.tools.transfer.merge import merge_into
from memstream.api.tools.transfer.move import delete_moved
from memstream.api.tools.transfer.record_commands import record_agent
from memstream.streams.decision.state import DecisionState
from memstream.streams.log.kafka import KafkaConfig
from memstream.streams.log.port import LogUnavailable, partition_for

log = logging.getLogger(__name__)

BodyT = TypeVar("BodyT", bound=TransferBody)


class PartEngine(Engine, Protocol):
    """A worker's engine of one partition, as the parts use it."""

    async def decisions(self) -> DecisionState | None:
        """The decider's state of the partition, folded first if it was not yet."""
        ...


class PartitionEngines(Protocol):
    """The worker, as the transfer routes ask it for the engine of a partition it owns."""

    worker_id: str
    cfg: KafkaConfig

    def engine_for_call(self, args: Any, partition: int | None = None) -> PartEngine | None: ...


# One route's work: (engine of the partition, caller, body, the partition, how many there are).
Part = Callable[[PartEngine, Caller, BodyT, int, int], Awaitable[dict[str, Any]]]


def transfer_routes(worker: PartitionEngines) -> list[Route]:
    """The internal routes a worker answers for the routers' transfers (see the module doc).
    Each names its partition in ``x-memstream-partition``; 421 when this worker does not own
    it (the router then waits for the owner), 503 when the partition cannot be read in time."""
    partitions = worker.cfg.partitions

    def route(path: str, model: type[BodyT], run: Part[BodyT]) -> Route:
        """``run`` over the engine of the partition the request names."""

        async def endpoint(request: Request) -> Response:
            try:
                body = model.model_validate_json(await request.body())
            except ValidationError as exc:
                return json_response(failure(f"invalid {path} request: {describe_validation(exc)}"), 400)
            hint = request.headers.get(PARTITION_HEADER, "")
            if not hint.isdigit() or int(hint) >= partitions:
                return json_response(failure(f"{path} needs the partition in {PARTITION_HEADER}"), 400)
            partition = int(hint)
            engine = worker.engine_for_call({}, partition)
            if engine is None:
                return json_response(failure("not_owner", node=worker.worker_id), 421)
            try:
                return json_response(await run(engine, caller_of(request), body, partition, partitions))
            except InputError as exc:
                return json_response(failure(str(exc)), 400)
            except (TimeoutError, LogUnavailable) as exc:
                return json_response(failure(f"log_unavailable: {exc}"), 503)
            except EmbeddingError as exc:
                return json_response(failure(f"embedding_unavailable: {exc}"), 503)
            except Exception:
                log.exception("%s failed", path)
                return json_response(failure(f"{path} failed; the worker's log has the details"), 500)

        return Route(path, endpoint, methods=["POST"])

    return [
        route(COLLECT_PATH, CollectBody, _collect_part),
        route(IMPORT_PATH, ImportBody, _import_part),
        route(DELETE_MOVED_PATH, DeleteMovedBody, _delete_part),
    ]


async def _collect_part(
    engine: PartEngine, caller: Caller, body: CollectBody, partition: int, partitions: int
) -> dict[str, Any]:
    header, records = await collect(
        engine, body.agent_id, include_embeddings=body.include_embeddings, include_history=body.include_history
    )
    return {"header": header, "records": records}


async def _import_part(
    engine: PartEngine, caller: Caller, body: ImportBody, partition: int, partitions: int
) -> dict[str, Any]:
    for n, rec in body.records:
        try:
            agent = record_agent(rec, body.target)
        except InputError:
            continue  # the Importer reports it, as embedded mode does
        if partition_for(agent, partitions) != partition:
            raise InputError(f"the record on line {n} lands in agent {agent!r}, not of partition {partition}")
    await engine.decisions()  # the Importer asks which command ids were decided (a dry run, episodes)
    if body.merge_source is not None:
        if not body.target:
            raise InputError("a merge needs its target agent")
        tally, copied = await merge_into(
            engine,
            caller,
            body.records,
            source=body.merge_source,
            target=body.target,
            session_key=body.session_key,
            dry_run=body.dry_run,
        )
        return {"tally": tally.as_dict(), "profile_copied": copied}
    importer = Importer(
        engine, caller, target=body.target, namespace="import", session_key=body.session_key, dry_run=body.dry_run
    )
    tally = await importer.run(body.records)
    return {"tally": tally.as_dict(), "profile_copied": False}


async def _delete_part(
    engine: PartEngine, caller: Caller, body: DeleteMovedBody, partition: int, partitions: int
) -> dict[str, Any]:
    if partition_for(body.source, partitions) != partition:
        raise InputError(f"agent {body.source!r} is not of partition {partition}")
    return await delete_moved(
        engine,
        caller,
        body.records,
        body.imported_refs,
        source=body.source,
        target=body.target,
        session_key=body.session_key,
    )
