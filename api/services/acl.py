"""Access control: per-client bearer tokens and per-agent grants (docs/security.md).

The ACL file is CPersona 2.6's (``cpersona/acl.py``), read by the same rules, so one file can
serve both servers::

    {"clients": [
        {"client_id": "orchestrator", "token": "${ORCH_TOKEN}", "grants": {"*": "read-write"}},
        {"client_id": "support-bot", "token": "s3cret-support", "grants": {"support": "read-write", "*": "read"}},
        {"client_id": "local", "token": null, "grants": {"*": "read-write"}}
    ]}

* A grant is ``none`` < ``read`` < ``read-write`` per agent; ``*`` is every agent. An exact grant
  beats the wildcard in both directions (``{"*": "read-write", "prod": "none"}`` cannot reach
  prod). A demand on every agent at once (a sweep: a listing without ``agent_id``, a health
  check of the whole store) is met only at the weakest level the client's grants allow, and
  only when the client holds a wildcard grant: named grants never add up to ``*``.
* ``local`` is the principal of MCP over stdio (no credential: the peer is whoever spawned the
  process); it must not carry a token. Without a ``local`` row, stdio calls are refused.
* ``token`` may be a whole ``${ENV_VAR}`` reference. Tokens are compared in constant time
  against every entry and never logged. ``"token": null`` (CPersona: a principal an OAuth
  resolver asserts) loads, but no memstream caller can present it.
* Admin (memstream): tools flagged ``admin`` need the admin grant. A client is admin when its
  row says ``"admin": true`` (a memstream extension: CPersona refuses a file holding that key),
  or, when the row has no ``admin`` key, when it holds read-write on every agent at once
  (``"*": "read-write"`` with no narrower exception) -- the grant CPersona requires for its own
  whole-store operations. ``"admin": false`` withholds it from such a client.

Any defect in the file raises :class:`AclConfigError`; the server refuses to start rather than
serve a policy other than the one written. ``per_subject: true`` (CPersona's OAuth subject
partitioning) is refused for the same reason: memstream cannot honour it.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from memstream.streams.events import parse_ref

log = logging.getLogger(__name__)

NONE, READ, WRITE, ADMIN = 0, 1, 2, 3
LEVELS = {"none": NONE, "read": READ, "read-write": WRITE}
LEVEL_NAMES = {NONE: "none", READ: "read", WRITE: "read-write", ADMIN: "admin"}
WILDCARD = "*"
LOCAL_CLIENT_ID = "local"  # MCP over stdio (CPersona's reserved stdio principal)

_CLIENT_KEYS = {"client_id", "token", "grants", "per_subject", "admin"}


class AclConfigError(Exception):
    """The ACL file is missing, unreadable or malformed: startup must fail (never degrade)."""


def effective_permission(grants: Mapping[str, int], agent: str) -> int:
    """CPersona's rule: exact beats wildcard; a demand on ``*`` is met at the weakest grant."""
    if agent == WILDCARD:
        return min(grants.values()) if WILDCARD in grants else NONE
    if agent in grants:
        return grants[agent]
    return grants.get(WILDCARD, NONE)


@dataclass(frozen=True)
class Demand:
    """What a call needs: ``level`` on ``agent`` (``*``: every agent; ``""``: no agent's data)."""

    agent: str
    level: int
    named: bool = True  # False: not an agent the caller named (not echoed in a denial)
    owner: bool = False  # the owner of a record the call names: unmet, the record is answered as missing


@dataclass(frozen=True)
class Client:
    client_id: str
    grants: Mapping[str, int]
    admin: bool

    def permits(self, demand: Demand) -> bool:
        if demand.level == ADMIN:
            return self.admin
        if demand.agent == "":
            return True
        return effective_permission(self.grants, demand.agent) >= demand.level


@dataclass(frozen=True)
class AclConfig:
    path: str
    clients: Mapping[str, Client]
    tokens: tuple[tuple[bytes, str], ...]  # (token, client_id)

    def authenticate(self, presented: str | None) -> str | None:
        """The client a bearer token names, or None. Visits every entry (constant time per
        entry, no early exit) and compares bytes, so a hostile header never raises."""
        if not presented:
            return None
        given = presented.encode("utf-8", "surrogatepass")
        matched = None
        for token, client_id in self.tokens:
            if hmac.compare_digest(given, token):
                matched = client_id
        return matched

    def client(self, client_id: str) -> Client | None:
        return self.clients.get(client_id)


def _unpresentable(token: str) -> str | None:
    if not token.isascii():
        return "contains non-ASCII characters"
    if token != token.strip():
        return "has leading or trailing whitespace (often a trailing newline)"
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in token):
        return "contains a control character"
    return None


