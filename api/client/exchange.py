"""A tool call over HTTP without the I/O (sans-I/O, as h11 is built): the request to send and what
each outcome means (the answer, an error, or a wait before sending again), decided once for the
blocking and the async transport (remote.py), which only send and sleep."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import httpx
import orjson

from .errors import MemstreamError, Unavailable, code_of_answer, error_for
from .retry import RETRY_STATUSES, RetryPolicy

JSON_BODY = {"content-type": "application/json"}


class Again(NamedTuple):
    """Send the same request again after ``seconds``."""

    seconds: float


def encode(args: dict[str, Any]) -> bytes:
    """The arguments as JSON, numbers as given: an integer past 64 bits or a NaN reaches the
    server, which refuses it by name (orjson would refuse the first and null the second)."""
    return json.dumps(args, ensure_ascii=True).encode()


def decode(response: httpx.Response) -> Any:
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return {"ok": False, "error": response.text[:500] or response.reason_phrase}


def refusal(response: httpx.Response) -> MemstreamError:
    """A failure answer as its exception (the body already read)."""
    body = decode(response)
    return error_for(code_of_answer(response.status_code, body, response.headers), body, response.status_code)


def answer(response: httpx.Response) -> dict[str, Any]:
    """The body of a 2xx answer; else the failure as its exception."""
    status = response.status_code
    if not 200 <= status < 300:
        raise refusal(response)
    body = decode(response)
    if not isinstance(body, dict):
        raise MemstreamError("the server answered something that is not a JSON object", status=status, body=body)
    return body


def never_sent(exc: httpx.TransportError) -> bool:
    """The request cannot have reached the server: safe to send again whatever it was."""
    return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)


class ToolExchange:
    """One call of ``tool``: ``path``, ``content`` and ``headers`` are what to POST; ``lost`` and
    ``answered`` say what an outcome means. A call safe to send twice (``idempotent``: a read,
    or a write under a command id) is sent again on a lost connection or a 502/503/504, with
    the policy's backoff; any other call only when the request cannot have left."""

    headers = JSON_BODY

    def __init__(self, base_url: str, tool: str, args: dict[str, Any], idempotent: bool, policy: RetryPolicy) -> None:
        self.base_url = base_url
        self.path = f"/v1/tools/{tool}"
        self.content = encode(args)
        self.idempotent = idempotent
        self.policy = policy
        self.attempt = 0

    def lost(self, exc: httpx.TransportError) -> Again:
        """The connection failed: the wait before sending again, or ``Unavailable`` raised."""
        if self.attempt >= self.policy.retries or not (self.idempotent or never_sent(exc)):
            raise Unavailable(
                f"could not reach memstream at {self.base_url}: {type(exc).__name__}: {exc}", code="unavailable"
            ) from exc
        return self._again(None)

    def answered(self, response: httpx.Response) -> dict[str, Any] | Again:
        """The answer's JSON, a wait before sending again, or the failure raised."""
        if response.status_code in RETRY_STATUSES and self.idempotent and self.attempt < self.policy.retries:
            return self._again(response.headers.get("retry-after"))
        return answer(response)

    def _again(self, retry_after: str | None) -> Again:
        wait = Again(self.policy.delay(self.attempt, retry_after))
        self.attempt += 1
        return wait
