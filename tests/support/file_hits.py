"""Which files on disk hold given bytes, looked at while something may still be renaming them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

LOOKS = 100  # a directory still changing after this many looks is a bug of its own


def files_holding(root: Path, needles: Sequence[bytes], pattern: str = "*") -> list[tuple[Path, int]]:
    """(file, needle index) for each needle in each file under ``root.glob(pattern)``, searched
    recursively. A file renamed or removed between the listing and its read (a checkpoint's
    temporary file, the broker cleaner's ``.log`` to ``.log.deleted``) is under neither name in
    that look, and an empty answer would be a false "gone": the look starts over instead."""
    for _ in range(LOOKS):
        found: list[tuple[Path, int]] = []
        moved = False
        for top in sorted(root.glob(pattern)):
            for path in sorted(top.rglob("*")) if top.is_dir() else [top]:
                try:
                    data = path.read_bytes()
                except IsADirectoryError:
                    continue
                except FileNotFoundError:
                    moved = True
                    continue
                found += [(path, i) for i, needle in enumerate(needles) if needle in data]
        if not moved:
            return found
    raise AssertionError(f"files under {root} kept moving through {LOOKS} looks")
