"""Rebuild: replay the log from offset 0 into fresh folds and compare with the live ones (H2).

"Live" is what a server would start from: each fold's checkpoint plus the log's tail. A
rebuild that digests equal proves the checkpoints hold nothing the log does not; the rebuilt
folds then replace the checkpoints. No embedding model is loaded: events carry their vectors.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from memstream.api.services.settings import Settings
from memstream.projections.catalog import ReadModelOptions, factories
from memstream.projections.runner import ProjectionRunner
from memstream.streams.buses.embedded import DECISION_SNAPSHOT, catch_up_decision_state, restore_decision_state
from memstream.streams.decision.state import DecisionState
from memstream.streams.log.sqlite import SqliteLog
from memstream.streams.snapshots import SnapshotStore

Progress = Callable[[str, int, int], None]


def rebuild_all(
    settings: Settings, *, stop: int | None = None, save: bool = True, progress: Progress | None = None
) -> dict[str, Any]:
    log = SqliteLog(settings.log_path, num_partitions=settings.partitions, synchronous=settings.sync)
    snapshots = SnapshotStore(settings.snapshot_dir)
    try:
        # The live side is read from its checkpoints first, then the log's ends are taken: on a
        # live store (servers writing meanwhile) both sides are folded to exactly those ends.
        live_runner: ProjectionRunner | None = None
        live_decision: DecisionState | None = None
        if stop is None:
            # Digests leave vector graphs out (derived data): the live state is loaded without them.
            live_runner = ProjectionRunner(log, factories(snapshots, ReadModelOptions(vector_graphs=False)), snapshots)
            live_runner.restore()
            live_decision = restore_decision_state(log, snapshots)
        end = log.end_offset() if stop is None else min(stop, log.end_offset())
        ends = (end, log.audit_end_offset())
        started = time.perf_counter()
        fresh = ProjectionRunner(log, factories(snapshots, settings.read_model_options), snapshots=None)
        fresh.catch_up(end, progress=(lambda done, total: progress("read models", done, total)) if progress else None)
        decision = DecisionState(log.num_partitions)
        if stop is None:
            catch_up_decision_state(log, decision, stop=ends)
        seconds = time.perf_counter() - started
        report: dict[str, Any] = {
            "offset": end - 1,
            "events": end,
            "seconds": round(seconds, 3),
            "events_per_second": round(end / seconds) if seconds > 0 else None,
            "projections": {},
        }
        phases = {"fold": seconds}
        mark = time.perf_counter()
        rebuilt = fresh.digests()
        if stop is None:
            rebuilt["decision"] = decision.digest()
        phases["digests"] = time.perf_counter() - mark
        report["phases_s"] = phases
        if live_runner is not None and live_decision is not None:
            mark = time.perf_counter()
            live_runner.catch_up(end)
            live = live_runner.digests()
            catch_up_decision_state(log, live_decision, stop=ends)
            live["decision"] = live_decision.digest()
            phases["live"] = time.perf_counter() - mark
            for name, digest in rebuilt.items():
                report["projections"][name] = {"rebuilt": digest, "live": live[name], "equal": digest == live[name]}
            report["equal"] = all(p["equal"] for p in report["projections"].values())
            if save:
                mark = time.perf_counter()
                fresh.checkpoint_to(snapshots)
                snapshots.save(DECISION_SNAPSHOT, decision.to_snapshot())
                phases["save"] = time.perf_counter() - mark
        else:
            report["projections"] = {name: {"rebuilt": d} for name, d in rebuilt.items()}
            report["equal"] = True
        report["phases_s"] = {name: round(s, 3) for name, s in phases.items()}
        return report
    finally:
        log.close()
