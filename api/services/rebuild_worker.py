"""The rebuild's second process: the live side and the decision state, beside the read models' fold.

A full rebuild is Python work on two independent sides: the fresh read models folded from the
log, and what they are compared with (the live checkpoints loaded and caught up, their digests)
plus the decision state folded afresh. The GIL keeps threads from running them at once, so the
second side runs in a process of its own: ``python -m`` this module, a fresh interpreter (the
parent holds SQLite connections, which must not be shared over a fork, and multiprocessing's
spawn would run the caller's ``__main__`` again). It talks to the parent over a socket pair
whose end it is given as a file descriptor: it receives ``(settings, save)``, then sends

1. ``("ends", (events end, audit end))``: the log's ends, taken once the live checkpoints are
   loaded (a server checkpointing meanwhile cannot put the live side past them);
2. ``("done", Outcome)`` or ``("error", traceback)``: what it found, or why it failed.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from memstream.api.services.erasure_watch import ErasureWatch
from memstream.api.services.settings import Settings
from memstream.projections.catalog import CATALOG, ReadModelOptions, factories
from memstream.projections.runner import ProjectionFactory, ProjectionRunner
from memstream.streams.buses.embedded import (
    DECISION_SNAPSHOT,
    catch_up_decision_state,
    restore_decision_state,
)
from memstream.streams.decision.state import DecisionState
from memstream.streams.log.sqlite import SqliteLog
from memstream.streams.snapshots import SnapshotStore

Ends = tuple[int, int]


@dataclass(slots=True)
class Outcome:
    """The second process's findings: digests of the live side (every read model and the
    decision state) and of what it folded afresh (the decision state and its read models),
    and its phases' wall seconds."""

    live: dict[str, str] = field(default_factory=dict)
    rebuilt: dict[str, str] = field(default_factory=dict)
    phases_s: dict[str, float] = field(default_factory=dict)
    saved: bool = False
    # An erasure that landed while it read the log (``ErasureWatch.landed``): then it saved
    # nothing after it, and its digests may have opened the record on either side of it.
    erasure: str | None = None


def serve(conn: Connection) -> int:
    """The process's work: every failure goes back to the parent as its traceback."""
    try:
        settings, models, save = conn.recv()
        conn.send(("done", run(settings, models, save, lambda ends: conn.send(("ends", ends)))))
        return 0
    except BaseException:  # reported to the parent, which raises it
        conn.send(("error", traceback.format_exc()))
        return 1
    finally:
        conn.close()


def fresh_factories(settings: Settings, snapshots: SnapshotStore, names: Iterable[str]) -> list[ProjectionFactory]:
    """Factories of the named read models, as a rebuild makes them fresh (catalog order)."""
    wanted = set(names)
    made = factories(snapshots, settings.read_model_options)
    return [make for model, make in zip(CATALOG, made, strict=True) if model.name in wanted]


def run(settings: Settings, models: tuple[str, ...], save: bool, took_ends: Callable[[Ends], object]) -> Outcome:
    """Load the live side and take the log's ends (given to ``took_ends``), digest the live
    side caught up to them, then fold the decision state and ``models`` afresh to them."""
    out = Outcome()
    log = SqliteLog(settings.log_path, num_partitions=settings.partitions, synchronous=settings.sync)
    snapshots = SnapshotStore(settings.snapshot_dir)
    watch = ErasureWatch(log)
    try:
        mark = time.perf_counter()
        # Digests leave vector graphs out (derived data): the live state is loaded without them.
        live = ProjectionRunner(log, factories(snapshots, ReadModelOptions(vector_graphs=False)), snapshots)
        live.restore()
        live_decision = restore_decision_state(log, snapshots)
        ends: Ends = (log.end_offset(), log.audit_end_offset())
        took_ends(ends)
        live.catch_up(ends[0])
        out.live = live.digests()
        catch_up_decision_state(log, live_decision, stop=ends)
        out.live["decision"] = live_decision.digest()
        del live, live_decision  # the fresh state below is as big: not both at once
        out.phases_s["live"] = time.perf_counter() - mark

        # The fresh decision state and ``models``, in one pass: each record is opened once.
        mark = time.perf_counter()
        decision = DecisionState(log.num_partitions)
        fresh = ProjectionRunner(log, fresh_factories(settings, snapshots, models), snapshots=None)
        catch_up_decision_state(log, decision, stop=ends, also=fresh.apply_event)
        out.phases_s["fold"] = time.perf_counter() - mark
        mark = time.perf_counter()
        out.rebuilt = fresh.digests()
        out.rebuilt["decision"] = decision.digest()
        out.phases_s["digests"] = time.perf_counter() - mark
        if save:
            mark = time.perf_counter()

            def save_both() -> None:
                fresh.checkpoint_to(snapshots)
                snapshots.save(DECISION_SNAPSHOT, decision.to_snapshot())

            out.erasure = watch.save_unless_landed(settings.snapshot_dir, ends[0], save_both)
            out.saved = out.erasure is None
            out.phases_s["save"] = time.perf_counter() - mark
        out.erasure = out.erasure or watch.landed(ends[0])
        return out
    finally:
        log.close()


if __name__ == "__main__":
    # Run through the module's importable name, so what it sends unpickles in the parent.
    from memstream.api.services import rebuild_worker

    sys.exit(rebuild_worker.serve(Connection(int(sys.argv[1]))))
