"""Numbers no tool accepts (issue 17): integers past 64 bits and NaN / Infinity are refused by
name, with the same answer on HTTP and MCP, embedded and in Kafka mode, and nothing is stored.

The calls go out as raw JSON (the SDK's client would write NaN as null, and orjson cannot write
an integer past 64 bits), so each face parses exactly what a careless client sends."""

from __future__ import annotations

import json
import math
import uuid
from typing import Any

import httpx
import pytest

MCP_HEADERS = {
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2025-11-25",
}
RANGE = "is out of range: integers must fit in 64 bits (-2^63 .. 2^63-1)"


def agent() -> str:
    return f"edge-{uuid.uuid4().hex[:12]}"


async def call(target: tuple[str, str, str], tool: str, args: dict[str, Any]) -> tuple[int | None, dict[str, Any]]:
    """(HTTP status, or None over MCP; the tool's JSON answer) for ``args`` written by the
    stdlib: big integers exactly, non-finite floats as NaN / Infinity."""
    _, kind, url = target
    raw = json.dumps(args).encode()
    async with httpx.AsyncClient(base_url=url, timeout=60, headers={"x-client-id": "tester"}) as client:
        if kind == "http":
            r = await client.post(f"/v1/tools/{tool}", content=raw, headers={"content-type": "application/json"})
            assert r.status_code < 500, r.text
            return r.status_code, r.json()
        frame = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": %s, "arguments": %s}}' % (
            json.dumps(tool).encode(),
            raw,
        )
        r = await client.post("/mcp", content=frame, headers=MCP_HEADERS)
        assert r.status_code == 200, r.text
        message = r.json()
        assert "result" in message, message
        [content] = message["result"]["content"]
        body: dict[str, Any] = json.loads(content["text"])
        return None, body


def refused(status: int | None, body: dict[str, Any], error: str) -> None:
    """A refusal as invalid input (HTTP 400), worded ``error``."""
    assert status in (None, 400), (status, body)
    assert body == {"ok": False, "error": error}, body


async def nothing_stored(target: tuple[str, str, str], agent_id: str) -> None:
    _, listing = await call(target, "list_memories", {"agent_id": agent_id})
    assert listing == {"memories": [], "count": 0}, listing


@pytest.mark.parametrize("tool", ["history", "audit_log"])
async def test_offsets_past_64_bits_are_refused_by_name(face_target: tuple[str, str, str], tool: str) -> None:
    a = agent()
    status, body = await call(face_target, tool, {"agent_id": a, "since_offset": 2**63})
    refused(status, body, f"since_offset: {2**63} {RANGE}")
    status, body = await call(face_target, tool, {"agent_id": a, "since_offset": 2**70})
    refused(status, body, f"since_offset: {2**70} {RANGE}")
    # The last offset there is reads nothing, as any offset past the end does.
    status, body = await call(face_target, tool, {"agent_id": a, "since_offset": 2**63 - 1})
    assert status in (None, 200), body
    expected = {"agent_id": a, "events": [], "count": 0} if tool == "history" else {"records": [], "count": 0}
    assert body == expected


@pytest.mark.parametrize("number", [2**63, 2**64, 2**70, -(2**63) - 1, 10**40, 2**300])
async def test_integers_past_64_bits_in_metadata_are_refused(face_target: tuple[str, str, str], number: int) -> None:
    a = agent()
    status, body = await call(face_target, "store", {"agent_id": a, "content": "big", "metadata": {"n": number}})
    shown = str(number) if number.bit_length() <= 128 else f"an integer of {number.bit_length()} bits"
    assert status in (None, 400), body
    assert body == {"ok": False, "result": "rejected", "reason": f"metadata.n: {shown} {RANGE}"}
    await nothing_stored(face_target, a)


async def test_integers_at_the_64_bit_bounds_are_stored(face_target: tuple[str, str, str]) -> None:
    a = agent()
    for number in (2**63 - 1, -(2**63)):
        args = {"agent_id": a, "content": f"bound {number}", "metadata": {"n": number, "deep": [{"m": number}]}}
        status, body = await call(face_target, "store", args)
        assert status in (None, 200) and body["result"] == "stored", body
        _, hist = await call(face_target, "history", {"ref": f"mem:{body['id']}", "agent_id": a})
        assert hist["events"][0]["change"]["metadata"] == {"n": number, "deep": [{"m": number}]}, hist


async def test_declare_associations_refuses_relation_ids_past_64_bits(face_target: tuple[str, str, str]) -> None:
    a = agent()
    args = {"agent_id": a, "retract": {"relations": [1, 2**70]}}
    status, body = await call(face_target, "declare_associations", args)
    assert status in (None, 400), body
    assert body["ok"] is False and body["error"] == f"retract.relations[1]: {2**70} {RANGE}", body


@pytest.mark.parametrize(("number", "shown"), [(math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity")])
async def test_non_finite_numbers_are_refused_alike(
    face_target: tuple[str, str, str], number: float, shown: str
) -> None:
    """Refused over HTTP and MCP with one answer, never stored as null."""
    a = agent()
    args = {"agent_id": a, "content": "not a number", "metadata": {"score": [1.5, number]}}
    status, body = await call(face_target, "store", args)
    assert status in (None, 400), body
    why = f"metadata.score[1]: {shown} is not a JSON number (send a finite number)"
    assert body == {"ok": False, "result": "rejected", "reason": why}
    await nothing_stored(face_target, a)
    status, body = await call(face_target, "set_recall_precision", {"agent_id": a, "beta": number})
    refused(status, body, f"beta: {shown} is not a JSON number (send a finite number)")
    status, body = await call(face_target, "recall", {"agent_id": a, "query": "q", "limit": number})
    refused(status, body, f"limit: {shown} is not a JSON number (send a finite number)")


async def test_refs_past_64_bits_name_no_record(face_target: tuple[str, str, str]) -> None:
    """A ref is a string: one whose id is past 64 bits names no record (none can have it)."""
    a = agent()
    huge = f"mem:{2**70}"
    _, body = await call(face_target, "history", {"ref": huge, "agent_id": a})
    assert body == {"ok": False, "error": f"no history for {huge}"}, body
    _, body = await call(face_target, "get_contents", {"agent_id": a, "refs": [huge]})
    assert body["items"] == [] and body["missing"] == [huge], body
    _, body = await call(face_target, "declare_standing", {"agent_id": a, "ref": huge, "standing": "noise"})
    assert body == {"ok": False, "error": f"{huge} not found or not owned by agent"}, body