def _resolve_token(raw: str, client_id: str, env: Mapping[str, str]) -> str:
    ref = re.fullmatch(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", raw)
    if ref:
        raw = env.get(ref[1], "")
        if not raw:
            raise AclConfigError(f"ACL client {client_id!r}: token environment variable {ref[1]} is unset or empty")
    elif "${" in raw:
        raise AclConfigError(f"ACL client {client_id!r}: token must use a whole-string ${{ENV_VAR}} reference")
    reason = _unpresentable(raw)
    if reason:
        raise AclConfigError(f"ACL client {client_id!r}: bearer token {reason}")
    return raw


def load_acl(path: str | Path, env: Mapping[str, str] | None = None) -> AclConfig:
    """Parse and validate an ACL file; any defect raises :class:`AclConfigError` (never a token)."""
    path = str(path)
    source = os.environ if env is None else env
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except OSError as exc:
        raise AclConfigError(f"ACL file {path!r} unreadable: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AclConfigError(f"ACL file {path!r} is not valid JSON: {exc}") from None
    try:
        mode = os.stat(path).st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning(
                "ACL file %s is group/world-accessible (mode %o); it holds credentials and should be private",
                path,
                stat.S_IMODE(mode),
            )
    except OSError:  # pragma: no cover - raced with deletion after a successful read
        pass
    if not isinstance(raw, dict) or set(raw) != {"clients"}:
        raise AclConfigError(f'ACL file {path!r}: top level must be exactly {{"clients": [...]}}')
    entries = raw["clients"]
    if not isinstance(entries, list) or not entries:
        raise AclConfigError(f'ACL file {path!r}: "clients" must be a non-empty list')

    clients: dict[str, Client] = {}
    tokens: list[tuple[bytes, str]] = []
    seen_tokens: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"ACL file {path!r}: clients[{i}]"
        if not isinstance(entry, dict):
            raise AclConfigError(f"{where} must be an object")
        unknown = set(entry) - _CLIENT_KEYS
        if unknown:
            raise AclConfigError(f"{where}: unknown keys {sorted(unknown)}")
        client_id = entry.get("client_id")
        if not isinstance(client_id, str) or not client_id or not client_id.isprintable() or len(client_id) > 256:
            raise AclConfigError(f"{where}: client_id must be a non-empty printable string (at most 256 chars)")
        if client_id in clients:
            raise AclConfigError(f"{where}: duplicate client_id {client_id!r}")
        grants_raw = entry.get("grants")
        if not isinstance(grants_raw, dict):
            raise AclConfigError(f"{where}: grants must be an object of agent -> none / read / read-write")
        grants: dict[str, int] = {}
        for agent, perm in grants_raw.items():
            if not agent:
                raise AclConfigError(f"{where}: empty grant key")
            if not isinstance(perm, str) or perm not in LEVELS:
                raise AclConfigError(
                    f"{where}: unknown permission {perm!r} for {agent!r} (expected one of {sorted(LEVELS)})"
                )
            grants[agent] = LEVELS[perm]
        if entry.get("per_subject", False) is not False:
            raise AclConfigError(f"{where}: per_subject (OAuth subject partitioning) is not supported by memstream")
        admin_raw = entry.get("admin")
        if admin_raw is not None and not isinstance(admin_raw, bool):
            raise AclConfigError(f"{where}: admin must be true or false")

        if client_id == LOCAL_CLIENT_ID:
            if entry.get("token") is not None:
                raise AclConfigError(f"{where}: {LOCAL_CLIENT_ID!r} is the stdio principal and must not carry a token")
        elif "token" not in entry:
            raise AclConfigError(
                f"{where}: token must be a non-empty string (or null for a principal no bearer token presents)"
            )
        elif entry["token"] is not None:
            token_raw = entry["token"]
            if not isinstance(token_raw, str) or not token_raw:
                raise AclConfigError(f"{where}: token must be a non-empty string")
            token = _resolve_token(token_raw, client_id, source)
            if token in seen_tokens:
                raise AclConfigError(f"{where}: token duplicates another client's token")
            seen_tokens.add(token)
            tokens.append((token.encode("ascii"), client_id))
        else:
            log.warning("ACL client %r has a null token: no bearer token can authenticate it", client_id)

        admin = admin_raw if admin_raw is not None else effective_permission(grants, WILDCARD) >= WRITE
        clients[client_id] = Client(client_id, grants, admin)
    return AclConfig(path=path, clients=clients, tokens=tuple(tokens))


def load_configured(settings: Any) -> AclConfig | None:
    """The ACL the settings name (``MEMSTREAM_ACL_FILE``), or None: anonymous full access."""
    path = getattr(settings, "acl_file", None)
    if path is None or str(path) == "":
        return None
    config = load_acl(path)
    log.info("ACL mode: %d client(s) from %s", len(config.clients), config.path)
    return config


# -- what a call needs ----------------------------------------------------------------------------

# Tools scoped by their ``agent_id`` argument (omitted or '': every agent, a sweep).
AGENT_SCOPED = frozenset(
    {
        "recall",
        "recall_with_context",
        "reconstruct",
        "traverse",
        "association_graph",
        "get_contents",  # the handler answers only agent_id's refs (others come back in `missing`)
        "get_profile",
        "get_recall_precision",
        "list_memories",
        "list_episodes",
        "context_package",  # anchorId: the handler refuses another agent's anchor
        "context_packet",
        "check_contingent",  # refs: the handler reads only agent_id's
        "check_health",
        "audit_log",
        "store",
        "archive_episode",
        "update_profile",
        "set_recall_precision",
        "declare_associations",  # anchor_ref: decided inside agent_id's partition
        "delete_agent_data",
        "erase_memory",  # the handler erases only agent_id's record (decided in its partition)
        "erase_agent_data",
        "reembed",
        "export_memories",  # agent_id '' exports every agent: a sweep
    }
)
# Tools naming a record whose owner is looked up and checked too: (kind, argument).
RECORD_SCOPED = {
    "update_memory": ("mem", "memory_id"),
    "delete_memory": ("mem", "memory_id"),
    "lock_memory": ("mem", "memory_id"),
    "unlock_memory": ("mem", "memory_id"),
    "verify_memory": ("mem", "memory_id"),
    "delete_episode": ("ep", "episode_id"),
    "declare_standing": ("ref", "ref"),
    "history": ("ref", "ref"),
}
# Tools naming several agents in a list argument: the level on each one (fleet-wide reads).
AGENT_LISTS = {"recall_fleet": "agent_ids"}
# Tools touching no one agent's data, with the level they need on every agent.
# An import's file and a merge's two agents can name any agent: read-write on every one (and
# the admin grant, as for every admin tool).
PROCESS_WIDE = {"reembed_status": READ, "import_memories": WRITE, "merge_memories": WRITE}


# Tools any authenticated client may call: their handlers answer only what the caller may read
# (``list_agents`` names only the agents the caller's grants reach).
CALLER_FILTERED = frozenset({"list_agents"})


def classified(name: str) -> bool:
    return (
        name in AGENT_SCOPED
        or name in RECORD_SCOPED
        or name in AGENT_LISTS
        or name in PROCESS_WIDE
        or name in CALLER_FILTERED
    )


def _agent(value: Any) -> str:
    return value if isinstance(value, str) and value else WILDCARD


class RecordOwners(Protocol):
    """Who owns a record named by id: an engine (from its read models, api/services/owners.py),
    or Kafka mode's router (it asks the worker holding the record's partition)."""

    async def record_owner(self, kind: str, ident: int) -> str | None: ...


class ToolFacts(Protocol):
    """What the policy needs to know of a tool."""

    @property
    def name(self) -> str: ...

    @property
    def writes(self) -> bool: ...

    @property
    def admin(self) -> bool: ...


class Principal(Protocol):
    """Who calls, as the face authenticated them."""

    @property
    def client_id(self) -> str: ...

    @property
    def authenticated(self) -> bool: ...


async def demands(owners: RecordOwners, tool: ToolFacts, args: BaseModel) -> list[Demand]:
    """The grants a validated call needs. Unclassified tools need the admin grant (fail closed)."""
    name = tool.name
    level = WRITE if tool.writes else READ
    out: list[Demand] = []
    if tool.admin or not classified(name):
        out.append(Demand("", ADMIN, named=False))
        if not classified(name):
            log.warning("ACL: tool %s is not classified; only admins may call it", name)
            return out
    if name in CALLER_FILTERED:
        out.append(Demand("", level, named=False))
    elif name in PROCESS_WIDE:
        out.append(Demand(WILDCARD, PROCESS_WIDE[name]))
    elif name in AGENT_SCOPED:
        out.append(Demand(_agent(getattr(args, "agent_id", None)), level))
    elif name in AGENT_LISTS:
        agents = getattr(args, AGENT_LISTS[name], None) or [None]
        out.extend(Demand(agent, level) for agent in dict.fromkeys(_agent(a) for a in agents))
    else:
        kind, field = RECORD_SCOPED[name]
        claimed = getattr(args, "agent_id", None) or ""
        value = getattr(args, field, None)
        owner: str | None = None
        parsed = True
        if value is None:
            parsed = False
        else:
            try:
                if kind == "ref":
                    kind, ident = parse_ref(value)
                else:
                    ident = int(value)
            except (ValueError, TypeError):
                parsed = False
            else:
                owner = await owners.record_owner(kind, ident)
        if claimed:
            out.append(Demand(claimed, level))
        if owner is not None and owner != claimed:
            out.append(Demand(owner, level, named=False, owner=True))
        if not claimed and owner is None:
            # Nothing says whose record this is (yet): a record created between this check and
            # the handler's own lookup must not slip through, so the call needs every agent.
            # An unparseable ref touches nothing (the handler refuses it): no agent demand.
            out.append(Demand(WILDCARD if parsed else "", level))
    return out


def may_sweep(config: AclConfig | None, client_id: str, level: int = READ) -> bool:
    """Whether a client may reach every agent at once at ``level`` (anyone may, without an ACL)."""
    if config is None:
        return True
    client = config.client(client_id)
    return client is not None and client.permits(Demand(WILDCARD, level))


def as_missing(needed: list[Demand]) -> list[Demand]:
    """What the call would need if the record it names did not exist: an owner's demand goes,
    and with no agent named, the call needs every agent (as ``demands`` asks of an id nobody
    owns)."""
    rest = [d for d in needed if not d.owner]
    owners = [d for d in needed if d.owner]
    if owners and not any(d.named and d.agent for d in rest):
        rest.append(Demand(WILDCARD, owners[0].level))
    return rest


@dataclass(frozen=True)
class Refusal:
    """Why ``authorize`` stops a call. ``demand`` is the unmet demand the caller is answered
    with (None: none, the call runs as it would on a record that does not exist); ``hidden`` is
    the unmet demand of a named record's owner, which the caller is never told of (the record
    is answered as missing, so its id cannot be probed) but the audit trail records."""

    demand: Demand | None
    why: str
    hidden: Demand | None = None
    hidden_why: str = ""


def denial(name: str, client_id: str, demand: Demand, detail: str) -> dict[str, Any]:
    """``{ok: false, error: "permission_denied", tool, client_id}`` (+ agent_id, required, detail)."""
    body: dict[str, Any] = {"ok": False, "error": "permission_denied", "tool": name}
    if demand.named and demand.agent:
        body["agent_id"] = demand.agent
    if demand.level:
        body["required"] = LEVEL_NAMES[demand.level]
    body["client_id"] = client_id
    if detail:
        body["detail"] = detail
    if name in ("store", "declare_associations"):
        body["result"] = "rejected"  # these promise `result` on every answer (W1)
    if name == "store":
        body["reason"] = "permission_denied"
    return body


def explain(client: Client | None, demand: Demand) -> str:
    if client is None:
        return "this client has no row in the ACL file, so it reaches no agent"
    if demand.level == ADMIN:
        return "this tool needs the admin grant (docs/security.md)"
    if demand.agent == WILDCARD:
        if WILDCARD not in client.grants:
            return "the call reaches every agent (name an agent_id to scope it); named grants never add up to '*'"
        return "the call reaches every agent, and a sweep is met only at the weakest grant this client holds"
    if not demand.named:
        return "the record named belongs to an agent this client may not reach at this level"
    return f"this client's grant on this agent is {LEVEL_NAMES[effective_permission(client.grants, demand.agent)]}"


async def authorize(
    owners: RecordOwners, config: AclConfig, caller: Principal, tool: ToolFacts, args: BaseModel
) -> Refusal | None:
    """None when the call may run; else the first unmet demand and why.

    A record owned by an agent the client may not reach is answered as a record that does not
    exist (docs/security.md, "Records are checked against their owner"): the call is judged by
    what it would need then (``as_missing``), and the owner's unmet demand is kept as
    ``hidden`` for the audit trail. With an agent named, that runs the call on the named agent
    alone, whose decider finds no such record: the very answer an unknown id gets."""
    if not caller.authenticated:
        # A face that authenticated nobody reached dispatch in ACL mode: a wiring bug; deny.
        log.error("ACL: unauthenticated caller %r reached %s while ACL mode is active", caller.client_id, tool.name)
        return Refusal(Demand("", READ, named=False), "no authenticated principal")
    client = config.client(caller.client_id)
    needed = await demands(owners, tool, args)
    for demand in needed:
        if client is None or not client.permits(demand):
            if client is None or not demand.owner:
                return Refusal(demand, explain(client, demand))
            hidden_why = explain(client, demand)
            for instead in as_missing(needed):
                if not client.permits(instead):
                    return Refusal(instead, explain(client, instead), demand, hidden_why)
            return Refusal(None, "", demand, hidden_why)
    return None
