"""The one entry point faces use to run a tool by name with untrusted arguments."""

from __future__ import annotations

import json
import logging
import math
import re
import time
from typing import Any, TypeVar, overload

import orjson
from pydantic import ValidationError

from memstream.api.services.acl import WILDCARD, AclConfig, authorize, denial
from memstream.api.services.embedding import EmbeddingError
from memstream.api.services.failures import FAILURE_CODE, REFUSAL_AUDITED
from memstream.api.services.logs import log_call
from memstream.api.services.metrics import FACE
from memstream.api.services.ports import Audited, Engine, Guarded, ToolHost
from memstream.api.tools.registry import REGISTRY, Caller, HandlerOf, Tool, ToolArgs
from memstream.streams.events import Actor, AuditRecord, Scope, new_id, utcnow
from memstream.streams.log.port import LogUnavailable

log = logging.getLogger(__name__)

H = TypeVar("H", bound=ToolHost)


def failure(error: str, **extra: Any) -> dict[str, Any]:
    return {"ok": False, "error": error, **extra}


def describe_validation(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(x) for x in e["loc"]) or "arguments"
        parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts[:8])


def list_tools() -> list[dict[str, Any]]:
    """Every tool as MCP's tools/list describes it."""
    return [
        {"name": t.name, "description": t.description, "inputSchema": t.schema()}
        for t in sorted(REGISTRY.values(), key=lambda t: t.name)
    ]


async def dispatch(engine: Engine, caller: Caller, name: str, raw: Any) -> dict[str, Any]:
    """Run tool ``name``. Never raises: every failure comes back as ``ok: false`` + ``error``."""
    body, _ = await run_tool(engine, caller, name, raw)
    return body


@overload
async def run_tool(engine: Engine, caller: Caller, name: str, raw: Any) -> tuple[dict[str, Any], str | None]: ...


@overload
async def run_tool(
    engine: H, caller: Caller, name: str, raw: Any, *, handler: HandlerOf[H]
) -> tuple[dict[str, Any], str | None]: ...


async def run_tool(
    engine: ToolHost, caller: Caller, name: str, raw: Any, *, handler: HandlerOf[Any] | None = None
) -> tuple[dict[str, Any], str | None]:
    """``dispatch`` plus a failure code for faces that have statuses: invalid, unknown_tool,
    not_found, locked, conflict, too_large, log_unavailable, embedding_unavailable, internal.

    ``handler`` replaces the tool's own, for a face that answers a tool itself over another
    engine (Kafka mode's router runs the file transfers across workers, api/kafka/router/transfers.py):
    the arguments are validated, refusals audited and failures shaped exactly the same.

    Every call is measured (``api/services/metrics.py``) and logged (``api/services/logs.py``): tool,
    face, client, agent, duration and outcome, never the arguments' content."""
    started = time.perf_counter()
    body, code = await _run_tool(engine, caller, name, raw, handler)
    seconds = time.perf_counter() - started
    tool = REGISTRY.get(name)
    label = name if tool is not None else "unknown"  # unknown names must not grow the label set
    face = FACE.get()
    metrics = engine.metrics
    if metrics is not None:
        metrics.observe_call(label, face, seconds, code)
    log_call(label, face, caller.client_id, _agent_of(raw), seconds, code, bool(tool and tool.writes))
    return body, code


def _agent_of(raw: Any) -> str | None:
    """The agent a call names (an id, never content), for the call's log line."""
    if not isinstance(raw, dict):
        return None
    for key in ("agent_id", "target_agent_id", "source_agent_id"):
        value = raw.get(key)
        if isinstance(value, str) and value:
            return _printable(value[:256])
    return None


async def _run_tool(
    engine: ToolHost, caller: Caller, name: str, raw: Any, handler: HandlerOf[Any] | None = None
) -> tuple[dict[str, Any], str | None]:
    """``handler`` (else the tool's own) takes ``engine``: ``run_tool``'s overloads pair them."""
    tool = REGISTRY.get(name)
    if tool is None:
        await _audit(engine, caller, name[:100], raw, "unknown tool")
        return failure(f"Unknown tool: {name}"), "unknown_tool"
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        return await _refuse(engine, caller, name, raw, "arguments must be a JSON object"), "invalid"
    if _too_deep(raw):
        why = f"arguments are nested too deeply (more than {MAX_DEPTH} levels of objects and arrays)"
        return await _refuse(engine, caller, name, raw, why), "invalid"
    bad = _first_surrogate(raw)
    if bad is not None:
        why = f"{bad} is not valid UTF-8 (it holds an unpaired surrogate)"
        return await _refuse(engine, caller, name, raw, why), "invalid"
    number = bad_number(raw)
    if number is not None:
        return await _refuse(engine, caller, name, raw, number), "invalid"
    try:
        args = tool.args.model_validate(raw)
    except ValidationError as exc:
        return await _refuse(engine, caller, name, raw, f"invalid arguments: {describe_validation(exc)}"), "invalid"
    acl = engine.acl
    if acl is not None:  # ACL mode (api/services/acl.py): the caller's grants must cover the call
        denied = await enforce_grants(engine, acl, caller, tool, args, raw)
        if denied is not None:
            return denied, "permission_denied"
    REFUSAL_AUDITED.set(False)
    FAILURE_CODE.set(None)
    try:
        run: HandlerOf[Any] = handler or tool.handler
        body = await run(engine, caller, args)
    except LogUnavailable as exc:
        log.error("tool %s: log unavailable: %s", name, exc)
        return failure(f"log_unavailable: {exc}"), "log_unavailable"
    except EmbeddingError as exc:
        log.error("tool %s: embedding failed: %s", name, exc)
        return failure(f"embedding_unavailable: {exc}"), "embedding_unavailable"
    except Exception:
        log.exception("tool %s failed", name)
        return failure("internal error; the server log has the details"), "internal"
    if body.get("ok") is not False:
        return body, None
    if not REFUSAL_AUDITED.get():  # refused by the handler before any command: audit it here
        await _audit(engine, caller, name, raw, str(body.get("error") or body.get("reason") or "refused"))
    return body, FAILURE_CODE.get() or "invalid"


