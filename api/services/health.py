"""The embedded engine's health facts for ``check_health``: its log file, committer and checkpoints."""

from __future__ import annotations

import time

from memstream.projections.runner import ProjectionRunner
from memstream.streams.buses.embedded import EmbeddedCommandBus
from memstream.streams.log.sqlite import SqliteLog
from memstream.streams.snapshots import SnapshotStore


class EmbeddedHealth:
    """The ``HealthProbe`` (api/services/ports.py) of an embedded engine."""

    def __init__(self, log: SqliteLog, bus: EmbeddedCommandBus, runner: ProjectionRunner, snapshots: SnapshotStore):
        self.log = log
        self.bus = bus
        self.runner = runner
        self.snapshots = snapshots

    def log_ends(self) -> tuple[int, int]:
        return self.log.end_offset(), self.log.audit_end_offset()

    def committer_running(self) -> bool:
        return self.bus.committing

    def checkpoint_ages(self) -> dict[str, float | None]:
        names = [p.name for p in self.runner.projections] + ["decision"]
        now = time.time()
        ages: dict[str, float | None] = {}
        for name in names:
            try:
                ages[name] = round(now - self.snapshots.path(name).stat().st_mtime, 1)
            except OSError:
                ages[name] = None
        return ages

    def events_since_checkpoint(self) -> int:
        return self.runner.events_since_checkpoint

    def checkpoint_pending(self) -> bool:
        return self.runner.checkpoint_due or self.bus.snapshot_pending

    def integrity(self) -> str:
        return str(self.log.connection().execute("PRAGMA quick_check").fetchone()[0])
