"""``freeze_long_lived`` hands the C allocator's free memory back to the system (streams/folding.py):
a start-up fold frees far more than it keeps, and glibc keeps freed blocks under its heap's top."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import pytest

from memstream.streams.folding import freeze_long_lived, trim_heap

BLOCK = 4096  # above pymalloc's 512 bytes: these come from malloc's heap, below its mmap threshold
COUNT = 20_000  # 80 MB


def rss_anon_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/self/status")


@pytest.mark.skipif(not sys.platform.startswith("linux") or not trim_heap(), reason="glibc's malloc_trim")
def test_freed_heap_memory_is_returned_once_the_models_are_frozen() -> None:
    blocks = [bytes([i % 251]) * BLOCK for i in range(COUNT)]
    kept = blocks[-1]  # the heap's top stays in use: only a trim can return what lies below it
    del blocks
    gc.collect()
    held = rss_anon_kb()
    try:
        freeze_long_lived()
        returned = held - rss_anon_kb()
    finally:
        gc.unfreeze()
    assert kept[0] == (COUNT - 1) % 251
    assert returned > COUNT * BLOCK // 1024 // 2, f"only {returned} kB of {COUNT * BLOCK // 1024} kB freed came back"
