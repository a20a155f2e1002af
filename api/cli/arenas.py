"""One glibc malloc arena for a long-running server, so memory freed on one thread serves the next."""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Mapping

M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)
ARENAS = 1


def limit_arenas(env: Mapping[str, str]) -> int | None:
    """Cap glibc's malloc arenas at ``ARENAS`` unless ``MALLOC_ARENA_MAX`` (glibc's own setting,
    read at start) chose a number; returns the cap set, None when left alone or not glibc.

    glibc gives each thread that allocates its own arena, up to 8 per core, and memory freed in
    one arena is not reused by another. A server's periodic checkpoint runs on its own thread:
    at 1M memories its peak was 65-130 MB higher than with one arena, what the start had already
    freed on the main thread not being reused there (docs/benchmarks.md, "A running server's
    checkpoint with room (wave 12)"). Run before the server starts any thread: arenas made
    before it stay."""
    if not sys.platform.startswith("linux") or "MALLOC_ARENA_MAX" in env:
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # another C library (musl): nothing to cap
        return None
    return ARENAS if mallopt(M_ARENA_MAX, ARENAS) == 1 else None
