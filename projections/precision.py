"""Recall precision per agent: the last ``set_recall_precision`` is current (R13)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class PrecisionProjection:
    name: str = "precision"
    offset: int = -1
    levels: dict[str, str] = field(default_factory=dict)

    def apply(self, offset: int, ev: dict[str, Any]) -> None:
        if ev["type"] == "recall_precision.set":
            self.levels[ev["scope"]["agent_id"]] = ev["payload"]["level"]

    def level(self, agent_id: str, default: str = "balanced") -> str:
        return self.levels.get(agent_id, default)

    def to_snapshot(self) -> dict[str, Any]:
        return {"levels": dict(sorted(self.levels.items()))}

    def load_snapshot(self, body: dict[str, Any]) -> None:
        self.levels = dict(body["levels"])
