"""Where an agent erasure stalls other agents' stores (issue 16): a timeline, for bench/erasure.py
--trace. Three recorders run while the erase does:

- a sampler thread that sleeps 1 ms at a time: when it wakes much later than asked, another
  thread held the interpreter lock that long, and the stacks of every thread at that moment
  name who (a thread that held it through one long C call is still on that call's line);
- an event-loop ticker: how late a 1 ms sleep on the loop wakes (every store waits for the loop);
- the erasure's phases: spans of the server steps (the writer's commits, the read models' fold,
  the key destruction, the checkpoints, the decision snapshot's copy, build and save).

``report`` lines each slow store up with the phases and the lock holders that overlapped it.
Log-only: nothing here changes what the server does.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

HERE = "memstream"


@dataclass
class Timeline:
    t0: float = field(default_factory=time.perf_counter)
    spans: list[tuple[str, float, float]] = field(default_factory=list)  # (phase, start, end)
    holds: list[tuple[float, float, list[str]]] = field(default_factory=list)  # (start, end, stacks)
    loop_lags: list[tuple[float, float]] = field(default_factory=list)  # (when, ms late)
    stores: list[tuple[float, float]] = field(default_factory=list)  # (start, end)

    def span(self, name: str, start: float, end: float) -> None:
        self.spans.append((name, start, end))


def _stack(frame: Any, depth: int = 4) -> str:
    """The innermost ``depth`` frames of the project's code (else the innermost frames)."""
    frames = []
    f = frame
    while f is not None:
        frames.append(f)
        f = f.f_back
    ours = [f for f in frames if HERE in f.f_code.co_filename] or frames
    return " < ".join(
        f"{f.f_code.co_filename.rsplit('/', 2)[-1]}:{f.f_lineno}:{f.f_code.co_name}" for f in ours[:depth]
    )


class Sampler(threading.Thread):
    """Wakes every ``tick_s``; a wake ``min_ms`` late is an interpreter-lock hold by another thread."""

    def __init__(self, tl: Timeline, tick_s: float = 0.001, min_ms: float = 15.0) -> None:
        super().__init__(name="erasure-trace-sampler", daemon=True)
        self.tl, self.tick_s, self.min_ms = tl, tick_s, min_ms
        self.stop = threading.Event()

    def run(self) -> None:
        names = {}
        while not self.stop.is_set():
            asked = time.perf_counter()
            time.sleep(self.tick_s)
            woke = time.perf_counter()
            late_ms = (woke - asked - self.tick_s) * 1000
            if late_ms < self.min_ms:
                continue
            if len(names) != threading.active_count():
                names = {t.ident: t.name for t in threading.enumerate()}
            me = threading.get_ident()
            stacks = [
                f"[{names.get(ident, ident)}] {_stack(fr)}"
                for ident, fr in sys._current_frames().items()
                if ident != me and not _idle(fr)
            ]
            self.tl.holds.append((asked, woke, stacks))


def _idle(frame: Any) -> bool:
    """A thread waiting on a queue, lock or selector: not the one that held the lock."""
    name = frame.f_code.co_name
    return name in {"wait", "_worker", "get", "select", "_run_once"} and HERE not in frame.f_code.co_filename


async def loop_ticker(tl: Timeline, done: asyncio.Event, tick_s: float = 0.001) -> None:
    while not done.is_set():
        asked = time.perf_counter()
        await asyncio.sleep(tick_s)
        late_ms = (time.perf_counter() - asked - tick_s) * 1000
        if late_ms >= 5:
            tl.loop_lags.append((asked, late_ms))


@contextmanager
def phases(tl: Timeline, eng: Any) -> Iterator[None]:
    """Spans of the erasure's server steps, by wrapping them where they are called from."""
    from memstream.api.services import erasure
    from memstream.streams.buses import embedded
    from memstream.streams.decision.state import DecisionState

    undo: list[Callable[[], None]] = []

    def wrap(owner: Any, attr: str, name: str | Callable[..., str]) -> None:
        kept = getattr(owner, attr)
        is_async = asyncio.iscoroutinefunction(kept)

        def label(args: Any, kwargs: Any) -> str:
            return name(*args, **kwargs) if callable(name) else name

        if is_async:

            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                s = time.perf_counter()
                try:
                    return await kept(*args, **kwargs)
                finally:
                    tl.span(label(args, kwargs), s, time.perf_counter())

            setattr(owner, attr, timed_async)
        else:

            def timed(*args: Any, **kwargs: Any) -> Any:
                s = time.perf_counter()
                try:
                    return kept(*args, **kwargs)
                finally:
                    tl.span(label(args, kwargs), s, time.perf_counter())

            setattr(owner, attr, timed)
        undo.append(lambda: setattr(owner, attr, kept))

    def commit_name(items: list[Any]) -> str:
        from memstream.streams.commands import EraseAgentData

        return "writer commit (erasure)" if any(isinstance(i, EraseAgentData) for i in items) else "writer commit"

    wrap(eng.bus, "_commit", commit_name)
    wrap(eng.runner, "catch_up", "read models fold")
    wrap(eng.runner, "checkpoint", "read models checkpoint")
    wrap(erasure, "destroy_keys", "destroy keys")
    wrap(erasure, "append_ledger", "ledger")
    wrap(embedded, "capture", "decision capture (writer)")
    wrap(DecisionState, "to_snapshot", "decision to_snapshot")
    wrap(eng.bus.snapshots, "save", lambda name, body: f"snapshot save {name}")
    for p in eng.runner.projections:
        wrap(p, "to_snapshot", f"to_snapshot {p.name}")
    try:
        yield
    finally:
        for u in reversed(undo):
            u()


def report(tl: Timeline, slow_ms: float = 50.0) -> dict[str, Any]:
    """Per slow store: the phases it overlapped and the lock holds inside it; and in aggregate."""

    def rel(t: float) -> float:
        return round((t - tl.t0) * 1000, 1)

    slow = [(s, e) for s, e in tl.stores if (e - s) * 1000 >= slow_ms]
    per_store = []
    blamed: Counter[str] = Counter()
    phase_hits: Counter[str] = Counter()
    for s, e in slow:
        over = sorted({n for n, a, b in tl.spans if a < e and b > s})
        holds = [(a, b, st) for a, b, st in tl.holds if a < e and b > s]
        for a, b, st in holds:
            for line in st:
                blamed[line] += round((min(b, e) - max(a, s)) * 1000)
        for n in over:
            phase_hits[n] += 1
        per_store.append(
            {
                "at_ms": rel(s),
                "ms": round((e - s) * 1000, 1),
                "phases": over,
                "held_ms": round(sum((min(b, e) - max(a, s)) * 1000 for a, b, _ in holds), 1),
                "holds": [{"at_ms": rel(a), "ms": round((b - a) * 1000, 1), "stacks": st} for a, b, st in holds],
                "loop_late_ms": round(sum(ms for w, ms in tl.loop_lags if s <= w < e), 1),
            }
        )
    return {
        "phases": [
            {"name": n, "at_ms": rel(a), "ms": round((b - a) * 1000, 1)}
            for n, a, b in sorted(tl.spans, key=lambda x: x[1])
            if (b - a) > 0.002
        ],
        "slow_stores": per_store,
        "slow_store_phase_counts": dict(phase_hits.most_common()),
        "lock_holders_ms_in_slow_stores": dict(blamed.most_common(25)),
        "holds_over_15ms": len(tl.holds),
        "holds_total_ms": round(sum((b - a) * 1000 for a, b, _ in tl.holds), 1),
        "loop_lags_over_5ms": len(tl.loop_lags),
    }
