"""Recall precision per agent: the last ``set_recall_precision`` is current (R13)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class PrecisionProjection:
    name: str = "precision"
    offset: int = -1
    # agent -> (level, beta); an agent without an entry follows the global default.
    overrides: dict[str, tuple[str, float]] = field(default_factory=dict)
    # agent -> (threshold, signal): the calibrated gate the last setting carried, if any.
    gates: dict[str, tuple[float, str]] = field(default_factory=dict)

    def apply(self, offset: int, ev: dict[str, Any]) -> None:
        if ev["type"] == "agent_data.deleted":
            self.gates.pop(ev["scope"]["agent_id"], None)
            return
        if ev["type"] != "recall_precision.set":
            return
        agent = ev["scope"]["agent_id"]
        p = ev["payload"]
        if p["level"] is None:
            self.overrides.pop(agent, None)
        else:
            self.overrides[agent] = (p["level"], float(p["beta"]))
        gate = p.get("gate")
        if gate:
            self.gates[agent] = (float(gate["threshold"]), gate["signal"])
        elif p["level"] is None:
            self.gates.pop(agent, None)

    def of(self, agent_id: str) -> tuple[str, float] | None:
        return self.overrides.get(agent_id)

    def gate_of(self, agent_id: str) -> tuple[float, str] | None:
        return self.gates.get(agent_id)

    def to_snapshot(self) -> dict[str, Any]:
        return {
            "overrides": {k: list(v) for k, v in sorted(self.overrides.items())},
            "gates": {k: list(v) for k, v in sorted(self.gates.items())},
        }

    def load_snapshot(self, body: dict[str, Any]) -> None:
        self.overrides = {k: (v[0], float(v[1])) for k, v in body["overrides"].items()}
        self.gates = {k: (float(v[0]), v[1]) for k, v in body.get("gates", {}).items()}
