"""How an erasure of everything of an agent reads, wherever it is folded (docs/erasure.md,
"The order of an erasure").

Such an ``agent.erased`` names no record: it means every record of its agent written before
its own offset, and each consumer (the decision state, every read model, the key map) takes
their ids from its own state at that point of the log. Its size, and so the commit that other
agents' writes queue behind, no longer grows with the agent (the list of every id was 590 KB
at 100,000 memories). A fold of the same prefix derives the same ids, so a rebuild digests
equal. Events written before this carry ``memory_ids``/``episode_ids`` and fold by those
lists, as they always did; erasures by source and of one record keep their (bounded) lists.
"""

from __future__ import annotations

from typing import Any


def names_every_record(payload: dict[str, Any]) -> bool:
    """Whether an erasure's (or its fold form's) payload means every record of its agent."""
    return payload.get("memory_ids") is None
