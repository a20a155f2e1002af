"""What the Kafka router and worker say to each other: headers, internal routes and their bodies.

Shared by both processes, which import this module and never each other."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from memstream.api.services.settings import Settings
from memstream.streams.log.port import partition_for

# The partition a router names on a call that belongs to every partition (a listing of every
# agent, see ``Router.every_partition``): the worker answers it from that partition.
PARTITION_HEADER = "x-memstream-partition"
# The header routers present their shared secret in (``MEMSTREAM_WORKER_TOKEN``).
WORKER_TOKEN_HEADER = "x-memstream-worker-token"

# The worker route naming a record's owner, for the router's grant checks (api/kafka/router/gate.py).
OWNER_PATH = "/v1/owner"

# The file transfers: the router answers them (they span partitions and write the router's files)
# and asks the workers for the per-partition parts over these routes (api/kafka/router/transfers.py).
TRANSFER_TOOLS = frozenset({"export_memories", "import_memories", "merge_memories"})
COLLECT_PATH = "/v1/transfer/collect"
IMPORT_PATH = "/v1/transfer/import"
DELETE_MOVED_PATH = "/v1/transfer/delete-moved"


def route_partition(args: Any, partitions: int) -> int:
    """The partition a call belongs to: its ``agent_id``'s, else its first ``agent_ids``' (a
    fleet-wide read the router splits into one call per agent, see ``Router.fleet``), else the
    partition a record id it names was allocated in (ids are ``seq * partitions + partition +
    1``, so every id carries its partition), else the partition of the name ``-`` (the call is
    refused there as it would be anywhere)."""
    if isinstance(args, dict):
        agent = args.get("agent_id")
        if isinstance(agent, str) and agent:
            return partition_for(agent, partitions)
        fleet = args.get("agent_ids")
        if isinstance(fleet, list) and fleet and isinstance(fleet[0], str) and fleet[0]:
            return partition_for(fleet[0], partitions)
        for key in ("memory_id", "episode_id"):
            ident = args.get(key)
            if isinstance(ident, int) and not isinstance(ident, bool) and ident > 0:
                return (ident - 1) % partitions
        ref = args.get("ref")
        if isinstance(ref, str):
            _, _, digits = ref.partition(":")
            if digits.isdigit() and int(digits) > 0:
                return (int(digits) - 1) % partitions
    return partition_for("-", partitions)


def worker_headers(settings: Settings | None) -> dict[str, str]:
    """The headers a router sends on every request to a worker."""
    if settings is None or settings.worker_token is None:
        return {}
    return {WORKER_TOKEN_HEADER: settings.worker_token.get_secret_value()}


# -- the bodies of the transfer routes ----------------------------------------------------------


class TransferBody(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CollectBody(TransferBody):
    """``collect`` of one agent, or ('') of every agent of the partition named in the header."""

    agent_id: StrictStr = Field(max_length=256)
    include_embeddings: StrictBool
    include_history: StrictBool


class ImportBody(TransferBody):
    """Records (numbered as the answer's errors name them) that all land in the partition named
    in the header: imported as ``import_memories`` does, or with ``merge_source`` as the target's
    half of a merge from that agent (``merge_into``: the merge's command ids, the profile only
    when the target has none)."""

    records: list[tuple[int, dict[str, Any]]]
    target: StrictStr = Field(default="", max_length=256)
    merge_source: StrictStr | None = Field(default=None, min_length=1, max_length=256)
    session_key: StrictStr = Field(default="", max_length=256)
    dry_run: StrictBool = False


class DeleteMovedBody(TransferBody):
    """A move's deletions at the source: ``moved_records`` of the source's records, and the
    refs the target's import answered for."""

    records: list[dict[str, Any]]
    imported_refs: dict[str, int]
    source: StrictStr = Field(min_length=1, max_length=256)
    target: StrictStr = Field(min_length=1, max_length=256)
    session_key: StrictStr = Field(default="", max_length=256)
