"""An erasure's long steps sharing the interpreter lock: big structures freed in pieces on a
thread of their own, and the lock handed over more often while those steps run.

Freeing 100k objects at once is one long call that holds the interpreter lock: dropping an
erased agent's cached keys (100k AES-GCM contexts) took 0.2-0.5 s of the bus's writer
thread, and every other agent's write waited for it. A structure handed to ``release_later``
is emptied here a slice at a time, the lock let go between slices, so the threads that
commit and answer writes run in between. The holder must not use it again.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

SLICE = 1_000  # items freed between two yields of the interpreter lock
SWITCH_S = 0.001  # the interpreter's switch interval while an erasure runs (its default: 5 ms)

_pending: queue.SimpleQueue[Any] = queue.SimpleQueue()
_started = threading.Lock()
_thread: threading.Thread | None = None


def release_later(*containers: dict[Any, Any] | list[Any] | set[Any]) -> None:
    """Hand ``containers`` to the release thread, which empties them in slices."""
    global _thread
    for c in containers:
        if c:
            _pending.put(c)
    with _started:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_run, name="memstream-release", daemon=True)
            _thread.start()


def drain(container: dict[Any, Any] | list[Any] | set[Any], step: int = SLICE) -> None:
    """Empty ``container`` ``step`` items at a time, yielding the interpreter lock between."""
    while container:
        if isinstance(container, dict):
            for _ in range(min(step, len(container))):
                container.popitem()
        elif isinstance(container, list):
            del container[-step:]
        else:
            for _ in range(min(step, len(container))):
                container.pop()
        time.sleep(0)  # let a thread waiting for the lock have it


def run_later(step: Callable[[], bool]) -> None:
    """Call ``step`` on the release thread until it returns False, yielding the interpreter
    lock between calls: for a structure that must be taken apart a slice at a time by its
    owner's rules (under its lock), not just emptied."""
    release_later()
    _pending.put(step)


def _run() -> None:
    while True:
        item = _pending.get()
        if callable(item):
            while item():
                time.sleep(0)
        else:
            drain(item)


_switching = threading.Lock()
_short = 0  # erasures running with the short switch interval
_kept = 0.0  # the interval to restore when the last of them ends


@contextlib.contextmanager
def short_switches() -> Iterator[None]:
    """Hand the interpreter lock over every ``SWITCH_S`` while this runs. A thread that
    folds or writes an erasure for seconds keeps the lock until another has waited a switch
    interval for it, and a store passes it between the event loop, the embedder and the
    writer a few times: at 5 ms a handover, stores took 20-30 ms meanwhile instead of 5."""
    global _short, _kept
    with _switching:
        if _short == 0:
            _kept = sys.getswitchinterval()
            sys.setswitchinterval(min(_kept, SWITCH_S))
        _short += 1
    try:
        yield
    finally:
        with _switching:
            _short -= 1
            if _short == 0:
                sys.setswitchinterval(_kept)
