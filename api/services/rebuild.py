"""Rebuild: replay the log from offset 0 into fresh folds and compare with the live ones (H2).

"Live" is what a server would start from: each fold's checkpoint plus the log's tail. A
rebuild that digests equal proves the checkpoints hold nothing the log does not; the rebuilt
folds then replace the checkpoints. No embedding model is loaded: events carry their vectors.

A full rebuild runs on two cores: this process folds the fresh read models while a second one
(``rebuild_worker.py``) loads the live side, catches it up and digests it, and folds the
decision state afresh. Both fold to the same ends of the log, which the second process takes
once the live checkpoints are loaded.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from memstream.api.services import rebuild_worker
from memstream.api.services.erasure_watch import ErasureWatch
from memstream.api.services.rebuild_worker import Ends, Outcome, fresh_factories
from memstream.api.services.settings import Settings
from memstream.projections.catalog import CATALOG, factories
from memstream.projections.runner import ProjectionRunner
from memstream.streams.folding import bulk_fold
from memstream.streams.log.sqlite import SqliteLog
from memstream.streams.snapshots import SnapshotStore

Progress = Callable[[str, int, int], None]
BATCH = 5_000  # events per read of the log, and between two looks at the second process
# The fresh read models the second process folds, beside the decision state (in the same pass
# over the log), so that both have about half the work. At 100k, CPU s: with vectors and
# memories there, this process 31.2 and the second 36.9 (bench/rebuild_speed.py); memories
# folds in ~3 (bench/fold_profile.py), so it is folded here.
WORKER_MODELS: tuple[str, ...] = ("vectors",)
# The second process's command line, before the descriptor of its end of the socket pair.
WORKER: list[str] = ["-m", rebuild_worker.__name__]
# Events from which a rebuild runs in two processes by default.
PARALLEL_FROM = 20_000


class WorkerFailed(RuntimeError):
    """The rebuild's second process failed or died: the rebuild has no answer."""


class _Local:
    """The second process's work done here first, for logs too small to be worth a process
    (starting one costs about a second of imports)."""

    def __init__(self, settings: Settings, models: tuple[str, ...], save: bool) -> None:
        ends: list[Ends] = []
        self._outcome = rebuild_worker.run(settings, models, save, ends.append)
        self._ends = ends[0]

    def poll(self) -> bool:
        return True

    def receive(self, kind: str) -> Any:
        return self._ends if kind == "ends" else self._outcome

    def close(self) -> None:
        pass


