"""Whether an erasure landed while a rebuild read the log (its save and comparison then can't stand)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from memstream.streams.log.sealing import ERASURE_TYPES
from memstream.streams.log.sqlite import SqliteLog
from memstream.streams.snapshots import RewriteLock

_TYPES = tuple(sorted(ERASURE_TYPES))


class ErasureWatch:
    """Begun before a rebuild reads the log. An erasure appends its event, then destroys the
    record's keys (the key store's generation moves), then rewrites every checkpoint: a fold
    that opened the record before the keys went holds its text, and two folds that opened it
    on either side of that moment differ. ``landed`` is asked while holding the checkpoints'
    ``RewriteLock``: an erasure it does not see yet rewrites the checkpoints after the save."""

    def __init__(self, log: SqliteLog) -> None:
        self._log = log
        self._generation = self._keys_generation()

    def _keys_generation(self) -> int | None:
        sealer = self._log.sealer
        return None if sealer is None else sealer.keys.generation()

    def landed(self, end: int) -> str | None:
        """What landed since the watch began, for a fold that read the log up to ``end``
        (exclusive), or None."""
        after = self._log.read(end, types=_TYPES, vectors=False, limit=1)
        if after:
            erased_at = after[0].offset
            return f"an erasure (offset {erased_at}) was appended past the offsets the rebuild folded (to {end - 1})"
        if self._keys_generation() != self._generation:
            return "an erasure destroyed keys of records the rebuild was reading"
        return None

    def save_unless_landed(self, directory: Path, end: int, save: Callable[[], object]) -> str | None:
        """Holding the checkpoint directory's lock, ``save`` unless an erasure landed (what
        ``landed`` says, then returned)."""
        with RewriteLock(directory):
            erasure = self.landed(end)
            if erasure is None:
                save()
            return erasure
