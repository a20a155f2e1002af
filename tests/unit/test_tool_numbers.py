"""Every number a tool takes, without a server (issue 17): each integer argument in the registry's
schemas is bounded to 64 bits, dispatch refuses any integer past 64 bits and any NaN / Infinity
by name wherever it sits, and the HTTP faces' parser keeps numbers exactly as they were written
(so the refusal is the one MCP's parser leads to)."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from memstream.api.tools.dispatch import MAX_INT, MIN_INT, bad_number, encode_arguments, parse_arguments, run_tool
from memstream.api.tools.registry import REGISTRY, Caller
from memstream.streams.events import AuditRecord


def _integers(node: Any, defs: dict[str, Any], where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every integer schema under ``node``, with where it is (``$ref``s followed)."""
    if isinstance(node, list):
        for item in node:
            yield from _integers(item, defs, where)
        return
    if not isinstance(node, dict):
        return
    ref = node.get("$ref")
    if isinstance(ref, str):
        yield from _integers(defs[ref.rsplit("/", 1)[-1]], defs, where)
    if node.get("type") == "integer":
        yield where, node
    for key in ("anyOf", "oneOf", "allOf", "items", "prefixItems", "additionalProperties"):
        if key in node:
            yield from _integers(node[key], defs, where)
    for name, sub in (node.get("properties") or {}).items():
        yield from _integers(sub, defs, f"{where}.{name}" if where else name)


def integer_fields() -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    for name, tool in sorted(REGISTRY.items()):
        schema = tool.args.model_json_schema()
        out += [(name, where, node) for where, node in _integers(schema, schema.get("$defs", {}), "")]
    return out


def test_the_registry_takes_integers() -> None:
    fields = {(t, w) for t, w, _ in integer_fields()}
    assert ("history", "since_offset") in fields and ("delete_memory", "memory_id") in fields
    assert ("get_contents", "refs.node") in fields  # nested models are walked too


@pytest.mark.parametrize(("tool", "where", "node"), integer_fields(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_integer_argument_is_bounded_to_64_bits(tool: str, where: str, node: dict[str, Any]) -> None:
    low = node.get("minimum", node.get("exclusiveMinimum"))
    high = node.get("maximum", node.get("exclusiveMaximum"))
    assert low is not None and low >= MIN_INT, (tool, where, node)
    assert high is not None and high <= MAX_INT, (tool, where, node)


class Host:
    """Just what dispatch touches before a handler runs: no policy, no metrics, the audit trail."""

    acl = None
    metrics = None

    def __init__(self) -> None:
        self.refused: list[AuditRecord] = []

    async def refuse(self, record: AuditRecord) -> None:
        self.refused.append(record)

    async def record_owner(self, kind: str, ident: int) -> str | None:
        return None


def run(tool: str, raw: Any) -> tuple[dict[str, Any], str | None, Host]:
    host = Host()
    body, code = asyncio.run(run_tool(host, Caller(client_id="unit"), tool, raw))  # type: ignore[call-overload]
    return body, code, host


def _top(where: str) -> str:
    return where.split(".", 1)[0]


@pytest.mark.parametrize(
    ("tool", "field"),
    sorted({(t, w) for t, w, _ in integer_fields() if "." not in w}),
)
@pytest.mark.parametrize("number", [MAX_INT + 1, MIN_INT - 1, 2**70])
def test_an_integer_past_64_bits_is_refused_by_name(tool: str, field: str, number: int) -> None:
    body, code, host = run(tool, {field: number})
    why = body.get("error") or body.get("reason")
    assert (
        code == "invalid"
        and why == f"{field}: {number} is out of range: integers must fit in 64 bits (-2^63 .. 2^63-1)"
    )
    [record] = host.refused  # audited, the number described rather than stored
    assert record.request[field] == f"<integer of {number.bit_length()} bits>"
    # The argument model refuses it on its own too (a face that validates without dispatch).
    with pytest.raises(ValidationError) as exc:
        REGISTRY[tool].args.model_validate({field: number})
    assert any(e["loc"][:1] == (field,) for e in exc.value.errors()), exc.value


@pytest.mark.parametrize(("value", "shown"), [(math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity")])
def test_non_finite_numbers_are_refused_wherever_they_are(value: float, shown: str) -> None:
    body, code, host = run("store", {"agent_id": "a", "content": "c", "metadata": {"a": {"b": [0, value]}}})
    assert code == "invalid"
    assert body == {
        "ok": False,
        "result": "rejected",
        "reason": f"metadata.a.b[1]: {shown} is not a JSON number (send a finite number)",
    }
    [record] = host.refused
    json.dumps(record.request, allow_nan=False)  # the audit record holds no NaN either


# -- any JSON value ------------------------------------------------------------------------------

NUMBERS = st.one_of(
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([MAX_INT, MAX_INT + 1, MIN_INT, MIN_INT - 1, 2**64, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
)
JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.text(max_size=8), NUMBERS),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)),
    max_leaves=20,
)


def _numbers(value: Any) -> Iterator[int | float]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield value


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN counting as equal to NaN, an int never equal to a float."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_numbers_are_refused_exactly_when_one_is_out_of_range(value: Any) -> None:
    wrong = [
        n
        for n in _numbers(value)
        if (isinstance(n, int) and not MIN_INT <= n <= MAX_INT) or (isinstance(n, float) and not math.isfinite(n))
    ]
    assert (bad_number({"v": value}) is None) == (not wrong)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_the_http_parser_keeps_numbers_as_written(value: Any) -> None:
    """What the stdlib writes (big integers, NaN, Infinity) comes back the same: nothing is
    rounded to a float or turned into null on the way to dispatch; and the router hands on
    the same JSON it was given."""
    raw = json.dumps({"v": value}).encode()
    assert _same(parse_arguments(raw), {"v": value})
    assert _same(parse_arguments(encode_arguments({"v": value})), {"v": value})


def test_the_http_parser_still_refuses_what_is_not_json() -> None:
    for raw in (b"{", b'{"a": 1} trailing', b'{"a": "\xff"}', b'{"a": "\xed\xa0\x80"}', b"[" * 5000 + b"]" * 5000):
        with pytest.raises(ValueError):
            parse_arguments(raw)
    assert parse_arguments(b"  ") == {}
    assert parse_arguments(b'{"a": "\\udfff"}') == {"a": "\udfff"}  # for dispatch to refuse by name