class _Worker:
    """The second process (``rebuild_worker.py``) and the parent's end of its socket pair."""

    def __init__(self, settings: Settings, models: tuple[str, ...], save: bool) -> None:
        self._conn, theirs = multiprocessing.Pipe(duplex=True)
        self._proc = subprocess.Popen(
            [sys.executable, *WORKER, str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
        )
        theirs.close()  # the worker's end: the parent reads EOF once the worker has gone
        with contextlib.suppress(OSError):  # it is gone already: ``receive`` says how it ended
            self._conn.send((settings, models, save))

    def poll(self) -> bool:
        return self._conn.poll()

    def receive(self, kind: str) -> Any:
        """The next message, which must be ``kind``; the worker's failure raised here."""
        try:
            got, body = self._conn.recv()
        except (EOFError, OSError):  # gone (a reset when it died with our message unread)
            code = self._proc.wait()
            raise WorkerFailed(f"the rebuild's second process ended without an answer (exit code {code})") from None
        if got == "error":
            raise WorkerFailed(f"the rebuild's second process failed:\n{body}")
        if got != kind:
            raise WorkerFailed(f"the rebuild's second process sent {got!r}, expected {kind!r}")
        return body

    def close(self) -> None:
        self._conn.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:  # the parent failed first: the worker's answer is not wanted
            self._proc.kill()
            self._proc.wait()


def rebuild_all(
    settings: Settings,
    *,
    stop: int | None = None,
    save: bool = True,
    progress: Progress | None = None,
    processes: int | None = None,
) -> dict[str, Any]:
    """``processes``: 2 runs the live side and the decision state in a second process, 1 runs
    all here; by default 2 from ``PARALLEL_FROM`` events on (on a machine with two cores)."""
    if stop is not None:
        return _rebuild_to(settings, stop, progress)
    log = SqliteLog(settings.log_path, num_partitions=settings.partitions, synchronous=settings.sync)
    snapshots = SnapshotStore(settings.snapshot_dir)
    watch = ErasureWatch(log)  # before anything reads the log, the worker included
    worker: _Worker | _Local | None = None
    try:
        # The log's end now is at most the ends the worker takes: fold that far meanwhile.
        floor = log.end_offset()
        if processes is None:
            processes = 2 if floor >= PARALLEL_FROM and (os.cpu_count() or 1) > 1 else 1
        worker = (_Worker if processes > 1 else _Local)(settings, WORKER_MODELS, save)
        started = time.perf_counter()
        mine = [m.name for m in CATALOG if m.name not in WORKER_MODELS]
        fresh = ProjectionRunner(log, fresh_factories(settings, snapshots, mine), snapshots=None)
        ends = _fold_to_worker_ends(fresh, floor, worker, progress)
        end = ends[0]
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
        phases["digests"] = time.perf_counter() - mark
        saved = False
        if save:
            mark = time.perf_counter()
            saved = watch.save_unless_landed(settings.snapshot_dir, end, lambda: fresh.checkpoint_to(snapshots)) is None
            phases["save"] = time.perf_counter() - mark
        mark = time.perf_counter()
        outcome: Outcome = worker.receive("done")
        phases["wait"] = time.perf_counter() - mark
        erasure = watch.landed(end) or outcome.erasure
        report["saved"] = saved and outcome.saved
        if save and not report["saved"]:
            # What was saved before the erasure is rewritten by it; the rest stays the server's.
            report["not_saved"] = f"{erasure}: run the rebuild again to compare and save"
        if erasure is not None:
            report["erasure_meanwhile"] = erasure
        rebuilt.update(outcome.rebuilt)
        for name in [m.name for m in CATALOG] + ["decision"]:
            digest = rebuilt[name]
            live = outcome.live[name]
            report["projections"][name] = {"rebuilt": digest, "live": live, "equal": digest == live}
        report["equal"] = all(p["equal"] for p in report["projections"].values())
        phases.update({f"worker_{name}": s for name, s in outcome.phases_s.items()})
        phases["live"] = outcome.phases_s["live"]
        report["phases_s"] = {name: round(s, 3) for name, s in phases.items()}
        return report
    finally:
        if worker is not None:
            worker.close()
        log.close()


def _fold_to_worker_ends(
    fresh: ProjectionRunner, floor: int, worker: _Worker | _Local, progress: Progress | None
) -> Ends:
    """Fold ``fresh`` to the ends the worker takes, starting before it has taken them (up to
    ``floor``, which they cannot be below). Progress is reported once the ends are known, so
    what it reports (and whatever a caller does on it) comes after them."""
    ends: Ends | None = None
    pos = fresh.offset + 1
    with bulk_fold(floor):
        while True:
            if ends is None and (pos >= floor or worker.poll()):
                ends = worker.receive("ends")
                if progress is not None:
                    progress("read models", pos, ends[0])
            target = floor if ends is None else ends[0]
            if pos >= target:
                assert ends is not None
                return ends
            fresh.catch_up(min(target, pos + BATCH), batch=BATCH)
            pos = fresh.offset + 1
            if ends is not None and progress is not None:
                progress("read models", pos, ends[0])


def _rebuild_to(settings: Settings, stop: int, progress: Progress | None) -> dict[str, Any]:
    """Fresh read models folded up to ``stop`` (exclusive), without a live side to compare."""
    log = SqliteLog(settings.log_path, num_partitions=settings.partitions, synchronous=settings.sync)
    try:
        end = min(stop, log.end_offset())
        started = time.perf_counter()
        fresh = ProjectionRunner(log, factories(SnapshotStore(settings.snapshot_dir), settings.read_model_options))
        fresh.catch_up(end, progress=(lambda done, total: progress("read models", done, total)) if progress else None)
        seconds = time.perf_counter() - started
        mark = time.perf_counter()
        rebuilt = fresh.digests()
        return {
            "offset": end - 1,
            "events": end,
            "seconds": round(seconds, 3),
            "events_per_second": round(end / seconds) if seconds > 0 else None,
            "projections": {name: {"rebuilt": d} for name, d in rebuilt.items()},
            "equal": True,
            "phases_s": {"fold": round(seconds, 3), "digests": round(time.perf_counter() - mark, 3)},
        }
    finally:
        log.close()