def validated(name: str, raw: Any) -> tuple[Tool, ToolArgs] | None:
    """The tool and its validated arguments, or None when ``run_tool`` refuses the call before
    any grant is checked (unknown tool, arguments that are not a valid object). For a face that
    enforces grants before handing a call on (Kafka mode's router, api/kafka/router/gate.py): what this
    refuses it hands on unchanged, to be refused and audited as invalid as embedded mode does."""
    tool = REGISTRY.get(name)
    if tool is None:
        return None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict) or _too_deep(raw) or _first_surrogate(raw) is not None or bad_number(raw):
        return None
    try:
        return tool, tool.args.model_validate(raw)
    except ValidationError:
        return None


async def enforce_grants(
    engine: Guarded, acl: AclConfig, caller: Caller, tool: Tool, args: ToolArgs, raw: Any
) -> dict[str, Any] | None:
    """None when the caller's grants cover the validated call; else the denial, once its audit
    record is written through ``engine.refuse`` (the same record in every mode)."""
    refused = await authorize(engine, acl, caller, tool, args)
    if refused is None:
        return None
    name = tool.name
    # The unmet demand the audit record names: a hidden owner's (the caller is answered as if
    # the record did not exist, but operators see who reached for whose record), else the one
    # the caller is told of.
    audited, why = (refused.hidden, refused.hidden_why) if refused.hidden is not None else (refused.demand, refused.why)
    assert audited is not None, "a refusal names an unmet demand"
    where = audited.agent if audited.agent not in ("", WILDCARD) else None
    log.warning("ACL denial: client=%s tool=%s agent=%s", caller.client_id, name, audited.agent or "-")
    # A fresh command id: the audit record of a refusal answers retries of its command id
    # (W9), and a denied caller must not pin an outcome on an id an authorized one may use.
    await _audit(
        engine,
        caller,
        name,
        raw,
        f"permission_denied: {why}",
        error="permission_denied",
        agent=where,
        fresh=True,
    )
    if refused.demand is None:  # the named agent's own call: it finds no such record
        return None
    return denial(name, caller.client_id, refused.demand, refused.why)


async def refuse(engine: Audited, caller: Caller, name: str, raw: Any, why: str) -> dict[str, Any]:
    """Refuse a call a face could not even hand to ``run_tool`` (e.g. an unparseable body):
    audited like any other refusal, answered in the tool's failure shape."""
    return await _refuse(engine, caller, name[:100], raw, why)


async def _refuse(engine: Audited, caller: Caller, name: str, raw: Any, why: str) -> dict[str, Any]:
    """Bad input changes nothing but the audit trail: who sent what, and why it was refused."""
    await _audit(engine, caller, name, raw, why)
    return refusal(name, why)


def refusal(name: str, why: str) -> dict[str, Any]:
    """A refused call's answer in its tool's failure shape (``store`` has its own, CPersona's)."""
    if name == "store":
        return {"ok": False, "result": "rejected", "reason": why}
    return failure(why)


async def _audit(
    engine: Audited,
    caller: Caller,
    name: str,
    raw: Any,
    why: str,
    *,
    error: str = "invalid",
    agent: str | None = None,
    fresh: bool = False,
) -> None:
    if agent is None:
        agent = raw.get("agent_id") if isinstance(raw, dict) else None
    command_id = raw.get("command_id") if not fresh and isinstance(raw, dict) else None
    if not isinstance(command_id, str) or not 0 < len(command_id) <= 200 or _first_surrogate(command_id):
        command_id = None  # not a command id the log can hold (or a denial): the refusal gets its own
    why = _printable(why)
    record = AuditRecord(
        id=new_id(),
        kind="refused",
        command=_printable(name),
        command_id=command_id or new_id(),
        scope=Scope(agent_id=_printable(agent) if isinstance(agent, str) and 0 < len(agent) <= 256 else "-"),
        actor=Actor(client_id=caller.client_id, session_id=caller.session_id),
        occurred_at=utcnow(),
        outcome={"result": "rejected", "error": error, "reason": why},
        request=_summarize(raw),
    )
    try:
        await engine.refuse(record)
    except Exception as exc:  # auditing must not turn a clean refusal into a crash
        log.error("could not audit a refused %s call: %s", name, exc)


