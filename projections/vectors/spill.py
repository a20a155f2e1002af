"""File-backed vector chunks: a long fold's rows in pages the kernel can write out and drop.

A cold start (no checkpoints) folds every vector of the log before its first checkpoint; held in
the process's own (anonymous) memory, a million rows of 384 float32 were 1.5 GB on top of the
rest of the fold until the checkpoint mapped them (docs/vectors.md, "Spilled chunks"). A chunk
from ``Spill`` is a shared map of an unnamed temporary file in the snapshot directory: once full,
its pages are unmapped from the process (``release``), so they stay in the page cache (written
back to the file, then reclaimable) instead of counting as the process's resident memory, and a
read maps them again. The file goes with the last view of its chunk; a killed process leaves
none behind (``O_TMPFILE`` where the filesystem has it, else unlinked at once by ``tempfile``).
"""

from __future__ import annotations

import mmap
import tempfile
from pathlib import Path
from typing import Final

import numpy as np

# Linux 5.4+ (Python 3.11's mmap module does not name it): reclaim the range's pages now.
MADV_PAGEOUT: Final = getattr(mmap, "MADV_PAGEOUT", 21)


class _Spilled(mmap.mmap):
    """The map under a spilled chunk: its type is how ``release`` tells it from a sidecar's
    copy-on-write map, whose own pages (rows changed since the load) unmapping would lose."""


class Spill:
    """Makes full-size vector chunks backed by temporary files in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def chunk(self, rows: int, dim: int) -> np.ndarray:
        """A zeroed (rows, dim) float32 array over a shared map of a new temporary file."""
        nbytes = rows * dim * 4
        with tempfile.TemporaryFile(dir=self.directory) as f:
            f.truncate(nbytes)  # sparse: a page takes room only once written
            m = _Spilled(f.fileno(), nbytes)  # shared: written pages are the file's, not the process's
        return np.frombuffer(m, dtype=np.float32).reshape(rows, dim)


def _map_under(arr: np.ndarray) -> mmap.mmap | None:
    """The memory map ``arr``'s data lies in (through views and memoryviews), or None."""
    base: object = arr
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return base if isinstance(base, mmap.mmap) else None


def spilled(arr: np.ndarray) -> mmap.mmap | None:
    """The spill map under ``arr`` (a chunk or a view of one), or None."""
    m = _map_under(arr)
    return m if isinstance(m, _Spilled) else None


def release(arr: np.ndarray) -> bool:
    """Unmap from the process the pages of the spilled chunk under ``arr`` (the whole chunk);
    their bytes stay the file's and come back when read. False (nothing done) for any other
    array: an anonymous one's pages would be lost, a sidecar map's changed rows too."""
    m = spilled(arr)
    if m is None or not hasattr(mmap, "MADV_DONTNEED"):
        return False
    m.madvise(mmap.MADV_DONTNEED)
    return True


def page_out(arr: np.ndarray) -> bool:
    """Hand back to the kernel the pages of a memory map under ``arr`` (its own range, whole
    pages only), as a checkpoint writes the rows of a loaded sidecar: reading them for the write
    made all 1.5 GB resident at a million rows (docs/benchmarks.md, "A running server's
    checkpoint (wave 11)"). Unlike ``release``, safe on a sidecar's copy-on-write map: a page
    the fold changed is the process's own and is only paged out to swap, never dropped, and a
    page left as the file's comes back from the file when read. False when ``arr`` is not over a
    map or the kernel refuses (before 5.4)."""
    m = _map_under(arr)
    if m is None or not arr.flags.c_contiguous or arr.nbytes == 0:
        return False
    start = arr.ctypes.data - np.frombuffer(m, dtype=np.uint8, count=1).ctypes.data
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    end = (start + arr.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    if end <= first:
        return False
    try:
        m.madvise(MADV_PAGEOUT, first, end - first)
    except OSError:
        return False
    return True
