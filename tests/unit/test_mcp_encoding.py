"""The MCP face's pure parts: the caller from headers, result encoding, rescuing frames with
unpaired surrogates."""

from __future__ import annotations

import json

from memstream.api.faces.mcp import (
    _STASH,
    _STASH_KEY,
    caller_from_headers,
    encode_result,
    rescue_frame,
)
from memstream.api.tools.registry import Caller


def test_caller_from_headers():
    assert caller_from_headers(None) == Caller("anonymous")
    assert caller_from_headers({}).client_id == "anonymous"
    assert caller_from_headers({"authorization": "Bearer tok-1", "x-client-id": "alice"}).client_id == "tok-1"
    assert caller_from_headers({"authorization": "bearer  tok-2 "}).client_id == "tok-2"
    assert caller_from_headers({"authorization": "Basic abc", "x-client-id": "alice"}).client_id == "alice"
    assert caller_from_headers({"x-client-id": "  "}).client_id == "anonymous"
    assert caller_from_headers({"x-client-id": "a" * 257}).client_id == "anonymous"
    assert caller_from_headers({"x-client-id": "bob", "mcp-session-id": "s1"}) == Caller("bob", "s1")


def test_encode_result_never_raises():
    assert json.loads(encode_result({"ok": True, "n": 1})) == {"ok": True, "n": 1}
    # orjson refuses lone surrogates; the fallback escapes them
    assert json.loads(encode_result({"echo": "\ud800"})) == {"echo": "\ud800"}
    body = json.loads(encode_result({"x": object()}))
    assert body["ok"] is False and "internal error" in body["error"]


def test_rescue_frame_parks_arguments_with_unpaired_surrogates():
    assert rescue_frame('{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}') is None
    paired = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x", "arguments": {"t": "😀"}}}
    )
    assert "\\ud83d\\ude00" in paired and rescue_frame(paired) is None  # a valid pair is valid Unicode

    frame = json.dumps(
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "x", "arguments": {"t": "a\udfff"}}}
    )
    fixed = json.loads(rescue_frame(frame))
    token = fixed["params"]["_meta"][_STASH_KEY]
    assert fixed["params"]["arguments"] == {} and fixed["id"] == 2
    assert _STASH.pop(token) == {"t": "a\udfff"}

    other = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"cursor": "\udc00"}})
    assert json.loads(rescue_frame(other))["params"]["cursor"] == "\\udc00"  # answered, not dropped
