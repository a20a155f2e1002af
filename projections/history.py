"""History: which log offsets touched each memory or episode (H1).

The projection keeps offsets only; the events themselves are read back from the log when a
history is asked for. That keeps the fold small at millions of events and makes the answer
exactly what the log holds. Deleted records keep their history: nothing here is ever removed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from sys import intern
from typing import Any


def refs_touched(ev: dict[str, Any]) -> list[str]:
    """The refs an event changes, as the history of each should list it."""
    t = ev["type"]
    p = ev["payload"]
    if t.startswith("memory."):
        return [f"{p.get('kind', 'mem')}:{p['id']}"]
    if t.startswith("episode."):
        return [f"ep:{p['id']}"]
    if t == "standing.declared":
        return [p["ref"]]
    if t == "agent_data.deleted":
        return [f"mem:{i}" for i in p["memory_ids"]] + [f"ep:{i}" for i in p["episode_ids"]]
    return []


@dataclass
class HistoryProjection:
    name: str = "history"
    # Events whose key an erasure destroyed are still listed (as redacted entries): ids are clear.
    sees_redacted = True
    offset: int = -1
    # ref -> the offsets that touched it: the one offset itself while there is one (most refs:
    # a stored memory nobody changed), a list from the second on. A one-item list per ref was
    # 64 of the ~200 bytes per memory this held at 100k.
    offsets: dict[str, int | list[int]] = field(default_factory=dict)

    def apply(self, offset: int, ev: dict[str, Any]) -> None:
        for ref in refs_touched(ev):
            offsets = self.offsets.get(ref)
            if offsets is None:
                self.offsets[intern(ref)] = offset  # one string with the versions and lexical refs
            elif isinstance(offsets, int):
                self.offsets[ref] = [offsets, offset]
            else:
                offsets.append(offset)

    def of(self, ref: str) -> list[int]:
        offsets = self.offsets.get(ref)
        if offsets is None:
            return []
        return [offsets] if isinstance(offsets, int) else offsets

    def to_snapshot(self) -> dict[str, Any]:
        return {"offsets": {k: [v] if isinstance(v, int) else v for k, v in sorted(self.offsets.items())}}

    def load_snapshot(self, body: dict[str, Any]) -> None:
        self.offsets = {intern(k): v[0] if len(v) == 1 else list(v) for k, v in body["offsets"].items()}