# -- numbers ---------------------------------------------------------------------------------
#
# Every integer a tool accepts fits a signed 64-bit integer (ids, offsets, and any number inside
# metadata or declarations): the log's SQLite columns and orjson hold no more. NaN and Infinity
# are not JSON numbers; a parser that lets them through (MCP's) would hand them on, and orjson
# would store them as null. Both are refused by name, whichever face the call came through.

MIN_INT, MAX_INT = -(2**63), 2**63 - 1


def bad_number(raw: Any) -> str | None:
    """Why the arguments hold a number no tool accepts (an integer past 64 bits, NaN or an
    infinity), naming where it is; None when every number is fine. Iterative: any depth is safe."""
    stack: list[tuple[Any, str]] = [(raw, "")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, dict):
            items = list(node.items())
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in reversed(items))
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(node))))
        elif isinstance(node, bool):
            continue
        elif isinstance(node, int) and not MIN_INT <= node <= MAX_INT:
            shown = str(node) if node.bit_length() <= 128 else f"an integer of {node.bit_length()} bits"
            return f"{where or 'arguments'}: {shown} is out of range: integers must fit in 64 bits (-2^63 .. 2^63-1)"
        elif isinstance(node, float) and not math.isfinite(node):
            shown = "NaN" if math.isnan(node) else "Infinity" if node > 0 else "-Infinity"
            return f"{where or 'arguments'}: {shown} is not a JSON number (send a finite number)"
    return None


# Runs of 19 digits or more: an integer orjson would read as a float (past 64 bits), or a long
# fraction (harmless to read again).
_LONG_NUMBER = re.compile(rb"\d{19,}")


def parse_arguments(raw: bytes) -> Any:
    """A JSON body of tool arguments, numbers as they were written: an integer past 64 bits
    stays an integer and NaN / Infinity a float (orjson would round the first to a float and
    refuse the second), so ``run_tool`` refuses them by name, as it does over MCP; a lone
    surrogate escape is kept for dispatch to refuse by name too. ``{}`` for an empty body;
    raises ``ValueError`` (orjson's message) for anything that is not JSON."""
    if not raw.strip():
        return {}
    try:
        fast = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        error: ValueError | None = exc
    else:
        if not _LONG_NUMBER.search(raw):
            return fast
        error = None
    try:
        return json.loads(raw.decode("utf-8"))  # the stdlib keeps big integers, NaN, Infinity, lone surrogates
    except (ValueError, RecursionError):
        if error is None:
            return fast
        raise error from None


def encode_arguments(args: Any) -> bytes:
    """Tool arguments as JSON to hand on (Kafka mode's router to a worker), numbers as they came:
    orjson writes NaN as null and refuses integers past 64 bits, so arguments holding either
    (or a lone surrogate) are written by the stdlib, for the receiving dispatch to refuse."""
    if bad_number(args) is None:
        try:
            return orjson.dumps(args)
        except TypeError:
            pass
    return json.dumps(args, ensure_ascii=True).encode()


# Deeper arguments are refused before validation: no tool takes them, and serialising them
# (metadata, audit records) would hit the JSON encoders' recursion limits.
MAX_DEPTH = 64


def _too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether objects and arrays nest more than ``limit`` levels (iterative: any depth is safe)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _first_surrogate(value: Any, where: str = "arguments", depth: int = 0) -> str | None:
    """Where the first string that cannot be UTF-8 encoded is, if any (keys included)."""
    if depth > 64:
        return None
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            found = _first_surrogate(k, f"{where} key", depth + 1) or _first_surrogate(v, f"{k}", depth + 1)
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _first_surrogate(v, f"{where}[{i}]", depth + 1)
            if found:
                return found
    return None


def _printable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _repr(value: Any, limit: int) -> str:
    """A bounded description of any value: never raises (deep nesting, huge integers)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 63:
        return f"<integer of {value.bit_length()} bits>"
    try:
        return repr(value)[:limit]
    except (RecursionError, ValueError):
        return f"<{type(value).__name__} too deep or too large to show>"


def _summarize(raw: Any, limit: int = 512) -> dict[str, Any]:
    if not isinstance(raw, dict):
        return {"_raw": _printable(_repr(raw, limit))}
    out: dict[str, Any] = {}
    for k, v in list(raw.items())[:32]:
        plain = (
            isinstance(v, str | bool)
            or v is None
            or (isinstance(v, float) and math.isfinite(v))
            or (isinstance(v, int) and v.bit_length() <= 63)
        )
        text = v if plain else _repr(v, limit)
        if isinstance(text, str):
            text = _printable(text[:limit] + ("…" if len(text) > limit else ""))
        out[_printable(str(k)[:64])] = text
    return out
