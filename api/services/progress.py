"""How long work (import, export, backup, restore) reports how far it got: a plain callable, so services never print."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Called as work advances with ``done`` of ``total`` units (records; pages of a backup).

    ``done`` never decreases and ends at ``total`` when the work completes; the caller decides
    what to show (the CLI draws a bar on stderr)."""

    def __call__(self, done: int, total: int, /) -> None: ...
