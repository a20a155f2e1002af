"""memstream.client's surface follows the tool registry: one method per tool, same argument names,
so a new tool cannot be forgotten; and the pure parts of a call (arguments sent, error classes,
backoff) behave as docs/client.md says."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from memstream.api import tools as _tools  # noqa: F401  (registers every tool)
from memstream.api.tools.registry import REGISTRY
from memstream.client import (
    AsyncClient,
    Client,
    Conflict,
    InternalError,
    Invalid,
    Locked,
    MemstreamError,
    NotFound,
    PermissionDenied,
    RetryPolicy,
    TooLarge,
    Unauthorized,
    Unavailable,
    UnknownTool,
    codegen,
    methods,
)
from memstream.client.calls import prepare
from memstream.client.errors import code_of_answer, error_for
from memstream.client.results import RESULTS, Result

REPO = Path(__file__).resolve().parents[2]
TOOL_METHODS = {n for n, v in vars(methods.SyncTools).items() if inspect.isfunction(v) and not n.startswith("_")}


def test_the_client_has_one_method_per_tool() -> None:
    assert set(REGISTRY) == TOOL_METHODS
    async_methods = {n for n, v in vars(methods.AsyncTools).items() if inspect.isfunction(v) and not n.startswith("_")}
    assert async_methods == TOOL_METHODS


@pytest.mark.parametrize("cls", [Client, AsyncClient])
@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_each_method_takes_the_tool_arguments(cls: type, name: str) -> None:
    method = getattr(cls, name)
    params = dict(inspect.signature(method).parameters)
    params.pop("self")
    fields = REGISTRY[name].args.model_fields
    assert set(params) == set(fields)
    for arg, field in fields.items():
        required = params[arg].default is inspect.Parameter.empty
        assert required == field.is_required(), arg
        if not required:
            assert params[arg].default == field.get_default(call_default_factory=True), arg
    assert inspect.iscoroutinefunction(method) == (cls is AsyncClient)


def test_every_tool_has_an_answer_model() -> None:
    assert set(RESULTS) == set(REGISTRY)
    for model in RESULTS.values():
        assert issubclass(model, Result)
        assert model.model_config.get("extra") == "allow"


def test_methods_py_is_what_codegen_writes() -> None:
    written = (REPO / "api" / "client" / "methods.py").read_text()
    assert written == codegen.render(), "run: python -m memstream.client.codegen"


def test_main_arguments_are_positional() -> None:
    store = inspect.signature(Client.store).parameters
    assert [p for p in store if store[p].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD] == [
        "self",
        "agent_id",
        "content",
    ]
    recall = inspect.signature(AsyncClient.recall).parameters
    assert list(recall)[1:3] == ["agent_id", "query"]
    assert recall["limit"].kind is inspect.Parameter.KEYWORD_ONLY


def test_defaults_are_not_sent_and_writes_get_a_command_id() -> None:
    sent, idempotent = prepare("recall", {"agent_id": "a", "query": "q", "limit": 10, "deep": True, "channel": None})
    assert sent == {"agent_id": "a", "query": "q", "deep": True}
    assert idempotent
    sent, idempotent = prepare("store", {"agent_id": "a", "content": "x", "command_id": None, "lock": False})
    assert set(sent) == {"agent_id", "content", "command_id"}
    assert isinstance(sent["command_id"], str) and len(sent["command_id"]) == 32
    assert idempotent
    again, _ = prepare("store", {"agent_id": "a", "content": "x", "command_id": None})
    assert again["command_id"] != sent["command_id"]
    given, _ = prepare("store", {"agent_id": "a", "content": "x", "command_id": "mine"})
    assert given["command_id"] == "mine"
    # reembed writes but takes no command id: not safe to send twice
    sent, idempotent = prepare("reembed", {"model": "m", "batch": 64})
    assert sent == {"model": "m"}
    assert not idempotent


def test_a_tool_the_client_does_not_know_is_retried_only_under_a_command_id() -> None:
    sent, idempotent = prepare("brand_new_tool", {"agent_id": "a"})
    assert sent == {"agent_id": "a"} and not idempotent
    sent, idempotent = prepare("brand_new_tool", {"agent_id": "a", "command_id": "c1"})
    assert idempotent


@pytest.mark.parametrize("url", ["127.0.0.1:8765", "ftp://host/", "http://", "memstream"])
def test_a_base_url_that_is_not_http_is_refused_at_once(url: str) -> None:
    with pytest.raises(ValueError, match="base_url"):
        Client(url)
    with pytest.raises(ValueError, match="base_url"):
        AsyncClient(url)


def test_a_default_of_another_type_is_sent() -> None:
    sent, _ = prepare("recall", {"agent_id": "a", "query": "q", "limit": 10.0, "deep": 0})
    assert sent == {"agent_id": "a", "query": "q", "limit": 10.0, "deep": 0}


@pytest.mark.parametrize(
    ("status", "body", "cls", "code"),
    [
        (400, {"ok": False, "error": "invalid arguments: x"}, Invalid, "invalid"),
        (400, {"ok": False, "result": "rejected", "reason": "empty content"}, Invalid, "invalid"),
        (401, {"ok": False, "error": "unauthorized"}, Unauthorized, "unauthorized"),
        (403, {"ok": False, "error": "permission_denied: ..."}, PermissionDenied, "permission_denied"),
        (404, {"ok": False, "error": "Unknown tool: nope"}, UnknownTool, "unknown_tool"),
        (404, {"ok": False, "error": "Memory 9 not found"}, NotFound, "not_found"),
        (409, {"ok": False, "error": "Memory 9 is locked and cannot be edited"}, Locked, "locked"),
        (409, {"ok": False, "error": "Memory 9 not found, not owned by agent, or locked"}, Locked, "locked"),
        (409, {"ok": False, "error": "Memory 9 was not edited: changed"}, Conflict, "conflict"),
        (409, {"ok": False, "error": "a re-embedding job is running"}, Conflict, "conflict"),
        (413, {"ok": False, "error": "metadata exceeds 8000 bytes"}, TooLarge, "too_large"),
        (500, {"ok": False, "error": "internal error"}, InternalError, "internal"),
        (503, {"ok": False, "error": "log_unavailable: broker down"}, Unavailable, "log_unavailable"),
        (503, {"ok": False, "error": "embedding_unavailable: timeout"}, Unavailable, "embedding_unavailable"),
        (502, {"ok": False, "error": "Bad Gateway"}, Unavailable, "unavailable"),
    ],
)
def test_answers_map_to_error_classes(status: int, body: dict[str, object], cls: type, code: str) -> None:
    error = error_for(code_of_answer(status, body), body, status)
    assert type(error) is cls
    assert error.code == code
    assert error.status == status
    assert error.body == body
    assert str(error) == (body.get("error") or body.get("reason"))


def test_an_unknown_code_is_the_base_class() -> None:
    error = error_for("brand_new", {"ok": False, "error": "something new"}, 418)
    assert type(error) is MemstreamError
    assert error.code == "brand_new"
    assert code_of_answer(418, {}) is None
    assert type(error_for(None, {}, 418)) is MemstreamError


def test_backoff_doubles_up_to_its_cap_and_honours_retry_after() -> None:
    policy = RetryPolicy(retries=5, backoff=0.5, max_backoff=3.0)
    assert [policy.delay(a) for a in range(4)] == [0.5, 1.0, 2.0, 3.0]
    assert policy.delay(0, "2") == 2.0
    assert policy.delay(0, "60") == 3.0
    assert policy.delay(1, "Wed, 21 Oct 2015 07:28:00 GMT") == 1.0
    with pytest.raises(ValueError):
        RetryPolicy(retries=-1)


def test_the_client_has_one_import_name() -> None:
    """Its files sit under api/ (for the layer rules) but it is memstream.client only: a second
    name would make second copies of its exception classes, which ``except`` would not match."""
    import importlib
    import sys

    with pytest.raises(ImportError, match=r"memstream\.client"):
        importlib.import_module("memstream.api.client")
    assert "memstream.api.client" not in sys.modules


def test_a_token_names_the_caller_and_x_client_id_only_without_one() -> None:
    from memstream.client.remote import headers_for

    with_token = headers_for("tok-1", "bot-7", "s-1")
    assert with_token["authorization"] == "Bearer tok-1" and "x-client-id" not in with_token
    assert with_token["x-session-id"] == "s-1"
    without = headers_for(None, "bot-7", None)
    assert without["x-client-id"] == "bot-7" and "authorization" not in without and "x-session-id" not in without
    assert "x-client-id" not in headers_for(None, None, None)


def test_an_exchange_decides_each_outcome_without_io() -> None:
    """The request plan both transports drive: waits to send again, answers, failures raised."""
    import httpx

    from memstream.client.exchange import Again, ToolExchange

    policy = RetryPolicy(retries=2, backoff=0.5, max_backoff=4.0)
    read = ToolExchange("http://h", "recall", {"agent_id": "a", "query": "q"}, True, policy)
    assert read.path == "/v1/tools/recall" and read.content == b'{"agent_id": "a", "query": "q"}'
    assert read.answered(httpx.Response(503, json={"ok": False, "error": "log_unavailable: x"})) == Again(0.5)
    assert read.lost(httpx.ReadError("reset")) == Again(1.0)
    with pytest.raises(Unavailable, match="could not reach memstream at http://h: ReadError"):
        read.lost(httpx.ReadError("reset"))
    with pytest.raises(Unavailable) as raised:
        read.answered(httpx.Response(503, json={"ok": False, "error": "log_unavailable: x"}))
    assert raised.value.code == "log_unavailable"
    assert read.answered(httpx.Response(200, json={"ok": True})) == {"ok": True}
    with pytest.raises(MemstreamError, match="not a JSON object"):
        read.answered(httpx.Response(200, json=[1]))

    write = ToolExchange("http://h", "reembed", {"model": "m"}, False, policy)
    with pytest.raises(Unavailable):
        write.answered(httpx.Response(503, json={"ok": False, "error": "unavailable"}))
    assert write.lost(httpx.ConnectError("refused")) == Again(0.5)  # never left: safe to send
    with pytest.raises(Unavailable):
        write.lost(httpx.ReadTimeout("slow"))  # may have landed: not sent twice


@pytest.mark.parametrize(
    ("status", "text", "named", "cls"),
    [
        (409, "Memory 9 not found, not owned by agent, or locked", "locked", Locked),
        (409, "Memory 9 is locked and cannot be edited", "conflict", Conflict),
        (404, "Unknown tool: x", "not_found", NotFound),
        (404, "Memory 9 not found", "unknown_tool", UnknownTool),
        (503, "broker down", "log_unavailable", Unavailable),
    ],
)
def test_the_code_a_server_names_wins_over_its_text(status: int, text: str, named: str, cls: type) -> None:
    """A server names the code in Memstream-Error; the text is read only when it does not."""
    import httpx

    from memstream.client.exchange import answer

    body = {"ok": False, "error": text}
    with pytest.raises(cls) as raised:
        answer(httpx.Response(status, json=body, headers={"Memstream-Error": named}))
    assert raised.value.code == named and raised.value.status == status
    assert code_of_answer(status, body, {}) == code_of_answer(status, body)  # an older server: by text
