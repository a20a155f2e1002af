"""Access-control rules without a server: grant resolution and every tool's classification."""

from __future__ import annotations

from memstream.api.services.acl import (
    READ,
    WILDCARD,
    WRITE,
    effective_permission,
)
from memstream.api.tools.registry import REGISTRY


def test_exact_grant_beats_wildcard_and_sweeps_take_the_weakest() -> None:
    grants = {"*": READ, "alice": 0, "bob": WRITE}
    assert effective_permission(grants, "alice") == 0  # exact none beats wildcard read
    assert effective_permission(grants, "bob") == WRITE  # exact read-write beats wildcard read
    assert effective_permission(grants, "carol") == READ
    assert effective_permission(grants, WILDCARD) == 0  # a sweep includes alice
    assert effective_permission({"alice": WRITE, "bob": WRITE}, WILDCARD) == 0  # names never add up to *
    assert effective_permission({"*": WRITE}, WILDCARD) == WRITE


def test_every_tool_is_classified() -> None:
    """A tool nobody classified is admin-only (fail closed); this names it so it gets a rule."""
    from memstream.api.services.acl import classified

    assert sorted(n for n in REGISTRY if not classified(n)) == []
    assert REGISTRY["delete_agent_data"].admin and REGISTRY["reembed"].admin
