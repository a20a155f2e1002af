"""Long folds and the cyclic garbage collector: pause it while folding, freeze what survives."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
from collections.abc import Callable, Iterator
from functools import cache

BULK = 10_000  # events: from here on a fold runs with the cyclic GC paused


@contextlib.contextmanager
def bulk_fold(events: int) -> Iterator[None]:
    """Pause the cyclic garbage collector while folding many events.

    A fold allocates millions of small long-lived objects and no cycles; with the collector
    on, every generation-2 pass walks the whole (growing) state, which makes a long replay
    quadratic-ish. Afterwards the survivors are frozen out of future collections."""
    if events < BULK:
        yield
        return
    with collector_paused():
        yield


@contextlib.contextmanager
def collector_paused(*, collect: bool = False) -> Iterator[None]:
    """Pause the cyclic garbage collector while building long-lived state (a long fold, a
    checkpoint's load), then freeze what survives. Loading the checkpoints at 100k memories
    builds millions of objects and no cycles: with the collector on, its passes over them took
    more than half of the load (3.9 CPU s against 1.8 paused, bench/restart.py). Nested or
    concurrent uses leave the collector to the outermost one.

    A freeze also keeps any garbage cycle alive at that moment for good. A pause that recurs
    for as long as the process runs (a worker's tail) passes ``collect=True``: the garbage is
    collected before the freeze, a pass over what was made since the last freeze only (earlier
    survivors are frozen already); frozen without it every few seconds, a busy worker would
    keep a little more garbage each time."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        if collect:
            gc.collect()
        gc.freeze()


def freeze_long_lived() -> None:
    """Move every object alive now out of the cyclic collector's reach (``gc.freeze``).

    Called once the read models are loaded (from snapshots, or folded): they are millions of
    small objects that live as long as the process and hold no garbage cycles, and without this
    every generation-2 collection walks all of them, a pause of hundreds of milliseconds at
    100k memories that lands on whichever call triggers it (the p99 of a loaded server). The
    start-up's own garbage is collected first, so it is not frozen with them, and the memory
    it held is handed back to the system (``trim_heap``)."""
    gc.collect()
    gc.freeze()
    trim_heap()


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    fn = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    return fn if callable(fn) else None


def trim_heap() -> bool:
    """Return the C allocator's free memory to the system (glibc's ``malloc_trim``; False
    where there is none, as on musl or macOS).

    A start-up fold frees much more than it keeps (decoded events, opened records, the
    checkpoint's snapshot bodies), and glibc keeps freed blocks below its heap's top for
    reuse: at 100k memories a cold start held about 1 kB per memory that no object used,
    until trimmed (docs/benchmarks.md, "1M memories")."""
    fn = _malloc_trim()
    if fn is None:
        return False
    fn(0)
    return True
