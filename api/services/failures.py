"""How one tool call failed, for dispatch: whether its refusal is audited already, and its code.

Context variables, so the engine that decided a command and the handler that refused on its own
both tell dispatch without passing anything back; the HTTP face turns the code into a status.
"""

from __future__ import annotations

from contextvars import ContextVar

# Within one tool call: whether the decider refused (and so audited) its command, and the
# failure's code (not_found, locked, conflict, ...), which the HTTP face turns into a status.
REFUSAL_AUDITED: ContextVar[bool] = ContextVar("memstream_refusal_audited", default=False)
FAILURE_CODE: ContextVar[str | None] = ContextVar("memstream_failure_code", default=None)


def mark_failure(code: str) -> None:
    """A handler refusing on its own (before any command) names the kind of failure."""
    FAILURE_CODE.set(code)


def mark_rejected(error: str | None) -> None:
    """The decider rejected the call's command and wrote its audit record."""
    REFUSAL_AUDITED.set(True)
    FAILURE_CODE.set(error or "invalid")
