"""When a call may be sent again, and how long to wait first (docs/client.md, "Retries")."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

# Statuses that mean "not answered, try again": 503 is memstream's own (log or model
# unavailable); 502 and 504 come from a proxy in front of it.
RETRY_STATUSES = frozenset({502, 503, 504})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff: ``backoff`` seconds, doubling per attempt, at most ``max_backoff``;
    a server's ``Retry-After`` (seconds) is honoured up to ``max_backoff``. ``retries`` is how
    many times a call is sent again after the first try (0: never)."""

    retries: int = 4
    backoff: float = 0.25
    max_backoff: float = 8.0

    def __post_init__(self) -> None:
        if self.retries < 0 or self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("retries, backoff and max_backoff must not be negative")

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        wait = self.backoff * (2**attempt)
        if retry_after is not None:
            with contextlib.suppress(ValueError):  # an HTTP date: keep our own backoff
                wait = max(wait, float(retry_after))
        return min(wait, self.max_backoff)
