"""Writes ``methods.py``: one client method per tool of the registry, with the tool's argument names.

Run ``python -m memstream.client.codegen`` after adding or changing a tool;
tests/unit/test_client_surface.py fails while ``methods.py`` differs from what this writes.
"""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from memstream.api import tools as _tools  # noqa: F401  (registers every tool)
from memstream.api.tools.registry import REGISTRY, Tool

from .results import RESULTS

TARGET = Path(__file__).with_name("methods.py")

# Arguments that may also be given by position, in this order (the rest are keyword-only).
# A tool not named here takes its required arguments by position.
POSITIONAL: dict[str, tuple[str, ...]] = {
    "store": ("agent_id", "content"),
    "list_memories": ("agent_id",),
    "list_episodes": ("agent_id",),
    "history": ("ref",),
    "update_memory": ("memory_id", "content"),
}


def render_type(annotation: Any) -> str:
    """A field's type as the client spells it: constraints dropped (the server checks them),
    nested argument models as plain dicts (callers pass JSON-shaped values)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return render_type(args[0])
    if origin in (typing.Union, types.UnionType):
        parts: list[str] = []
        for arg in args:
            text = render_type(arg)
            if text not in parts:
                parts.append(text)
        if "None" in parts:
            parts.remove("None")
            parts.append("None")
        return " | ".join(parts)
    if origin is typing.Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin in (list, dict, tuple):
        return f"{origin.__name__}[{', '.join(render_type(a) for a in args)}]"
    if annotation is type(None) or annotation is None:
        return "None"
    if annotation is Any:
        return "Any"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "dict[str, Any]"
    if isinstance(annotation, type):
        return annotation.__name__
    raise TypeError(f"no client spelling for the argument type {annotation!r}")


def _default(field: FieldInfo) -> str:
    value = field.get_default(call_default_factory=True)
    if not isinstance(value, str | int | float | bool | type(None)):
        raise TypeError(f"no client spelling for the default {value!r}")
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _order(tool: Tool) -> tuple[list[str], list[str]]:
    fields = tool.args.model_fields
    positional = list(POSITIONAL.get(tool.name, [n for n, f in fields.items() if f.is_required()]))
    unknown = [n for n in positional if n not in fields]
    if unknown:
        raise ValueError(f"POSITIONAL names {unknown}, which {tool.name} does not take")
    return positional, [n for n in fields if n not in positional]


def _param(name: str, field: FieldInfo) -> str:
    text = f"{name}: {render_type(field.annotation)}"
    return text if field.is_required() else f"{text} = {_default(field)}"


def _signature(tool: Tool) -> str:
    fields = tool.args.model_fields
    positional, keywords = _order(tool)
    params = ["self"] + [_param(n, fields[n]) for n in positional]
    if keywords:
        params += ["*"] + [_param(n, fields[n]) for n in keywords]
    return ", ".join(params)


def _summary(tool: Tool) -> str:
    line = tool.description.strip().split("\n", 1)[0].strip().replace('"""', "'''").replace("\\", "\\\\")
    return line or f"The {tool.name} tool."


def _method(tool: Tool, is_async: bool) -> list[str]:
    result = RESULTS.get(tool.name)
    result_name = f"r.{result.__name__}" if result is not None else "r.Result"
    args = ", ".join(f'"{n}": {n}' for n in tool.args.model_fields)
    call = f'self._invoke("{tool.name}", {{{args}}})'
    prefix = "async def" if is_async else "def"
    awaited = f"await {call}" if is_async else call
    return [
        f"    {prefix} {tool.name}({_signature(tool)}) -> {result_name}:",
        f'        """{_summary(tool)}"""',
        f"        return {result_name}.model_validate({awaited})",
        "",
    ]


def render() -> str:
    tools = sorted(REGISTRY.values(), key=lambda t: t.name)
    out = [
        '"""The client\'s tool methods, one per tool of the registry (api/tools/registry.py).',
        "",
        "Written by api/client/codegen.py: do not edit by hand; run ``python -m memstream.client.codegen``.",
        '"""',
        "",
        "# ruff: noqa: E501",
        "",
        "from __future__ import annotations",
        "",
        "from typing import Any, Literal",
        "",
        "from . import results as r",
        "",
        "# Each tool's argument defaults: an argument left at its default is not sent.",
        "DEFAULTS: dict[str, dict[str, Any]] = {",
    ]
    for tool in tools:
        fields = tool.args.model_fields
        defaults = ", ".join(f'"{n}": {_default(f)}' for n, f in fields.items() if not f.is_required())
        out.append(f'    "{tool.name}": {{{defaults}}},')
    out += ["}", ""]
    out.append("# Tools that change the store; those taking a command_id are retried under the same one.")
    out.append("WRITES = frozenset({" + ", ".join(f'"{t.name}"' for t in tools if t.writes) + "})")
    with_id = ", ".join(f'"{t.name}"' for t in tools if "command_id" in t.args.model_fields)
    out.append("COMMAND_ID = frozenset({" + with_id + "})")
    out += ["", ""]
    for is_async, name, ret in ((False, "SyncTools", "dict[str, Any]"), (True, "AsyncTools", "dict[str, Any]")):
        out += [
            f"class {name}:",
            f'    """Every tool as a{"n async" if is_async else ""} method; ``_invoke`` sends the call."""',
            "",
            f"    {'async def' if is_async else 'def'} _invoke(self, tool: str, args: dict[str, Any]) -> {ret}:",
            "        raise NotImplementedError",
            "",
        ]
        for tool in tools:
            out += _method(tool, is_async)
        out[-1:] = ["", ""]
    while out[-1] == "":
        out.pop()
    uses_literal = any("Literal[" in line for line in out if line.startswith("    "))
    if not uses_literal:
        out[out.index("from typing import Any, Literal")] = "from typing import Any"
    return "\n".join(out) + "\n"


def main() -> None:
    TARGET.write_text(render())
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
