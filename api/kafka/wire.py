"""Which partition a tool call belongs to in Kafka mode: shared by the router, which forwards
the call to that partition's owner, and by the worker, which answers it from that partition."""

from __future__ import annotations

from typing import Any

from memstream.streams.log.port import partition_for

# The partition a router names on a call that belongs to every partition (a listing of every
# agent, see ``Router.every_partition``): the worker answers it from that partition.
PARTITION_HEADER = "x-memstream-partition"


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
