"""Standings: the standing an agent last declared on each of its memories (S1).

An agent sets a result aside or stands on it by declaring ``fact``, ``open``, ``noise`` or
``ruled-out`` (seed 003's vocabulary). The current standing is a fold of the log: the last
declaration wins, earlier ones stay in the log and so in ``history(ref)``. A deleted memory or
episode drops out, so a ref that is gone never lends a standing to anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from memstream.projections.row_dicts import row_dicts
from memstream.streams.decision.whole_agent import names_every_record

# The standings a value cannot stand on alone (seed 003: everything short of ``fact``).
SET_ASIDE: Final[frozenset[str]] = frozenset({"open", "noise", "ruled-out"})


@dataclass(slots=True)
class StandingRow:
    ref: str
    agent_id: str
    standing: str
    note: str | None
    declared_at: str
    offset: int
    client_id: str
    # How many declarations this ref has had; the earlier ones are in its history.
    declarations: int = 1


@dataclass
class StandingsProjection:
    name: str = "standings"
    offset: int = -1
    current: dict[str, StandingRow] = field(default_factory=dict)

    def apply(self, offset: int, ev: dict[str, Any]) -> None:
        t = ev["type"]
        p = ev["payload"]
        if t == "standing.declared":
            before = self.current.get(p["ref"])
            self.current[p["ref"]] = StandingRow(
                ref=p["ref"],
                agent_id=ev["scope"]["agent_id"],
                standing=p["standing"],
                note=p.get("note"),
                declared_at=ev["occurred_at"],
                offset=offset,
                client_id=ev["actor"]["client_id"],
                declarations=1 if before is None else before.declarations + 1,
            )
        elif t == "memory.deleted":
            self.current.pop(f"mem:{p['id']}", None)
        elif t == "episode.deleted":
            self.current.pop(f"ep:{p['id']}", None)
        elif t == "agent_data.deleted" and names_every_record(p):
            agent = ev["scope"]["agent_id"]
            for ref in [ref for ref, row in self.current.items() if row.agent_id == agent]:
                del self.current[ref]
        elif t == "agent_data.deleted":
            for mid in p["memory_ids"]:
                self.current.pop(f"mem:{mid}", None)
            for eid in p["episode_ids"]:
                self.current.pop(f"ep:{eid}", None)

    def of(self, ref: str) -> StandingRow | None:
        return self.current.get(ref)

    def standing_of(self, ref: str) -> str | None:
        row = self.current.get(ref)
        return row.standing if row is not None else None

    def to_snapshot(self) -> dict[str, Any]:
        return {"rows": row_dicts(r for _, r in sorted(self.current.items()))}

    def load_snapshot(self, body: dict[str, Any]) -> None:
        self.current = {r["ref"]: StandingRow(**r) for r in body["rows"]}
