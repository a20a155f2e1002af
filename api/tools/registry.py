"""The tool registry: one table of operations that every face (MCP, HTTP, CLI) serves.

A tool is a name, a pydantic model of its arguments, a handler, and whether it writes or needs
an admin grant. Faces never call handlers directly: they go through ``dispatch``, which turns
every kind of bad input into the documented failure shape (``ok: false`` + ``error``), audits
the refusal, and never lets an exception out as a bare 500 or a stack trace (W7, W8, H4).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict


class ToolArgs(BaseModel):
    """Base for tool arguments: unknown fields are an error, not silently ignored (W8)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling, as the face authenticated them."""

    client_id: str = "anonymous"
    session_id: str = ""


Handler = Callable[[Any, Caller, Any], Awaitable[dict[str, Any]]]


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
        return self.input_schema or self.args.model_json_schema()


REGISTRY: dict[str, Tool] = {}


def register(tool: Tool) -> Tool:
    if tool.name in REGISTRY:
        raise ValueError(f"tool {tool.name} registered twice")
    REGISTRY[tool.name] = tool
    return tool
