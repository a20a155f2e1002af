"""MCP resources over an agent's records, and the subscriptions that tell a client when one
changed. Every read goes through a tool call (dispatch, or the Kafka router), so the ACL, the
audit trail and Kafka routing apply to resources exactly as to tools. The URIs, which client gets
which notifications, and why: docs/mcp.md, "Resources and subscriptions"."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote, unquote

import mcp_types as types
import orjson
from mcp.server.connection import Connection
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY

from memstream.api.faces.feed import FeedRequest, FeedSource, FeedUnavailable, PositionError
from memstream.api.services.feed import DEFAULT_BUFFER, FeedCutOff
from memstream.api.tools.registry import Caller

log = logging.getLogger(__name__)

SCHEME = "memstream"
MIME = "application/json"
LIST_ROWS = 100  # newest memories / episodes a list resource shows; the tools page further
HISTORY_ROWS = 200  # events of one memory a memory resource shows
PAGE_AGENTS = 100  # agents per resources/list page
MAX_AGENTS = 10_000  # list_agents' own cap
MAX_WATCHED = 256  # resources one connection (or one listen stream) may watch at once

ToolCall = Callable[[Caller, str, Any], Awaitable[dict[str, Any]]]
"""Runs one tool for a caller and answers its JSON body (dispatch, or the Kafka router's call)."""

AgentChanges = Callable[[Caller, str], AsyncIterator[Mapping[str, Any]]]
"""The live events of one agent, as history entries (api/services/entries.py), from now on, for as
long as they are iterated. Closing the iterator releases whatever feeds it. Two entry types are
signals, not events: :data:`READY` (the feed subscription is in place: every later event will
come), and :data:`RESYNC` (events may have been missed: every watched resource of the agent may
have changed)."""

READY = "memstream.ready"
RESYNC = "memstream.resync"
OPEN_SECONDS = 30.0  # longest a subscribe waits for its feed subscription to be in place
RETRY_FIRST_SECONDS = 0.25  # a feed cut off again where it was: first pause before reopening
RETRY_MAX_SECONDS = 5.0  # … doubling up to this

Kind = Literal["memories", "memory", "episodes", "profile"]


# -- URIs ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResourceRef:
    """What a URI names: an agent's memories (or one of them), its episodes, or its profile."""

    agent_id: str
    kind: Kind
    memory_id: int | None = None

    @property
    def uri(self) -> str:
        base = f"{SCHEME}://agents/{quote(self.agent_id, safe='')}"
        if self.kind == "memory":
            return f"{base}/memories/{self.memory_id}"
        return f"{base}/{self.kind}"


def memories_uri(agent_id: str) -> str:
    return ResourceRef(agent_id, "memories").uri


def memory_uri(agent_id: str, memory_id: int) -> str:
    return ResourceRef(agent_id, "memory", memory_id).uri


def _invalid(message: str, data: Any = None) -> MCPError:
    return MCPError(types.INVALID_PARAMS, message, data)


def parse_uri(uri: str) -> ResourceRef:
    """The resource a URI names, or an INVALID_PARAMS error saying which URIs exist."""
    prefix = f"{SCHEME}://agents/"
    if not uri.startswith(prefix):
        raise _invalid(f"unknown resource {uri!r}: memstream's URIs start with {prefix}")
    parts = uri[len(prefix) :].split("/")
    agent = unquote(parts[0], errors="strict") if parts[0] else ""
    if not agent or not agent.isprintable():
        raise _invalid(f"unknown resource {uri!r}: no agent id after {prefix}")
    rest = parts[1:]
    if rest == ["memories"] or rest == ["episodes"] or rest == ["profile"]:
        return ResourceRef(agent, rest[0])  # type: ignore[arg-type]  # one of the three literals
    if len(rest) == 2 and rest[0] == "memories" and rest[1].isascii() and rest[1].isdigit():
        memory_id = int(rest[1])
        if 0 < memory_id < 2**63:
            return ResourceRef(agent, "memory", memory_id)
    raise _invalid(
        f"unknown resource {uri!r}: the agent's resources are .../memories, .../memories/<id>, "
        ".../episodes and .../profile"
    )


TEMPLATES = [
    types.ResourceTemplate(
        name="agent-memories",
        title="An agent's memories",
        uri_template=f"{SCHEME}://agents/{{agent_id}}/memories",
        description=f"The agent's live memories, newest first (the {LIST_ROWS} newest; list_memories pages further).",
        mime_type=MIME,
    ),
    types.ResourceTemplate(
        name="agent-memory",
        title="One memory",
        uri_template=f"{SCHEME}://agents/{{agent_id}}/memories/{{memory_id}}",
        description="One memory: its current content (null once deleted) and its versions, oldest first.",
        mime_type=MIME,
    ),
    types.ResourceTemplate(
        name="agent-episodes",
        title="An agent's episodes",
        uri_template=f"{SCHEME}://agents/{{agent_id}}/episodes",
        description=f"The agent's episodes, newest first (the {LIST_ROWS} newest).",
        mime_type=MIME,
    ),
    types.ResourceTemplate(
        name="agent-profile",
        title="An agent's profile",
        uri_template=f"{SCHEME}://agents/{{agent_id}}/profile",
        description="The agent's profile ('' when none).",
        mime_type=MIME,
    ),
]


# -- list and read ------------------------------------------------------------------------------


def _failed(body: Mapping[str, Any]) -> bool:
    return body.get("ok") is False


def _refused(uri: str, body: Mapping[str, Any]) -> MCPError:
    """A tool's failure as an MCP error: the tool's words, and its whole answer as ``data``."""
    return _invalid(f"{uri}: {body.get('error') or 'refused'}", dict(body))


async def list_resources(call: ToolCall, caller: Caller, cursor: str | None) -> types.ListResourcesResult:
    """A page of the agents the caller may read (``list_agents`` decides which), each with the
    resources it has. The cursor is the position of the next agent in ``list_agents``' order."""
    try:
        start = int(cursor) if cursor else 0
    except ValueError:
        raise _invalid(f"bad cursor {cursor!r}: pass back the nextCursor of the previous page") from None
    if not 0 <= start < MAX_AGENTS:
        raise _invalid(f"bad cursor {cursor!r}: pass back the nextCursor of the previous page")
    body = await call(caller, "list_agents", {"limit": min(start + PAGE_AGENTS + 1, MAX_AGENTS)})
    if _failed(body):
        raise _refused("resources/list", body)
    agents = body.get("agents") or []
    page = agents[start : start + PAGE_AGENTS]
    resources: list[types.Resource] = []
    for row in page:
        agent = row["agent_id"]
        resources.append(
            types.Resource(
                name=f"{agent}/memories",
                uri=memories_uri(agent),
                description=f"{row.get('memories', 0)} live memories of agent {agent}, newest first",
                mime_type=MIME,
            )
        )
        if row.get("episodes"):
            resources.append(
                types.Resource(
                    name=f"{agent}/episodes",
                    uri=ResourceRef(agent, "episodes").uri,
                    description=f"{row['episodes']} episodes of agent {agent}, newest first",
                    mime_type=MIME,
                )
            )
        if row.get("profile"):
            resources.append(
                types.Resource(
                    name=f"{agent}/profile",
                    uri=ResourceRef(agent, "profile").uri,
                    description=f"the profile of agent {agent}",
                    mime_type=MIME,
                )
            )
    more = len(agents) > start + PAGE_AGENTS and start + PAGE_AGENTS < MAX_AGENTS
    return types.ListResourcesResult(resources=resources, next_cursor=str(start + PAGE_AGENTS) if more else None)


def _versions(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The contents a memory has had, oldest first, with who wrote each and when."""
    out = []
    for e in events:
        if e.get("type") in ("memory.stored", "memory.updated"):
            change = e.get("change") or {}
            version = {"offset": e.get("offset"), "at": e.get("at"), "actor": e.get("actor")}
            out.append({**version, "content": change.get("content")})
    return out


async def read_json(call: ToolCall, caller: Caller, ref: ResourceRef) -> dict[str, Any]:
    """The resource's JSON, or an MCPError with the tool's failure (permission, not found)."""
    agent = ref.agent_id
    uri = ref.uri
    if ref.kind == "memories":
        body = await call(caller, "list_memories", {"agent_id": agent, "limit": LIST_ROWS})
    elif ref.kind == "episodes":
        body = await call(caller, "list_episodes", {"agent_id": agent, "limit": LIST_ROWS})
    elif ref.kind == "profile":
        body = await call(caller, "get_profile", {"agent_id": agent})
    else:
        mem = f"mem:{ref.memory_id}"
        history = await call(caller, "history", {"ref": mem, "agent_id": agent, "limit": HISTORY_ROWS})
        if _failed(history):
            raise _refused(uri, history)
        current = await call(caller, "get_contents", {"agent_id": agent, "refs": [mem]})
        if _failed(current):
            raise _refused(uri, current)
        items = current.get("items") or []
        events = history.get("events") or []
        body = {
            "ref": mem,
            "memory": items[0] if items else None,
            "deleted": not items,
            "versions": _versions(events),
            "history": events,
        }
    if _failed(body):
        raise _refused(uri, body)
    return {"uri": uri, "agent_id": agent, **body}


def json_text(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


async def read_resource(call: ToolCall, caller: Caller, uri: str) -> types.ReadResourceResult:
    ref = parse_uri(uri)
    body = await read_json(call, caller, ref)
    text = types.TextResourceContents(uri=ref.uri, mime_type=MIME, text=json_text(body))
    return types.ReadResourceResult(contents=[text])


# -- what an event touches ----------------------------------------------------------------------

_LISTED = frozenset({"memory.stored", "memory.updated", "memory.deleted", "memory.locked", "memory.unlocked"})


def touched(entry: Mapping[str, Any]) -> set[str]:
    """The URIs whose contents an event (a history entry) changed."""
    agent = (entry.get("scope") or {}).get("agent_id")
    kind = entry.get("type")
    change = entry.get("change") or {}
    if not isinstance(agent, str) or not agent or not isinstance(kind, str):
        return set()
    out: set[str] = set()
    if kind.startswith("memory."):
        ident = change.get("id")
        if kind == "memory.reembedded" and change.get("kind", "mem") != "mem":
            return out
        if isinstance(ident, int):
            out.add(memory_uri(agent, ident))
        if kind in _LISTED:
            out.add(memories_uri(agent))
    elif kind.startswith("episode."):
        out.add(ResourceRef(agent, "episodes").uri)
    elif kind == "profile.updated":
        out.add(ResourceRef(agent, "profile").uri)
    elif kind == "agent_data.deleted":
        out.add(memories_uri(agent))
        out.update(memory_uri(agent, i) for i in change.get("memory_ids") or () if isinstance(i, int))
        if change.get("episode_ids"):
            out.add(ResourceRef(agent, "episodes").uri)
        if change.get("profile"):
            out.add(ResourceRef(agent, "profile").uri)
    elif kind == "standing.declared":
        ref = change.get("ref")
        if isinstance(ref, str) and ref.startswith("mem:") and ref[4:].isdigit():
            out.add(memory_uri(agent, int(ref[4:])))
    return out


# -- watching -----------------------------------------------------------------------------------


class ResourceWatch:
    """The resources one client watches: one feed subscription per agent watched, released as
    soon as the client watches none of that agent's resources (or the watch closes).

    Updates are level triggers ("read it again"), so a URI already waiting to be announced is not
    queued twice: a client that reads slowly gets one notification per changed resource, and the
    backlog is bounded by what it watches. Nothing here ever waits on the client.
    """

    def __init__(self, changes: AgentChanges, *, limit: int = MAX_WATCHED) -> None:
        self._changes = changes
        self._limit = limit
        self._uris: dict[str, set[str]] = {}  # agent -> watched URIs
        self._readers: dict[str, asyncio.Task[None]] = {}
        self._ready: dict[str, asyncio.Event] = {}
        self._failed: dict[str, str] = {}  # agent -> why its feed subscription ended
        self._pending: dict[str, None] = {}  # an ordered set
        self._wake = asyncio.Event()
        self._closed = False

    @property
    def watched(self) -> set[str]:
        return {u for uris in self._uris.values() for u in uris}

    @property
    def feeds(self) -> int:
        """Feed subscriptions held now (one per agent watched)."""
        return sum(not t.done() for t in self._readers.values())

    async def add(self, caller: Caller, ref: ResourceRef) -> None:
        """Watch ``ref`` (the caller's right to read it was checked by the caller of this). On
        return the agent's feed subscription is in place, so any change committed after the
        subscribe is answered is announced."""
        if self._closed:
            raise MCPError(types.INVALID_REQUEST, "this subscription has ended")
        uris = self._uris.setdefault(ref.agent_id, set())
        if ref.uri not in uris and len(self.watched) >= self._limit:
            raise _invalid(f"too many subscriptions: at most {self._limit} resources at once; unsubscribe some first")
        uris.add(ref.uri)
        if ref.agent_id not in self._readers:
            self._ready[ref.agent_id] = asyncio.Event()
            self._readers[ref.agent_id] = asyncio.create_task(self._read(caller, ref.agent_id))
        ready = self._ready.get(ref.agent_id)
        if ready is not None:
            try:
                await asyncio.wait_for(ready.wait(), OPEN_SECONDS)
            except TimeoutError:
                log.warning("the change feed of agent %r is not in place yet; watching it anyway", ref.agent_id)
        why = self._failed.pop(ref.agent_id, None)
        if why is not None:
            # Its feed subscription could not be opened (or ended at once): answering the
            # subscribe would promise updates nobody sends. The next subscribe opens it again.
            self._readers.pop(ref.agent_id, None)
            self._ready.pop(ref.agent_id, None)
            uris.discard(ref.uri)
            if not uris:
                self._uris.pop(ref.agent_id, None)
            message = f"the change feed of agent {ref.agent_id!r} is unavailable ({why}); subscribe again"
            raise MCPError(types.INTERNAL_ERROR, message)

    def remove(self, uri: str) -> bool:
        """Stop watching ``uri``; its agent's feed subscription ends with the last of its URIs."""
        for agent, uris in list(self._uris.items()):
            if uri in uris:
                uris.discard(uri)
                self._pending.pop(uri, None)
                if not uris:
                    del self._uris[agent]
                    task = self._readers.pop(agent, None)
                    if task is not None:
                        task.cancel()
                    ready = self._ready.pop(agent, None)
                    if ready is not None:
                        ready.set()
                return True
        return False

    async def _read(self, caller: Caller, agent: str) -> None:
        changes = self._changes(caller, agent)
        try:
            async for entry in changes:
                if entry.get("type") == READY:
                    ready = self._ready.get(agent)
                    if ready is not None:
                        ready.set()
                    continue
                watched = self._uris.get(agent, set())
                hits = set(watched) if entry.get("type") == RESYNC else touched(entry) & watched
                for uri in hits:
                    self._pending[uri] = None
                if hits:
                    self._wake.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self._readers.get(agent) is asyncio.current_task():
                self._failed[agent] = f"{type(exc).__name__}: {exc}"
            log.exception("the change feed of agent %r failed; its subscriptions get no more updates", agent)
        finally:
            if self._readers.get(agent) is asyncio.current_task():
                self._failed.setdefault(agent, "it ended")  # before the ready below: a waiting add sees it
            ready = self._ready.get(agent)
            if ready is not None:
                ready.set()  # nobody waits for a reader that has ended
            aclose = getattr(changes, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    async def updates(self) -> AsyncIterator[str]:
        """The URIs that changed, each once per change seen since it was last yielded."""
        while not self._closed:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                uri = next(iter(self._pending))
                del self._pending[uri]
                yield uri

    async def close(self) -> None:
        """Release every feed subscription; idempotent."""
        self._closed = True
        self._wake.set()
        tasks = list(self._readers.values())
        self._readers.clear()
        for ready in self._ready.values():
            ready.set()
        self._ready.clear()
        self._failed.clear()
        self._uris.clear()
        self._pending.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def source_changes(source: FeedSource, buffer: int = DEFAULT_BUFFER) -> AgentChanges:
    """An agent's live events from a change feed (``GET /v1/events``'s source: the embedded
    engine's fan-out, or the Kafka router's topic reader). A subscription the feed cuts off (it
    fell behind, or could not read on) resubscribes at the position it was cut, so no change
    goes unannounced (pausing, longer each time, when it is cut again where it was); if that
    position cannot be read any more, or the feed is briefly unavailable, it resubscribes live
    and says :data:`RESYNC`."""

    async def changes(caller: Caller, agent: str) -> AsyncIterator[Mapping[str, Any]]:
        at: str | None = None
        agents = frozenset({agent})
        stuck = 0  # cut-offs in a row at the same position (a record the feed cannot read)
        while True:
            if stuck:
                await asyncio.sleep(min(RETRY_MAX_SECONDS, RETRY_FIRST_SECONDS * 2 ** (stuck - 1)))
            try:
                stream = await source.open(FeedRequest(agents, None, at, None, None, buffer))
            except (PositionError, FeedUnavailable) as exc:
                if at is None:
                    raise
                log.warning("resubscribing agent %r's changes live: %s", agent, exc)
                at = None
                yield {"type": RESYNC, "scope": {"agent_id": agent}}
                continue
            try:
                yield {"type": READY, "scope": {"agent_id": agent}}
                while batch := await stream.next_batch():
                    for item in batch:
                        yield orjson.loads(item.data)
                return  # the feed ended (the engine is closing)
            except FeedCutOff as cut:
                stuck = stuck + 1 if cut.position == at else 0
                at = cut.position
            finally:
                stream.close()

    return changes


# -- the MCP handlers ---------------------------------------------------------------------------

CallerOf = Callable[[Any], Caller]
"""The caller of a request, from the handler's context; raises MCPError to refuse it."""

_WATCH_KEY = "memstream/resource-watch"


def _connection(ctx: Any) -> Connection | None:
    """The connection a request came on. The SDK hands lowlevel handlers a per-request session;
    the connection (its standalone channel to the client, its teardown stack) is that session's."""
    conn = getattr(ctx.session, "_connection", None)
    return conn if isinstance(conn, Connection) else None


async def _announce(watch: ResourceWatch, conn: Connection) -> None:
    async for uri in watch.updates():
        await conn.send_resource_updated(uri)  # best effort: never raises, drops if nobody listens


async def _release(watch: ResourceWatch, pump: asyncio.Task[None]) -> None:
    pump.cancel()
    await watch.close()
    with contextlib.suppress(asyncio.CancelledError):
        await pump


def connection_watch(ctx: Any, changes: AgentChanges) -> ResourceWatch:
    """The watch of the request's connection, made on first use and released with the connection
    (stdio: when stdin closes; stateful HTTP: DELETE or the session's idle timeout)."""
    conn = _connection(ctx)
    if conn is None or not conn.has_standalone_channel:
        raise MCPError(
            types.INVALID_REQUEST,
            "resources/subscribe needs a connection the server can notify: stdio, or streamable HTTP "
            "with a session (send the Mcp-Session-Id the initialize answer carried); on 2026-07-28 "
            "use subscriptions/listen",
        )
    watch = conn.state.get(_WATCH_KEY)
    if isinstance(watch, ResourceWatch):
        return watch
    watch = ResourceWatch(changes)
    conn.state[_WATCH_KEY] = watch
    pump = asyncio.create_task(_announce(watch, conn))
    conn.exit_stack.push_async_callback(_release, watch, pump)
    return watch


def resource_handlers(call: ToolCall, caller_of: CallerOf, changes: AgentChanges | None) -> dict[str, Any]:
    """The ``on_*`` resource handlers of a lowlevel ``Server``. Without ``changes`` (no feed)
    resources are read-only: no subscribe handler, so no ``subscribe`` capability."""

    async def on_list_resources(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        return await list_resources(call, caller_of(ctx), params.cursor if params is not None else None)

    async def on_list_templates(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=TEMPLATES)

    async def on_read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        return await read_resource(call, caller_of(ctx), params.uri)

    handlers: dict[str, Any] = {
        "on_list_resources": on_list_resources,
        "on_list_resource_templates": on_list_templates,
        "on_read_resource": on_read_resource,
    }
    if changes is None:
        return handlers
    feed = changes

    async def on_subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        caller = caller_of(ctx)
        ref = parse_uri(params.uri)
        watch = connection_watch(ctx, feed)
        await read_json(call, caller, ref)  # the caller may read it, and it exists
        await watch.add(caller, ref)
        return types.EmptyResult()

    async def on_unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        conn = _connection(ctx)
        watch = conn.state.get(_WATCH_KEY) if conn is not None else None
        if isinstance(watch, ResourceWatch):
            with contextlib.suppress(MCPError):
                watch.remove(parse_uri(params.uri).uri)
        return types.EmptyResult()

    async def on_listen(ctx: Any, params: types.SubscriptionsListenRequestParams) -> types.SubscriptionsListenResult:
        rid = ctx.request_id
        if rid is None:
            raise MCPError(types.INVALID_REQUEST, "subscriptions/listen needs a request id")
        caller = caller_of(ctx)
        wanted = list(params.notifications.resource_subscriptions or ())
        if len(wanted) > MAX_WATCHED:
            raise _invalid(f"too many resource subscriptions: at most {MAX_WATCHED} per listen stream")
        refs = [parse_uri(u) for u in wanted]
        for ref in refs:
            await read_json(call, caller, ref)  # the caller may read each, and each exists
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: rid}
        uris = list(dict.fromkeys(r.uri for r in refs))
        # Only resource updates are honoured: memstream's tools, prompts and resource list never
        # change while it runs (the list of agents does; list again to see it).
        honored = types.SubscriptionFilter(resource_subscriptions=uris or None)
        watch = ResourceWatch(feed)
        try:
            for ref in refs:
                await watch.add(caller, ref)
            ack = types.SubscriptionsAcknowledgedNotificationParams(notifications=honored, _meta=meta)
            await ctx.session.send_notification(
                types.SubscriptionsAcknowledgedNotification(params=ack), related_request_id=rid
            )
            async for uri in watch.updates():
                note = types.ResourceUpdatedNotificationParams(uri=uri, _meta=meta)
                await ctx.session.send_notification(
                    types.ResourceUpdatedNotification(params=note), related_request_id=rid
                )
        finally:
            await watch.close()
        return types.SubscriptionsListenResult(_meta=meta)

    handlers.update(
        on_subscribe_resource=on_subscribe,
        on_unsubscribe_resource=on_unsubscribe,
        on_subscriptions_listen=on_listen,
    )
    return handlers
