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
with a token answers nothing (401) that does not carry it (:class:`WorkerGuard`), so only
routers reach its tools. ``memstream worker`` warns when it binds a non-loopback interface
without one.
"""

from __future__ import annotations

import hmac
import logging
import uuid
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from memstream.api.services.acl import AclConfig, owner_or_history
from memstream.api.services.settings import Settings
from memstream.api.tools.dispatch import enforce_grants, failure
from memstream.api.tools.registry import Caller, Tool, ToolArgs
from memstream.streams.buses.kafka import KafkaCommandBus
from memstream.streams.events import AuditRecord, decode, parse_ref

if TYPE_CHECKING:
    from memstream.api.kafka.router.app import Router
    from memstream.api.kafka.worker.app import Worker

log = logging.getLogger(__name__)

# The header routers present their shared secret in, and the worker route naming a record's owner.
WORKER_TOKEN_HEADER = "x-memstream-worker-token"
OWNER_PATH = "/v1/owner"


class RouterGate:
    """The ACL of one API process in Kafka mode (see the module doc): the engine surface
    ``enforce_grants`` needs, with record owners asked of the workers and refusals audited
    through the command path."""

    def __init__(self, acl: AclConfig, router: Router) -> None:
        self.acl = acl
        self.router = router
        self.bus = KafkaCommandBus(router.cfg, instance_id=f"router-acl-{uuid.uuid4().hex}")

    async def start(self) -> None:
        await self.bus.start()

    async def close(self) -> None:
        await self.bus.close()

    async def check(self, caller: Caller, tool: Tool, args: ToolArgs, raw: Any) -> dict[str, Any] | None:
        """None when the caller's grants cover the validated call; else the denial (audited)."""
        return await enforce_grants(self, self.acl, caller, tool, args, raw)

    # -- the engine surface api/services/acl.py and dispatch use ----------------------------------------

    async def record_owner(self, kind: str, ident: int) -> str | None:
        return await self.router.record_owner(kind, ident)

    async def refuse(self, record: AuditRecord) -> None:
        await self.bus.record_refusal(record)


# -- the worker's side ---------------------------------------------------------------------------


async def owner_in_partition(node: Worker, kind: str, ident: int) -> tuple[bool, str | None]:
    """(whether this worker holds the record's partition, the agent owning the record or None).
    Read from the partition's read models once they include every write acknowledged, as any
    read; a deleted record's owner is named by the first event of its history."""
    engine = node.engine_for_call({"ref": f"{kind}:{ident}"})
    if engine is None:
        return False, None
    found = await engine.read(lambda: owner_or_history(engine, kind, ident))
    if isinstance(found, str):
        return True, found
    if not found:
        return True, None
    records = await node.announcer.read(engine.models.partition, found[0], found[0] + 1, vectors=False)
    return True, (str(decode(records[0].value)["scope"]["agent_id"]) if records else None)


def owner_route(node: Worker) -> Route:
    """``POST /v1/owner {"ref": "mem:<id>"}`` → ``{"owner": agent_id | null}``: the owner of a
    record of this worker's partitions, for the routers' grant checks (421 when not held here)."""
    from memstream.api.faces.http import json_response

    async def owner(request: Request) -> Response:
        try:
            kind, ident = parse_ref(orjson.loads(await request.body())["ref"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            return json_response(failure(f"invalid owner lookup: {exc}"), 400)
        try:
            held, agent = await owner_in_partition(node, kind, ident)
        except TimeoutError as exc:
            return json_response(failure(f"log_unavailable: {exc}"), 503)
        if not held:
            return json_response(failure("not_owner", node=node.node_id), 421)
        return json_response({"owner": agent})

    return Route(OWNER_PATH, owner, methods=["POST"])


class WorkerGuard:
    """ASGI middleware of a worker with ``MEMSTREAM_WORKER_TOKEN``: 401 unless the request
    carries the token (compared in constant time; never logged)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode("ascii")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        presented = b""
        for key, value in scope.get("headers") or ():
            if key.lower() == WORKER_TOKEN_HEADER.encode():
                presented = value
                break
        if hmac.compare_digest(presented, self.token):
            await self.app(scope, receive, send)
            return
        log.warning("401 on worker %s: %s worker token", scope.get("path"), "wrong" if presented else "no")
        body = orjson.dumps({"ok": False, "error": "unauthorized"})
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def guard_worker(app: Any, settings: Settings) -> None:
    """Install :class:`WorkerGuard` on a worker's app when the settings carry a worker token."""
    if settings.worker_token is not None:
        app.add_middleware(WorkerGuard, token=settings.worker_token.get_secret_value())


def worker_headers(settings: Settings | None) -> dict[str, str]:
    """The headers a router sends on every request to a worker."""
    if settings is None or settings.worker_token is None:
        return {}
    return {WORKER_TOKEN_HEADER: settings.worker_token.get_secret_value()}
