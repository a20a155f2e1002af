"""The tool registry: one table of operations that every face (MCP, HTTP, CLI) serves.

A tool is a name, a pydantic model of its arguments, a handler, and whether it writes or needs
an admin grant. Faces never call handlers directly: they go through ``dispatch``, which turns
every kind of bad input into the documented failure shape (``ok: false`` + ``error``), audits
the refusal, and never lets an exception out as a bare 500 or a stack trace (W7, W8, H4).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from memstream.api.services.ports import Engine


class ToolArgs(BaseModel):
    """Base for tool arguments: unknown fields are an error, not silently ignored (W8)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling, as the face authenticated them."""

    client_id: str = "anonymous"
    session_id: str = ""
    # True only when the face resolved client_id from a credential (ACL mode: a bearer token
    # or the stdio principal). In ACL mode dispatch refuses every call from a caller without it.
    authenticated: bool = False


H = TypeVar("H")
# A tool's handler, over what it runs on (``H``: an engine, or a face's stand-in for the tools it
# answers itself) with the tool's validated arguments (each tool has its own ``ToolArgs``).
HandlerOf = Callable[[H, Caller, Any], Awaitable[dict[str, Any]]]
Handler = HandlerOf[Engine]


@dataclass(frozen=True)
class Tool:
    name: str
    args: type[ToolArgs]
    handler: Handler
    description: str
    writes: bool = False
    admin: bool = False
    # The JSON schema advertised over MCP. For tools CPersona 2.6 also has, this is CPersona's
    # own schema, so an agent configured for it sees exactly what it expects.
    input_schema: dict[str, Any] = field(default_factory=dict)

    def schema(self) -> dict[str, Any]:
        return self.input_schema or mcp_schema(self.args)


def _simplify(node: Any) -> Any:
    """Pydantic's schema in the plain style MCP clients (and CPersona) use: an optional field is
    its type with a default, not ``anyOf [T, null]``; no titles."""
    if isinstance(node, list):
        return [_simplify(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _simplify(v) for k, v in node.items() if k != "title"}
    any_of = out.get("anyOf")
    if isinstance(any_of, list):
        non_null = [v for v in any_of if v != {"type": "null"}]
        if len(non_null) == 1 and len(non_null) < len(any_of):
            out.pop("anyOf")
            out = {**non_null[0], **out}
            if out.get("default", 0) is None:
                out.pop("default")
        elif len(non_null) < len(any_of):
            out["anyOf"] = non_null
    return out


def mcp_schema(args: type[BaseModel]) -> dict[str, Any]:
    schema = args.model_json_schema()
    defs = schema.pop("$defs", None)
    out: dict[str, Any] = _simplify(schema)
    if defs:
        out["$defs"] = _simplify(defs)
    out.setdefault("required", [])
    return out


REGISTRY: dict[str, Tool] = {}


def register(tool: Tool) -> Tool:
    if tool.name in REGISTRY:
        raise ValueError(f"tool {tool.name} registered twice")
    REGISTRY[tool.name] = tool
    return tool
