"""The client's exceptions: one class per failure code a tool answers (api/faces/http.py STATUS)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class MemstreamError(Exception):
    """A call memstream refused or could not answer. ``code`` is the failure code (``invalid``,
    ``not_found``, ...), ``status`` the HTTP status (None in process), ``body`` the answer's JSON."""

    default_code = "error"

    def __init__(
        self, message: str, *, code: str | None = None, status: int | None = None, body: Any = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.status = status
        self.body: Any = body if body is not None else {}


class Invalid(MemstreamError):
    default_code = "invalid"


class Unauthorized(MemstreamError):
    """ACL mode: no bearer token, or one the server does not know (HTTP 401)."""

    default_code = "unauthorized"


class PermissionDenied(MemstreamError):
    default_code = "permission_denied"


class NotFound(MemstreamError):
    default_code = "not_found"


class UnknownTool(MemstreamError):
    default_code = "unknown_tool"


class Locked(MemstreamError):
    default_code = "locked"


class Conflict(MemstreamError):
    default_code = "conflict"


class TooLarge(MemstreamError):
    default_code = "too_large"


class Unavailable(MemstreamError):
    """The log or the embedding model could not be reached (503), or the server could not be
    reached at all, after the client's retries."""

    default_code = "unavailable"


class InternalError(MemstreamError):
    default_code = "internal"


ERRORS: dict[str, type[MemstreamError]] = {
    "invalid": Invalid,
    "unauthorized": Unauthorized,
    "permission_denied": PermissionDenied,
    "not_found": NotFound,
    "unknown_tool": UnknownTool,
    "locked": Locked,
    "conflict": Conflict,
    "too_large": TooLarge,
    "unavailable": Unavailable,
    "log_unavailable": Unavailable,
    "embedding_unavailable": Unavailable,
    "internal": InternalError,
}


def message_of(body: Any) -> str:
    """The human text of a failure answer: ``error``, or a refused store's ``reason``."""
    if isinstance(body, dict):
        text = body.get("error") or body.get("reason")
        if isinstance(text, str) and text:
            return text
    return "the call failed"


def error_for(code: str | None, body: Any, status: int | None = None) -> MemstreamError:
    """The exception for a failure ``code``; a code this client does not know gives the base class."""
    cls = ERRORS.get(code or "", MemstreamError)
    return cls(message_of(body), code=code, status=status, body=body)


# The response header a server names a failure's code in (api/faces/http.py ERROR_HEADER).
ERROR_HEADER = "memstream-error"


def code_of_answer(status: int, body: Any, headers: Mapping[str, str] | None = None) -> str | None:
    """The failure code of an HTTP answer: the one the server names in ``Memstream-Error``. A
    server older than that header is read by its status, and where two codes share one (404,
    409, 503) by the answer's text, as such a server writes it."""
    named = headers.get(ERROR_HEADER) if headers is not None else None
    if named:
        return named
    text = message_of(body)
    if status == 404:
        return "unknown_tool" if text.startswith("Unknown tool") else "not_found"
    if status == 409:
        return "locked" if " locked" in text and "not edited" not in text else "conflict"
    if status == 503:
        for code in ("log_unavailable", "embedding_unavailable"):
            if text.startswith(code):
                return code
        return "unavailable"
    return {
        400: "invalid",
        401: "unauthorized",
        403: "permission_denied",
        413: "too_large",
        415: "invalid",
        500: "internal",
        502: "unavailable",
        504: "unavailable",
    }.get(status)
