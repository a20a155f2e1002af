"""Which rows a read may see: the isolation axes of CONTRACTS R10.

``agent_id`` is matched exactly. ``project_id``: None reads every project, ``'X'`` reads X plus
the global ``''`` pool, ``''`` reads the global pool only. ``channel``: None or ``''`` reads
every channel, ``'C'`` reads C plus the unscoped ``''`` channel.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ScopeFilter:
    agent_id: str
    project_id: str | None = None
    channel: str | None = None

    def admits(self, project_id: str, channel: str) -> bool:
        if self.project_id is not None and project_id != self.project_id and project_id != "":
            return False
        return not self.channel or channel == self.channel or channel == ""
