"""How folds see erasures and the events an erasure redacted (docs/erasure.md, "Replay").

An erasure event folds as a deletion of everything it lists, locked or not; an event whose
key was destroyed reaches only the folds that keep envelopes (``sees_redacted``: history,
which lists it as a redacted entry), so every read model ends as if the record never existed,
and a rebuild from offset 0 digests equal to the live folds that dropped it.
"""

from __future__ import annotations

from typing import Any, Final

ERASURES: Final = frozenset({"record.erased", "agent.erased"})


def fold_form(ev: dict[str, Any]) -> dict[str, Any]:
    """An erasure as the deletion the folds already know (``agent_data.deleted`` of its ids,
    with ``erased`` and ``agent_scope`` for the folds that drop agent-wide data too). An
    erasure of everything of an agent names no ids: ``memory_ids`` and ``episode_ids`` are
    None, and each fold drops every record of the agent it holds (``names_every_record``)."""
    if ev["type"] not in ERASURES:
        return ev
    p = ev["payload"]
    return {
        **ev,
        "type": "agent_data.deleted",
        "payload": {
            "memory_ids": p.get("memory_ids"),
            "episode_ids": p.get("episode_ids"),
            "profile": p["profile"],
            "kept_locked": [],
            "erased": True,
            "agent_scope": p["agent_scope"],
        },
    }


def is_redacted(ev: dict[str, Any]) -> bool:
    return bool(ev.get("redacted"))


def sees_redacted(projection: object) -> bool:
    return bool(getattr(projection, "sees_redacted", False))
