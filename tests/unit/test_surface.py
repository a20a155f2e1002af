"""The MCP surface: for every tool memstream shares with CPersona 2.6, the argument names,
their JSON types and the required set equal CPersona's (recorded in
tests/fixtures/cpersona/tools.json from cpersona 2.6.14 by bench/cpersona/record_surface.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memstream.api import tools as _tools  # noqa: F401  (registers every tool)
from memstream.api.tools.dispatch import list_tools

FIXTURE = Path(__file__).parents[1] / "fixtures" / "cpersona" / "tools.json"
CPERSONA = {t["name"]: t["inputSchema"] for t in json.loads(FIXTURE.read_text())["tools"]}
OURS = {t["name"]: t["inputSchema"] for t in list_tools()}
SHARED = sorted(set(OURS) & set(CPERSONA))
# memstream's additions to shared tools' arguments: idempotent retries (W9), point-in-time reads (H3).
ALLOWED_EXTRA = {"command_id", "as_of"}
# Issue 2's part of the shared surface: these must exist now.
REQUIRED_NOW = {
    "store", "get_contents", "update_memory", "delete_memory", "lock_memory", "unlock_memory",
    "archive_episode", "delete_episode", "update_profile", "get_profile", "list_memories",
    "list_episodes", "delete_agent_data", "check_health", "set_recall_precision", "get_recall_precision",
}  # fmt: skip


def json_type(prop: dict[str, Any]) -> Any:
    if "type" in prop:
        return prop["type"]
    if "anyOf" in prop:
        return sorted(json_type(p) or "object" for p in prop["anyOf"])
    if "$ref" in prop:
        return "object"
    return None


def test_issue_2_tools_are_all_served() -> None:
    assert set(OURS) >= REQUIRED_NOW
    assert set(CPERSONA) >= REQUIRED_NOW


@pytest.mark.parametrize("tool", SHARED)
def test_shared_tool_arguments_match_cpersona(tool: str) -> None:
    ours, theirs = OURS[tool], CPERSONA[tool]
    op, tp = ours.get("properties", {}), theirs.get("properties", {})
    assert set(tp) <= set(op), f"{tool}: missing arguments {set(tp) - set(op)}"
    assert set(op) - set(tp) <= ALLOWED_EXTRA, f"{tool}: extra arguments {set(op) - set(tp)}"
    for name in tp:
        assert json_type(op[name]) == json_type(tp[name]), (tool, name, op[name], tp[name])
    assert sorted(ours.get("required", [])) == sorted(theirs.get("required") or []), tool


def test_schemas_are_plain_json_schema() -> None:
    for name, schema in OURS.items():
        assert schema["type"] == "object", name
        text = json.dumps(schema)
        assert '"title"' not in text, name  # no pydantic noise in what agents read
