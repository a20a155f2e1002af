"""The fold's per-vector norm keeps the interpreter lock and equals ``np.dot``'s to the bit."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

import numpy as np
import pytest

from memstream.projections.vectors.segment import inv_norm


def _other_thread_ran(work: Callable[[threading.Event], None]) -> bool:
    """Whether a thread that wants the lock ran while ``work`` did (``work`` is given the
    event the thread sets). With a switch interval far above ``work``'s length, the only way
    in is a C call that lets the lock go. A busy machine may not wake the thread at every
    release, so a pass here can be luck, a failure cannot."""
    go = threading.Lock()
    go.acquire()
    ran = threading.Event()

    def contender() -> None:
        with go:  # blocks (lock released) until the main thread holds the lock and works
            ran.set()

    old = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    thread = threading.Thread(target=contender, daemon=True)
    try:
        thread.start()
        go.release()  # the contender is runnable now and waits for the lock we hold
        work(ran)
        seen = ran.is_set()
    finally:
        thread.join()
        sys.setswitchinterval(old)
    return seen


@pytest.mark.parametrize("dim", [64, 384])
def test_inv_norm_never_lets_the_lock_go(dim: int) -> None:
    rng = np.random.default_rng(dim)
    vectors = [rng.standard_normal(dim).astype(np.float32) for _ in range(5000)]

    def fold_norms(_ran: threading.Event) -> None:
        for vec in vectors:
            inv_norm(vec)

    assert not _other_thread_ran(fold_norms)


def test_the_probe_sees_a_call_that_lets_the_lock_go() -> None:
    wide = np.ones(384)

    def releasing(ran: threading.Event) -> None:
        for _ in range(200_000):
            np.dot(wide, wide)  # BLAS through np.dot drops the lock for each call
            if ran.is_set():
                return

    assert _other_thread_ran(releasing)


@pytest.mark.parametrize("dim", [64, 256, 384, 768])
def test_inv_norm_equals_the_dot_product_norm_bit_for_bit(dim: int) -> None:
    rng = np.random.default_rng(7 + dim)
    for scale in (1e-3, 1.0, 37.0):
        for _ in range(200):
            vec = (rng.standard_normal(dim) * scale).astype(np.float32)
            wide = vec.astype(np.float64)
            assert inv_norm(vec) == 1.0 / float(np.sqrt(np.dot(wide, wide)))
    assert inv_norm(np.zeros(dim, dtype=np.float32)) == 0.0
    assert inv_norm(np.full(dim, np.inf, dtype=np.float32)) == 0.0
