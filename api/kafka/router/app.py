"""The router (``memstream serve --kafka``): forwards each tool call to the worker that owns its
agent's partition, as announced on the owners topic, retrying through rebalances; with an ACL
file it checks grants first (gate.py). How routing behaves: docs/kafka-operations.md."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from contextvars import ContextVar
from typing import Any

import aiohttp
import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from memstream.api.faces.auth import BearerAuth
from memstream.api.faces.console.routes import add_console_routes
from memstream.api.faces.feed import add_feed_route
from memstream.api.faces.http import ERROR_HEADER, TOOL_ROUTES, caller_of, json_response
from memstream.api.faces.mcp import McpHttpApp
from memstream.api.faces.mcp_resources import source_changes
from memstream.api.faces.origin import OriginGuard, origin_policy
from memstream.api.faces.sessions import AuditSessions
from memstream.api.faces.tool_route import BodyTooLarge, read_body
from memstream.api.kafka.router.feed import KafkaFeed
from memstream.api.kafka.router.gate import RouterGate
from memstream.api.kafka.router.transfers import KafkaTransfers
from memstream.api.kafka.wire import OWNER_PATH, PARTITION_HEADER, TRANSFER_TOOLS, route_partition, worker_headers
from memstream.api.services.acl import AclConfig
from memstream.api.services.settings import Settings, load_settings
from memstream.api.tools.agents import LIST_AGENTS_CAP, may_read
from memstream.api.tools.dispatch import encode_arguments, failure, parse_arguments, refusal, validated
from memstream.api.tools.reads import LIST_CAP
from memstream.api.tools.registry import Caller
from memstream.streams.log.kafka import KafkaConfig, ensure_topics
from memstream.streams.log.port import LogUnavailable

log = logging.getLogger(__name__)

FORWARD_DEADLINE_S = 45.0
# Listings that name no agent list every agent: answered by every partition's worker, merged.
EVERY_AGENT_LISTINGS = {"list_memories": "memories", "list_episodes": "episodes"}
# A re-embed of every agent runs on every partition's worker; its status is summed over them.
REEMBED_TOOLS = frozenset({"reembed", "reembed_status"})
FORWARDED_HEADERS = ("x-client-id", "x-session-id", "idempotency-key", "authorization")
JSON_HEADERS = {"content-type": "application/json"}


class Owners:
    """Partition → the URL of the worker that last announced it, from the owners topic."""

    def __init__(self, cfg: KafkaConfig) -> None:
        self.cfg = cfg
        self.urls: dict[int, str] = {}
        self.changed = asyncio.Event()
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await ensure_topics(self.cfg)
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.cfg.bootstrap, group_id=None, enable_auto_commit=False, fetch_max_wait_ms=100
        )
        await self._consumer.start()
        tps = [TopicPartition(self.cfg.owners_topic, p) for p in range(self.cfg.partitions)]
        self._consumer.assign(tps)
        await self._consumer.seek_to_beginning(*tps)
        self._task = asyncio.create_task(self._run(), name="memstream-owners")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await self._consumer.stop()

    async def _run(self) -> None:
        assert self._consumer is not None
        while True:
            batch = await self._consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for rec in records:
                    try:
                        value = orjson.loads(rec.value or b"")
                        self.urls[int(value["partition"])] = str(value["url"])
                    except (ValueError, KeyError, TypeError):
                        log.warning("unreadable owners record at offset %d", rec.offset)
            if batch:
                self.changed.set()

    async def wait_change(self, timeout: float) -> None:
        self.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.changed.wait(), timeout)


# The failure code the worker named (its Memstream-Error header) for the answer being forwarded:
# set by ``post`` and read by ``forward`` in the one task serving the request, so it rides beside
# the (status, body) every route returns.
WORKER_CODE: ContextVar[str | None] = ContextVar("worker_code", default=None)


class Router:
    """Forwards calls to the workers owning their partitions; in ACL mode (``acl``) it first
    checks the caller's grants and audits denials (api/kafka/router/gate.py)."""

    def __init__(
        self,
        cfg: KafkaConfig,
        deadline_s: float = FORWARD_DEADLINE_S,
        *,
        acl: AclConfig | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.cfg = cfg
        self.deadline_s = deadline_s
        self.settings = settings
        self.owners = Owners(cfg)
        self._worker_headers = worker_headers(settings)
        self._session: aiohttp.ClientSession | None = None
        self.gate = RouterGate(acl, cfg, self) if acl is not None else None
        # export / import / merge (api/kafka/router/transfers.py)
        self.transfers = KafkaTransfers(cfg, settings, self.post, self.gate)

    @property
    def client(self) -> aiohttp.ClientSession:
        """Keep-alive connections to the workers. aiohttp rather than httpx: forwarding is the
        router's whole job, and httpx cost about three times the CPU per call here."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None),
                timeout=aiohttp.ClientTimeout(total=60.0, sock_connect=2.0),
                headers=self._worker_headers,
                skip_auto_headers=("User-Agent",),
            )
        return self._session

    async def start(self) -> None:
        await self.owners.start()
        if self.gate is not None:
            await self.gate.start()

    async def close(self) -> None:
        await self.transfers.close()
        if self.gate is not None:
            await self.gate.close()
        await self.owners.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def forward(self, name: str, body: bytes, headers: dict[str, str], caller: Caller | None = None) -> Response:
        try:
            args = parse_arguments(body)
        except ValueError as exc:
            return json_response(failure(f"invalid JSON body: {exc}"), 400)
        WORKER_CODE.set(None)
        status, content = await self.forward_raw(name, args, body, headers, caller)
        code = WORKER_CODE.get()
        named = None if code is None or status == 200 else {ERROR_HEADER: code}
        return Response(content, status_code=status, media_type="application/json", headers=named)

    async def call(self, caller: Caller, name: str, args: Any) -> dict[str, Any]:
        """One tool call for the MCP face: the JSON body the owning worker answered."""
        headers = {"content-type": "application/json", "x-client-id": caller.client_id}
        if caller.session_id:
            headers["x-session-id"] = caller.session_id
        _, content = await self.forward_raw(name, args, encode_arguments(args), headers, caller)
        body: dict[str, Any] = orjson.loads(content)
        return body

    async def health(self) -> dict[str, Any]:
        """``check_health`` of a Kafka deployment, as this router sees it: one verdict, from
        whether every partition has an owner that answers."""
        issues: list[dict[str, Any]] = []
        owners = dict(self.owners.urls)
        missing = [p for p in range(self.cfg.partitions) if p not in owners]
        if missing:
            issues.append({"check": "owners", "severity": "critical", "detail": f"no worker owns partitions {missing}"})
        answering = 0
        for url in sorted(set(owners.values())):
            try:
                async with self.client.get(f"{url}/health", timeout=aiohttp.ClientTimeout(total=2.0)) as r:
                    code = r.status
                answering += code == 200
                if code != 200:
                    issues.append({"check": "workers", "severity": "warn", "detail": f"{url} answered {code}"})
            except (aiohttp.ClientError, TimeoutError) as exc:
                issues.append({"check": "workers", "severity": "warn", "detail": f"{url}: {type(exc).__name__}"})
        severities = {i["severity"] for i in issues}
        status = "unhealthy" if "critical" in severities else "degraded" if "warn" in severities else "healthy"
        stats = {
            "mode": "kafka",
            "partitions": self.cfg.partitions,
            "partitions_with_owner": self.cfg.partitions - len(missing),
            "workers_answering": answering,
        }
        return {"status": status, "checks_run": ["owners", "workers"], "issues": issues, "stats": stats}

    async def denied(self, caller: Caller | None, name: str, args: Any) -> tuple[int, bytes] | None:
        """In ACL mode, the answer to a call the caller's grants do not cover (403, audited), or
        503 when a record's owner could not be asked; None when the call may be forwarded.
        Calls dispatch would refuse before any grant check pass: their worker refuses them."""
        if self.gate is None:
            return None
        args = {} if args is None else args  # as run_tool reads absent arguments
        call = validated(name, args)
        if call is None:
            return None
        who = caller or Caller(client_id="anonymous")  # not authenticated: denied (fail closed)
        try:
            denial = await self.gate.check(who, call[0], call[1], args)
        except LogUnavailable as exc:
            return 503, orjson.dumps(failure(f"log_unavailable: {exc}"))
        return None if denial is None else (403, orjson.dumps(denial))

    async def forward_raw(
        self, name: str, args: Any, body: bytes, headers: dict[str, str], caller: Caller | None = None
    ) -> tuple[int, bytes]:
        refused = await self.denied(caller, name, args)
        if refused is not None:
            return refused
        if name == "check_health":  # the deployment's health is the router's to tell, not one worker's
            verdict = await self.health()
            if self.gate is not None:  # with an agent_id, only what the caller may see (gate.py)
                verdict = self.gate.health(caller, args, verdict)
            return (503 if verdict["status"] == "unhealthy" else 200), orjson.dumps(verdict)
        if name in TRANSFER_TOOLS:  # they span partitions and write the router's files
            client, session = headers.get("x-client-id") or "anonymous", headers.get("x-session-id") or ""
            return await self.transfers.answer(name, args, caller or Caller(client_id=client, session_id=session))
        if name == "recall_fleet" and validated(name, args) is not None:
            return await self.fleet(args, headers)
        if name == "list_agents" and (checked := validated(name, args)) is not None:
            return await self.agents(checked[1], body, headers, caller)
        if name in EVERY_AGENT_LISTINGS and isinstance(args, dict) and not args.get("agent_id"):
            checked = validated(name, args)
            if checked is not None:
                return await self.every_partition(name, checked[1], body, headers)
        every_agent = isinstance(args, dict) and not args.get("agent_id")
        if name in REEMBED_TOOLS and every_agent and validated(name, args) is not None:
            return await self.reembed_everywhere(name, body, headers)
        return await self.post(route_partition(args, self.cfg.partitions), f"/v1/tools/{name}", body, headers)

    async def every_partition(self, name: str, args: Any, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        """A listing of every agent (``list_memories`` / ``list_episodes`` without an agent).
        Embedded mode lists them from one engine; here each partition's worker lists its own
        agents (the partition named in a header) and the router merges the lists as embedded
        mode orders them: newest id first (ids are allocated per partition by the same rule in
        both modes), cut at the limit."""
        if isinstance(args.as_of, int):
            why = "as_of as an offset names one partition's offset in Kafka mode: name agent_id, or give an instant"
            return 400, orjson.dumps(failure(why))
        key = EVERY_AGENT_LISTINGS[name]
        answers = await self._each_partition(name, body, headers)
        rows: list[dict[str, Any]] = []
        for status, content in answers:
            answer = orjson.loads(content)
            if status != 200 or not isinstance(answer, dict) or not isinstance(answer.get(key), list):
                return status, content  # the first failure stands for the whole call
            rows.extend(answer[key])
        rows.sort(key=lambda r: -int(r["id"]))
        limit = min(args.limit, LIST_CAP)
        merged: dict[str, Any] = {key: rows[:limit], "count": min(len(rows), limit)}
        if key == "memories" and len(rows) > limit and args.limit > LIST_CAP:
            merged["budget_rows"] = LIST_CAP
        return 200, orjson.dumps(merged)

    async def agents(self, args: Any, body: bytes, headers: dict[str, str], caller: Caller | None) -> tuple[int, bytes]:
        """``list_agents``: each partition's worker lists its own agents; the router joins them by
        id and, in ACL mode, keeps those the caller may read (workers trust the router's caller)."""
        if isinstance(args.as_of, int):
            why = "as_of as an offset names one partition's offset in Kafka mode: give an instant"
            return 400, orjson.dumps(failure(why))
        if self.gate is not None:  # workers list every agent and the caller's are picked here: ask for all
            body = orjson.dumps({**args.model_dump(exclude_none=True), "limit": LIST_AGENTS_CAP})
        rows: list[dict[str, Any]] = []
        more = False
        for status, content in await self._each_partition("list_agents", body, headers):
            answer = orjson.loads(content)
            if status != 200 or not isinstance(answer, dict) or not isinstance(answer.get("agents"), list):
                return status, content
            rows.extend(answer["agents"])
            more = more or bool(answer.get("more"))
        if self.gate is not None:
            who = caller or Caller(client_id="anonymous")
            rows = [r for r in rows if may_read(self.gate.acl, who, str(r["agent_id"]))]
        rows.sort(key=lambda r: str(r["agent_id"]))
        merged: dict[str, Any] = {"agents": rows[: args.limit], "count": min(len(rows), args.limit)}
        if more or len(rows) > args.limit:
            merged["more"] = True
        return 200, orjson.dumps(merged)

    async def _each_partition(self, name: str, body: bytes, headers: dict[str, str]) -> list[tuple[int, bytes]]:
        return list(
            await asyncio.gather(
                *(
                    self.post(p, f"/v1/tools/{name}", body, {**headers, PARTITION_HEADER: str(p)})
                    for p in range(self.cfg.partitions)
                )
            )
        )

    async def reembed_everywhere(self, name: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        """``reembed`` of every agent, or ``reembed_status``: each partition's worker runs (or
        reports) the job over its own agents; the answer is one job as embedded mode gives it,
        summed over the partitions, with each partition's own status under ``partitions``."""
        jobs: list[tuple[int, dict[str, Any]]] = []
        for p, (status, content) in enumerate(await self._each_partition(name, body, headers)):
            answer = orjson.loads(content)
            if status != 200 or not isinstance(answer, dict) or answer.get("ok") is False:
                return status, content  # a refusal (a job already running, an unknown model) stands
            if isinstance(answer.get("job"), dict):
                jobs.append((p, answer["job"]))
        merged = merge_jobs(jobs)
        return 200, orjson.dumps({"ok": True, "job": merged} if name == "reembed" else {"job": merged})

    async def fleet(self, args: dict[str, Any], headers: dict[str, str]) -> tuple[int, bytes]:
        """``recall_fleet`` across partitions. Embedded mode answers it from one engine holding
        every agent; here each agent's rows are on the worker of its own partition, so the call
        (already checked as a whole) is split into one ``recall_fleet`` per agent, each agent
        once in the order named, and the answers are joined as embedded mode joins them: the
        first failing agent's answer stands for the whole call."""
        results: list[Any] = []
        for agent in dict.fromkeys(args["agent_ids"]):
            one = {**args, "agent_ids": [agent]}
            partition = route_partition(one, self.cfg.partitions)
            status, content = await self.post(partition, "/v1/tools/recall_fleet", orjson.dumps(one), headers)
            body = orjson.loads(content)
            if status != 200 or not isinstance(body, dict) or not isinstance(body.get("results"), list):
                return status, content
            results.extend(body["results"])
        return 200, orjson.dumps({"results": results, "count": sum(len(r["messages"]) for r in results)})

    async def record_owner(self, kind: str, ident: int) -> str | None:
        """The agent owning record ``kind:ident``, asked of the worker holding its partition
        (ids carry their partition); None when no record has that id."""
        if ident <= 0:
            return None
        ref = orjson.dumps({"ref": f"{kind}:{ident}"})
        status, content = await self.post((ident - 1) % self.cfg.partitions, OWNER_PATH, ref, JSON_HEADERS)
        if status != 200:
            raise LogUnavailable(f"no worker named the owner of {kind}:{ident} (HTTP {status})")
        owner = orjson.loads(content)["owner"]
        return None if owner is None else str(owner)

    async def post(
        self, partition: int, path: str, body: bytes, headers: dict[str, str], *, timeout_s: float | None = None
    ) -> tuple[int, bytes]:
        """POST to the owner of ``partition``, following ownership changes until the deadline.
        ``timeout_s``: this request's own limit, for the long ones (a file transfer's parts)."""
        end = time.monotonic() + self.deadline_s
        why = "no worker has announced this partition yet"
        while time.monotonic() < end:
            url = self.owners.urls.get(partition)
            if url is not None:
                # A worker waiting on the cluster (a broker down or frozen) holds the request:
                # the call's own deadline bounds it, so the caller gets a 503, never a hang.
                limit = end - time.monotonic() if timeout_s is None else timeout_s
                timeout = aiohttp.ClientTimeout(total=max(limit, 0.001), sock_connect=2.0)
                try:
                    async with self.client.post(f"{url}{path}", data=body, headers=headers, timeout=timeout) as r:
                        status, content = r.status, await r.read()
                except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
                    why = f"owner {url} unreachable: {type(exc).__name__}"  # gone: wait for the next one
                else:
                    if status != 421:
                        WORKER_CODE.set(r.headers.get(ERROR_HEADER))
                        return status, content
                    why = f"{url} no longer owns partition {partition}"
            await self.owners.wait_change(0.25)
        return 503, orjson.dumps(failure(f"log_unavailable: no worker answered for partition {partition} ({why})"))


class RouterEngine:
    """What a face that has no local engine serves in Kafka mode (``memstream mcp`` over stdio):
    the router, started and closed like an engine. ``acl``: the policy the router enforces."""

    def __init__(self, cfg: KafkaConfig, *, acl: AclConfig | None = None, settings: Settings | None = None) -> None:
        self.acl = acl
        self.router = Router(cfg, acl=acl, settings=settings)

    async def start(self) -> None:
        await self.router.start()

    async def close(self) -> None:
        await self.router.close()

    async def call(self, caller: Caller, name: str, args: Any) -> dict[str, Any]:
        """One tool call, forwarded to the worker owning its agent (``Router.call``)."""
        return await self.router.call(caller, name, args)


def router_app(
    cfg: KafkaConfig, *, host: str = "127.0.0.1", acl: AclConfig | None = None, settings: Settings | None = None
) -> Starlette:
    """The router's app. With ``acl`` every request needs a bearer token of the file
    (401 otherwise, as in embedded mode) and every call is checked before it is forwarded.
    As embedded mode's, it answers only allowed Host names and origins, and JSON bodies
    (api/faces/origin.py)."""
    router = Router(cfg, acl=acl, settings=settings)
    conf = settings if settings is not None else load_settings(env={})
    policy = origin_policy(conf, host)
    feed = KafkaFeed(cfg)  # the change feed, read from the events topic: GET /v1/events and MCP subscriptions
    mcp = McpHttpApp(
        None,
        host=host,
        call=router.call,
        changes=source_changes(feed),
        allowed_hosts=policy.mcp_hosts(),
        allowed_origins=policy.mcp_origins(),
    )

    async def call(request: Request) -> Response:
        name = request.path_params.get("name") or TOOL_ROUTES[request.url.path]
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED_HEADERS}
        headers["content-type"] = "application/json"
        caller = caller_of(request)
        if caller.authenticated:  # ACL mode: the token's client goes on, never the token
            headers.pop("authorization", None)
            headers["x-client-id"] = caller.client_id
        try:
            raw = await read_body(request.receive, request.scope["headers"])
        except BodyTooLarge as exc:  # never forwarded: the router answers it (no worker audits it)
            return json_response(refusal(name, str(exc)), 413, "too_large")
        if raw is None:
            return Response(status_code=400)  # the client went away: no one reads this
        return await router.forward(name, raw, headers, caller)

    async def health(request: Request) -> Response:
        refused = await router.denied(caller_of(request), "check_health", {})
        if refused is not None:
            return Response(refused[1], status_code=refused[0], media_type="application/json")
        verdict = await router.health()
        body = {**verdict, "partitions_with_owner": verdict["stats"]["partitions_with_owner"]}
        return json_response(body, 503 if verdict["status"] == "unhealthy" else 200)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await router.start()
        try:
            async with mcp.lifespan():
                yield
        finally:
            await router.close()
            await asyncio.to_thread(feed.close)

    routes = [Route("/v1/tools/{name}", call, methods=["POST"]), Route("/health", health)]
    routes.append(Route("/mcp", endpoint=mcp))  # a Route, so POST /mcp itself is served
    routes += [Route(path, call, methods=["POST"]) for path in TOOL_ROUTES]
    app = Starlette(routes=routes, lifespan=lifespan)
    sessions = AuditSessions(conf.audit_session_s) if acl is not None else None
    add_console_routes(app, acl, sessions)  # GET /: the console (and its login in ACL mode)
    add_feed_route(app, lambda request: feed, conf, acl)
    if acl is not None:  # nothing is served before the token (or a console session) is checked
        app.add_middleware(BearerAuth, acl=acl, sessions=sessions)
    app.add_middleware(OriginGuard, policy=policy)  # outermost: a web page's request is refused first
    app.state.router = router
    return app


def merge_jobs(jobs: list[tuple[int, dict[str, Any]]]) -> dict[str, Any] | None:
    """One re-embed status from the partitions' (see ``Router.reembed_everywhere``): running
    while any partition runs, failed if any failed; counts summed; per-agent results joined."""
    if not jobs:
        return None
    states = {job["state"] for _, job in jobs}
    state = "running" if "running" in states else "failed" if "failed" in states else "finished"
    models = sorted({str(job["model"]) for _, job in jobs})
    merged: dict[str, Any] = {
        "state": state,
        "model": models[0] if len(models) == 1 else models,
        "agents": None,
        "done": sum(int(job["done"]) for _, job in jobs),
        "total": sum(int(job["total"]) for _, job in jobs),
        "elapsed_s": max(float(job["elapsed_s"]) for _, job in jobs),
    }
    results = [job["result"] for _, job in jobs if isinstance(job.get("result"), dict)]
    if state != "running" and results:
        agents = sorted((a for r in results for a in r.get("agents", [])), key=lambda a: str(a.get("agent_id")))
        merged["result"] = {
            **results[0],
            "agents": agents,
            "complete": all(r.get("complete") for r in results),
            "reembedded": sum(int(r.get("reembedded", 0)) for r in results),
        }
    errors = [job["error"] for _, job in jobs if job.get("error")]
    if errors:
        merged["error"] = errors[0]
    merged["partitions"] = {str(p): job for p, job in jobs}
    return merged
