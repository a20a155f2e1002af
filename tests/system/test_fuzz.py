"""Fuzzing the faces (issue 6, item 2): no input produces a 5xx or an unhandled exception, and a
refused input changes nothing but the audit trail (W7, W8, H4).

Three fuzzers, each checking "refused → the event log's end offset did not move":

* schemathesis against the served OpenAPI document, positive and negative cases for every
  operation, sent over loopback to a real server;
* hypothesis through ``run_tool`` (what every face calls), with near-valid and wild arguments;
* hypothesis through MCP over streamable HTTP (raw JSON-RPC frames, as any client may send).

Plus the named kinds of bad input, one by one, through both faces.

Example counts are bounded for CI (the whole file runs in well under a minute or two);
MEMSTREAM_LONG_TESTS=1 raises them (MEMSTREAM_FUZZ_EXAMPLES sets the per-operation count).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import Settings, load_settings
from memstream.api.tools.dispatch import run_tool
from memstream.api.tools.registry import REGISTRY, Caller
from tests.support.embedders import HashEmbedder
from tests.support.servers import ServerThread, log_end

pytestmark = pytest.mark.slow  # trials that take tens of seconds (more with MEMSTREAM_LONG_TESTS=1)
LONG = bool(os.environ.get("MEMSTREAM_LONG_TESTS"))
EXAMPLES = int(os.environ.get("MEMSTREAM_FUZZ_EXAMPLES") or (100 if LONG else 6))
DISPATCH_EXAMPLES = 2_000 if LONG else 300
MCP_EXAMPLES = 400 if LONG else 60

MCP_HEADERS = {
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2025-11-25",
    "x-client-id": "fuzzer",
}

# A valid call of each tool: the near-valid fuzzer mutates one argument of these.
BASE: dict[str, dict[str, Any]] = {
    "archive_episode": {"agent_id": "fz", "summary": "a summary"},
    "association_graph": {"agent_id": "fz"},
    "audit_log": {},
    "check_contingent": {"agent_id": "fz", "values": ["blue"]},
    "check_health": {},
    "context_package": {"agent_id": "fz", "query": "alpha"},
    "context_packet": {"agent_id": "fz", "query": "alpha"},
    "declare_associations": {"agent_id": "fz", "associations": {"entities": [{"name": "Ada"}]}},
    "declare_standing": {"agent_id": "fz", "ref": "mem:1", "standing": "fact"},
    "delete_agent_data": {"agent_id": "fz-gone"},
    "delete_episode": {"agent_id": "fz", "episode_id": 1},
    "delete_memory": {"agent_id": "fz", "memory_id": 1},
    "get_contents": {"agent_id": "fz", "refs": ["mem:1"]},
    "get_profile": {"agent_id": "fz"},
    "get_recall_precision": {"agent_id": "fz"},
    "history": {"ref": "mem:1"},
    "list_agents": {"prefix": "f"},
    "list_episodes": {"agent_id": "fz"},
    "list_memories": {"agent_id": "fz"},
    "lock_memory": {"agent_id": "fz", "memory_id": 1},
    "recall": {"agent_id": "fz", "query": "alpha"},
    "recall_with_context": {"agent_id": "fz", "query": "alpha"},
    "reconstruct": {"agent_id": "fz", "query": "alpha"},
    "reembed": {"model": "no-such-model"},
    "reembed_status": {},
    "set_recall_precision": {"agent_id": "fz", "precision": "strict"},
    "store": {"agent_id": "fz", "content": "alpha beta gamma"},
    "traverse": {"agent_id": "fz", "entity": "Ada"},
    "unlock_memory": {"agent_id": "fz", "memory_id": 1},
    "update_memory": {"agent_id": "fz", "memory_id": 1, "content": "changed"},
    "update_profile": {"agent_id": "fz", "profile": "likes tea"},
    "verify_memory": {"agent_id": "fz", "memory_id": 1},
}

# -- strategies ---------------------------------------------------------------------------------

# Text that includes lone surrogates, NULs, control characters and right-to-left marks.
nasty_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec=None, min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3),
    st.sampled_from(
        [
            "",
            " ",
            "\x00",
            "mem:-1",
            "mem:99999999999999999999999",
            "ep:abc",
            "9999-99-99T99:99:99",
            "2026-02-30T00:00:00Z",
            "yesterday",
            "1e309",
            "NaN",
            "\u202e",
            "<script>alert(1)</script>",
            "' OR 1=1 --",
            "x" * 5_000,
        ]
    ),
)
nasty_number = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**31, 2**63, -(2**63) - 1, 10**30]),
    st.floats(allow_nan=False, allow_infinity=False),
)
scalars = st.one_of(st.none(), st.booleans(), nasty_number, nasty_text)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=8), nasty_text), inner, max_size=4)
    ),
    max_leaves=12,
)


def deep(depth: int) -> Any:
    value: Any = "bottom"
    for i in range(depth):
        value = {"k": value} if i % 2 else [value]
    return value


@st.composite
def tool_calls(draw: st.DrawFn) -> tuple[str, Any]:
    """A tool name and arguments: valid, one argument mutated, wild, or not an object."""
    name = draw(st.sampled_from(sorted(BASE)))
    kind = draw(st.sampled_from(["mutate", "mutate", "mutate", "wild", "valid", "nonobject", "unknown_tool"]))
    if kind == "unknown_tool":
        return draw(nasty_text), {}
    if kind == "nonobject":
        return name, draw(st.one_of(st.lists(scalars, max_size=3), scalars.filter(lambda v: v is not None)))
    args = dict(BASE[name])
    if kind == "valid":
        return name, args
    fields = sorted(REGISTRY[name].args.model_fields) or ["unknown_field"]
    if kind == "wild":
        keys = draw(st.lists(st.one_of(st.sampled_from(fields), nasty_text), max_size=6))
        return name, {k: draw(json_values) for k in keys}
    key = draw(st.one_of(st.sampled_from(fields), st.sampled_from(["unknown_field", "__proto__", "agentId"])))
    value = draw(st.one_of(json_values, st.builds(deep, st.integers(min_value=10, max_value=200))))
    if draw(st.booleans()) and key in args:
        del args[key]  # a missing required field
    else:
        args[key] = value
    return name, args


# -- helpers ------------------------------------------------------------------------------------


def fuzz_settings(tmp_path: Path) -> Settings:
    return load_settings(env={}, data_dir=tmp_path / "data", sync="NORMAL")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    with ServerThread(fuzz_settings(tmp_path_factory.mktemp("fuzz"))) as srv:
        yield srv


def assert_clear_failure(body: Any, where: str) -> None:
    assert isinstance(body, dict), where
    assert body.get("ok") is False, where
    reason = body.get("error") or body.get("reason")
    assert isinstance(reason, str) and reason.strip(), where
    assert "Traceback" not in json.dumps(body), where
    assert "internal error" not in reason, where


# -- schemathesis against the OpenAPI document ----------------------------------------------------


def test_openapi_document_is_self_contained(server: ServerThread) -> None:
    """Every $ref in the served document resolves inside it (fuzzers and client generators
    load it as is)."""
    spec = httpx.get(f"{server.url}/openapi.json").json()
    text = json.dumps(spec)
    refs = {part.split('"')[0] for part in text.split('"$ref": "')[1:]}
    for ref in refs:
        node: Any = spec
        assert ref.startswith("#/"), ref
        for step in ref[2:].split("/"):
            node = node[step.replace("~1", "/").replace("~0", "~")]


def test_schemathesis_no_5xx_and_refusals_change_nothing(server: ServerThread) -> None:
    import requests
    import schemathesis
    from schemathesis import GenerationMode

    spec = httpx.get(f"{server.url}/openapi.json").json()
    schema = schemathesis.openapi.from_dict(spec)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= len(REGISTRY)
    session = requests.Session()
    session.headers["x-client-id"] = "schemathesis"
    statuses: Counter[int] = Counter()
    problems: list[str] = []

    def fuzz(op: Any, mode: Any) -> None:
        @seed(20261130)
        @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(case=op.as_strategy(generation_mode=mode))
        def run(case: Any) -> None:
            before = log_end(server)[0]
            r = case.call(base_url=server.url, session=session, timeout=60)
            statuses[r.status_code] += 1
            where = f"{op.label} {r.status_code} body={str(case.body)[:300]!r}: {r.text[:300]}"
            if r.status_code >= 500:
                problems.append(f"5xx: {where}")
            elif r.status_code >= 400:
                assert_clear_failure(r.json(), where)
                if log_end(server)[0] != before:
                    problems.append(f"refused but the log moved: {where}")

        with contextlib.suppress(Unsatisfiable):  # no negative case exists for an operation without arguments
            run()

    for op in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fuzz(op, mode)
    total = sum(statuses.values())
    print(
        f"schemathesis: {total} requests over {len(operations)} operations, statuses {dict(sorted(statuses.items()))}"
    )
    assert not problems, "\n".join(problems[:10])
    assert total >= len(operations) * EXAMPLES
    assert statuses[200] > 0 and statuses[400] > 0


# -- hypothesis through dispatch ----------------------------------------------------------------


@pytest.fixture(scope="module")
def loop_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[asyncio.AbstractEventLoop, EmbeddedEngine]]:
    loop = asyncio.new_event_loop()
    engine = EmbeddedEngine(fuzz_settings(tmp_path_factory.mktemp("fuzz-dispatch")), embedder=HashEmbedder())
    loop.run_until_complete(engine.start())
    # Something to find, lock, update and delete.
    for i in range(5):
        loop.run_until_complete(
            run_tool(engine, Caller("seed"), "store", {"agent_id": "fz", "content": f"alpha memory {i}"})
        )
    try:
        yield loop, engine
    finally:
        loop.run_until_complete(engine.close())
        loop.close()


def test_dispatch_fuzz_never_raises_and_refusals_change_nothing(
    loop_engine: tuple[asyncio.AbstractEventLoop, EmbeddedEngine],
) -> None:
    loop, engine = loop_engine
    codes: Counter[str] = Counter()

    @seed(6)
    @settings(max_examples=DISPATCH_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(call=tool_calls())
    def run(call: tuple[str, Any]) -> None:
        name, args = call
        before = engine.log.end_offset()
        audit_before = engine.log.audit_end_offset()
        body, code = loop.run_until_complete(run_tool(engine, Caller("fuzzer"), name, args))
        codes[code or "ok"] += 1
        where = f"{name}({str(args)[:300]})"
        assert code != "internal", f"unhandled exception in {where}: {body}"
        if code is not None:
            assert_clear_failure(body, where)
            assert engine.log.end_offset() == before, f"refused but appended: {where}"
            if code == "invalid":
                assert engine.log.audit_end_offset() > audit_before, f"refusal not audited: {where}"
        json.dumps(body)  # every answer is JSON-serialisable

    run()
    print(f"dispatch fuzz: {sum(codes.values())} calls, outcomes {dict(codes)}")
    assert codes["ok"] > 0 and codes["invalid"] > 0


# -- hypothesis through MCP (streamable HTTP) ---------------------------------------------------


def test_mcp_fuzz_no_5xx_no_protocol_crash_and_refusals_change_nothing(server: ServerThread) -> None:
    client = httpx.Client(base_url=server.url, timeout=60, headers=MCP_HEADERS)
    results: Counter[str] = Counter()

    @seed(7)
    @settings(max_examples=MCP_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(call=tool_calls())
    def run(call: tuple[str, Any]) -> None:
        name, args = call
        frame = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}}
        # ensure_ascii: lone surrogates travel as \\u escapes, as a JSON client would send them.
        raw = json.dumps(frame, ensure_ascii=True).encode()
        before = log_end(server)[0]
        r = client.post("/mcp", content=raw)
        where = f"{name}({str(args)[:300]}): HTTP {r.status_code} {r.text[:300]}"
        assert r.status_code < 500, where
        message = r.json()
        if "error" in message:  # a protocol-level refusal (e.g. arguments the transport rejects)
            results["jsonrpc_error"] += 1
            assert log_end(server)[0] == before, where
            return
        content = message["result"]["content"]
        body = json.loads(content[0]["text"])
        if isinstance(body, dict) and body.get("ok") is False:
            results["refused"] += 1
            assert_clear_failure(body, where)
            assert log_end(server)[0] == before, where
        else:
            results["answered"] += 1

    try:
        run()
    finally:
        client.close()
    print(f"mcp fuzz: {sum(results.values())} calls, {dict(results)}")
    assert results["refused"] > 0 and results["answered"] > 0


# -- the named kinds of bad input, through both faces -------------------------------------------

NAMED_BAD_INPUTS = [
    ("oversize content", "store", {"agent_id": "bad", "content": "x" * 1_000_001}),
    ("oversize update", "update_memory", {"agent_id": "bad", "memory_id": 1, "content": "x" * 1_000_001}),
    ("lone surrogate in content", "store", {"agent_id": "bad", "content": "half \udfff a pair"}),
    ("lone surrogate in agent_id", "recall", {"agent_id": "\ud800", "query": "q"}),
    ("lone surrogate in a key", "store", {"agent_id": "bad", "content": "c", "metadata": {"\udc00": 1}}),
    ("deeply nested metadata", "store", {"agent_id": "bad", "content": "nested", "metadata": {"m": deep(400)}}),
    ("deeply nested associations", "declare_associations", {"agent_id": "bad", "associations": {"x": deep(400)}}),
    ("huge limit", "recall", {"agent_id": "bad", "query": "q", "limit": 10**30}),
    ("huge limit (int64+1)", "list_memories", {"agent_id": "bad", "limit": 2**63}),
    ("huge history limit", "history", {"agent_id": "bad", "limit": 10**9}),
    ("negative limit", "recall", {"agent_id": "bad", "query": "q", "limit": -1}),
    ("negative memory id", "delete_memory", {"agent_id": "bad", "memory_id": -5}),
    ("negative offset", "audit_log", {"since_offset": -1}),
    ("negative budget", "reconstruct", {"agent_id": "bad", "query": "q", "budget": -100}),
    ("float where an int goes", "lock_memory", {"agent_id": "bad", "memory_id": 1.5}),
    ("bad timestamp", "store", {"agent_id": "bad", "content": "when?", "timestamp": "yesterday"}),
    ("impossible date", "store", {"agent_id": "bad", "content": "when?", "timestamp": "2026-02-30T10:00:00Z"}),
    ("bad as_of", "list_memories", {"agent_id": "bad", "as_of": "not a time"}),
    ("unknown field", "store", {"agent_id": "bad", "content": "c", "colour": "blue"}),
    ("unknown field on a read", "recall", {"agent_id": "bad", "query": "q", "topK": 3}),
    ("missing required", "update_profile", {"agent_id": "bad"}),
    ("wrong type", "store", {"agent_id": 42, "content": "c"}),
    ("unknown tool", "drop_database", {}),
]


@pytest.mark.parametrize(("what", "tool", "args"), NAMED_BAD_INPUTS, ids=[c[0] for c in NAMED_BAD_INPUTS])
@pytest.mark.parametrize("via", ["http", "mcp"])
def test_named_bad_input_gets_a_clear_error_and_changes_nothing(
    server: ServerThread, via: str, what: str, tool: str, args: dict[str, Any]
) -> None:
    events_before, audit_before = log_end(server)
    if via == "http":
        raw = json.dumps(args, ensure_ascii=True).encode()
        r = httpx.post(f"{server.url}/v1/tools/{tool}", content=raw, headers={"content-type": "application/json"})
        assert 400 <= r.status_code < 500, (what, r.status_code, r.text[:300])
        body = r.json()
    else:
        frame = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}}
        r = httpx.post(f"{server.url}/mcp", content=json.dumps(frame).encode(), headers=MCP_HEADERS, timeout=60)
        assert r.status_code < 500, (what, r.status_code, r.text[:300])
        message = r.json()
        if "error" in message:
            # Refused by the SDK's JSON-RPC parser before any tool code runs (nesting past its
            # recursion limit): a protocol error with a clear message, nothing written, and
            # not in the audit trail (no tool call was made).
            assert message["error"]["message"].strip(), what
            assert log_end(server)[0] == events_before, f"{what}: the log moved"
            return
        body = json.loads(message["result"]["content"][0]["text"])
    assert_clear_failure(body, what)
    events_after, audit_after = log_end(server)
    assert events_after == events_before, f"{what}: the log moved"
    assert audit_after > audit_before, f"{what}: the refusal is not in the audit trail"


def test_raw_bodies_get_a_clear_400(server: ServerThread) -> None:
    """Bytes no JSON client would send: invalid UTF-8, nesting past the parser's limit, NaN."""
    bodies = [
        b'{"agent_id": "a", "content": "\xff\xfe"}',
        b'{"agent_id": "a", "content": "\xed\xa0\x80"}',  # a surrogate encoded as UTF-8
        b"[" * 100_000 + b"]" * 100_000,
        b'{"m": ' * 5_000 + b"1" + b"}" * 5_000,
        b'{"agent_id": "a", "query": "q", "limit": NaN}',
        b'{"agent_id": "a", "query": "q", "limit": 1e400}',
        b"\x00\x01\x02",
        b'{"agent_id": "a", "content": "c"}' + b" trailing",
    ]
    before = log_end(server)[0]
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for raw in bodies:
            for tool in ("store", "recall"):
                r = client.post(f"/v1/tools/{tool}", content=raw, headers={"content-type": "application/json"})
                assert r.status_code == 400, (raw[:60], r.status_code, r.text[:300])
                assert_clear_failure(r.json(), repr(raw[:60]))
            r = client.post("/mcp", content=raw, headers=MCP_HEADERS)
            assert r.status_code < 500, (raw[:60], r.status_code, r.text[:300])
    assert log_end(server)[0] == before
