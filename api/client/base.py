"""What ``Client`` and ``AsyncClient`` share apart from their I/O: the address, the retry policy,
the closed flag and each call's preparation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .calls import prepare
from .remote import headers_for
from .retry import RetryPolicy

DEFAULT_TIMEOUT = 60.0  # past Kafka mode's 45 s forwarding deadline, so its 503 arrives


class ClientBase:
    base_url: str
    retry_policy: RetryPolicy
    _closed: bool

    def _over_http(
        self,
        base_url: str,
        token: str | None,
        client_id: str | None,
        session_id: str | None,
        policy: RetryPolicy,
    ) -> dict[str, str]:
        """Set up for a server at ``base_url``: the headers every request carries."""
        self.base_url = base_url.rstrip("/")
        self.retry_policy = policy
        self._closed = False
        return headers_for(token, client_id, session_id)

    def _in_process(self, data_dir: str | Path) -> None:
        """Set up for the engine in this process: nothing to retry."""
        self.base_url = f"local:{data_dir}"
        self.retry_policy = RetryPolicy(0)
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this client is closed")

    def _prepared(self, tool: str, args: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        self._check_open()
        return prepare(tool, args)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"
