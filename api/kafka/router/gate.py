"""Access control in Kafka mode: the router enforces, workers answer only routers.

Where enforcement lives, and why. In Kafka mode a call reaches an API process first
(``memstream serve --kafka``: HTTP and MCP at ``/mcp``; ``memstream mcp --kafka``: stdio), which
forwards it to the worker owning its agent (api/kafka/router/app.py). The API process is the face
callers reach, so it is where they are authenticated (the same ``BearerAuth`` middleware and
stdio ``local`` principal as embedded mode, api/faces/auth.py) and where their grants are enforced,
before anything is forwarded: a denied call costs no worker a request, and a worker never sees
a caller's token. The check is embedded mode's own (``dispatch.validated`` and
``dispatch.enforce_grants``, api/services/acl.py), run on a :class:`RouterGate` in place of an engine:

* records named by id (``update_memory``, ``history(ref)`` ...) are checked against their owner,
  which only the worker holding the record's partition knows: the gate asks it
  (``POST /v1/owner``, answered from its read models, deleted records through their history);
* a denial is audited by the very record embedded mode writes (``dispatch._audit``), sent
  through a ``KafkaCommandBus`` onto the commands topic of the refused agent's partition, whose
  decider appends it to the audit topic, the only writer there, as for every refusal;
* calls the check cannot judge (an unknown tool, invalid arguments) are forwarded as they are,
  and the worker refuses and audits them as invalid, as embedded mode does before any grant
  is checked;
* ``recall_fleet`` is checked as one call (read on every agent named; one refusal refuses all)
  before the router splits it into one call per agent (``Router.fleet``).

The trust boundary. Workers do not check grants: they act as whichever client the router
names in ``X-Client-Id``. Whoever can reach a worker's port directly can therefore act as any
client on the agents of its partitions. Workers bind loopback by default (``memstream worker
--host 127.0.0.1``); a deployment whose routers run on other hosts must bind them to a routable
interface, and should then set ``MEMSTREAM_WORKER_TOKEN`` on every router and worker: a worker
with a token answers nothing (401) that does not carry it (``WorkerGuard``,
api/kafka/worker/guard.py), so only routers reach its tools. ``memstream worker`` warns when it
binds a non-loopback interface without one.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from memstream.api.services.acl import AclConfig
from memstream.api.tools.dispatch import enforce_grants
from memstream.api.tools.registry import Caller, Tool, ToolArgs
from memstream.streams.buses.kafka import KafkaCommandBus
from memstream.streams.events import AuditRecord
from memstream.streams.log.kafka import KafkaConfig


class RecordOwners(Protocol):
    """Who can name a record's owner: the router, which asks the worker holding its partition."""

    async def record_owner(self, kind: str, ident: int) -> str | None: ...


class RouterGate:
    """The ACL of one API process in Kafka mode (see the module doc): the engine surface
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

    # -- the engine surface api/services/acl.py and dispatch use ----------------------------------------

    async def record_owner(self, kind: str, ident: int) -> str | None:
        return await self.owners.record_owner(kind, ident)

    async def refuse(self, record: AuditRecord) -> None:
        await self.bus.record_refusal(record)
