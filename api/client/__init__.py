"""memstream's typed Python client, sync and async, over HTTP or in process (docs/client.md).

Installed as ``memstream.client`` from ``api/client/`` (setup.py). Every tool of the registry is
a method with the tool's argument names; answers are pydantic models; failures are exceptions
named for their failure code.
"""

from __future__ import annotations

if __name__ != "memstream.client":  # one identity: two would make two sets of exception classes
    raise ImportError(f"import the client as memstream.client, not {__name__}")

from . import results
from .aio import AsyncClient
from .errors import (
    Conflict,
    InternalError,
    Invalid,
    Locked,
    MemstreamError,
    NotFound,
    PermissionDenied,
    TooLarge,
    Unauthorized,
    Unavailable,
    UnknownTool,
)
from .retry import RetryPolicy
from .sync import Client

__all__ = [
    "AsyncClient",
    "Client",
    "Conflict",
    "InternalError",
    "Invalid",
    "Locked",
    "MemstreamError",
    "NotFound",
    "PermissionDenied",
    "RetryPolicy",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
    "UnknownTool",
    "results",
]
