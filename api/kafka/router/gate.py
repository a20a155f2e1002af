"""Access control in Kafka mode: the router checks a call's grants, and audits a denial, before it
forwards anything; workers trust the client the router names. Why there, and the trust boundary
that follows (``MEMSTREAM_WORKER_TOKEN``): docs/security.md, "Kafka mode"."""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from memstream.api.services.acl import AclConfig
from memstream.api.tools.dispatch import enforce_grants
from memstream.api.tools.reads import health_seen_by
from memstream.api.tools.registry import Caller, Tool, ToolArgs
from memstream.streams.buses.kafka import KafkaCommandBus
from memstream.streams.events import AuditRecord
from memstream.streams.log.kafka import KafkaConfig


class RecordOwners(Protocol):
    """Who can name a record's owner: the router, which asks the worker holding its partition."""

    async def record_owner(self, kind: str, ident: int) -> str | None: ...


class RouterGate:
    """The ACL of one router in Kafka mode (docs/security.md): the engine surface
    ``enforce_grants`` needs, with record owners asked of the workers and refusals audited
    through the command path."""

    def __init__(self, acl: AclConfig, cfg: KafkaConfig, owners: RecordOwners) -> None:
        self.acl = acl
        self.owners = owners
        self.bus = KafkaCommandBus(cfg, instance_id=f"router-acl-{uuid.uuid4().hex}")

    async def start(self) -> None:
        await self.bus.start()

    async def close(self) -> None:
        await self.bus.close()

    async def check(self, caller: Caller, tool: Tool, args: ToolArgs, raw: Any) -> dict[str, Any] | None:
        """None when the caller's grants cover the validated call; else the denial (audited)."""
        return await enforce_grants(self, self.acl, caller, tool, args, raw)

    def health(self, caller: Caller | None, args: Any, verdict: dict[str, Any]) -> dict[str, Any]:
        """The router's ``check_health`` verdict as the caller may see it: with an ``agent_id``,
        no deployment-wide figures for a client that may not read every agent (as embedded)."""
        agent = args.get("agent_id") if isinstance(args, dict) else None
        who = caller or Caller(client_id="anonymous")
        return health_seen_by(self.acl, who, agent if isinstance(agent, str) else None, verdict)

    # -- the engine surface api/services/acl.py and dispatch use ----------------------------------------

    async def record_owner(self, kind: str, ident: int) -> str | None:
        return await self.owners.record_owner(kind, ident)

    async def refuse(self, record: AuditRecord) -> None:
        await self.bus.record_refusal(record)
