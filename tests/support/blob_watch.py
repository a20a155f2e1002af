"""What a mapped file keeps resident: now, and while a new sidecar is written beside it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memstream.streams.snapshots import SnapshotStore


def mapped_rss_kb(path: Path) -> int:
    """Resident kB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:  # a mapping's first line
            inside = len(head) >= 6 and head[5] == str(path)
        elif inside and line.startswith("Rss:"):
            total += int(head[1])
    return total


def resident_while_saving(monkeypatch: pytest.MonkeyPatch, mapped: Path) -> list[int]:
    """``SnapshotStore.save_blob`` patched to note, after each part it writes, the resident kB
    of this process's mappings of ``mapped``: the list fills as blobs are saved."""
    resident: list[int] = []
    save_blob = SnapshotStore.save_blob

    def watched(self: SnapshotStore, name: str, data: Any) -> str:
        def parts() -> Iterator[Any]:
            for part in data:
                yield part
                resident.append(mapped_rss_kb(mapped))

        return save_blob(self, name, parts())

    monkeypatch.setattr(SnapshotStore, "save_blob", watched)
    return resident
