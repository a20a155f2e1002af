"""The read models of one partition of a worker, and how far they have folded."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from memstream.api.services.jobs import ReembedJob
from memstream.projections.catalog import DEFAULTS, ReadModelOptions, read_models
from memstream.projections.redaction import ERASURES, fold_form, is_redacted, sees_redacted
from memstream.streams.events import decode
from memstream.streams.log.port import LogUnavailable
from memstream.streams.snapshots import SnapshotStore

CATCH_UP_DEADLINE_S = 30.0


class PartitionModels:
    """The read models of one partition and how far they have folded."""

    def __init__(
        self,
        partition: int,
        end_at_start: int,
        store: SnapshotStore | None = None,
        options: ReadModelOptions = DEFAULTS,
    ) -> None:
        self.partition = partition
        self.store = store  # where this partition's checkpoints go (api/kafka/worker/checkpoints.py)
        self.projections = read_models(store, options)
        self.offset = -1  # last event applied
        self.target = end_at_start - 1  # reads wait for at least this (the end when assigned)
        self.lock = asyncio.Lock()
        self.advanced = asyncio.Event()
        self.restored_from: int | None = None  # the checkpoint offset these models started at
        self.checkpoint_offset: int | None = None  # the last checkpoint written or restored
        self.since_checkpoint = 0
        self.checkpointing = False
        self.checkpoint_done = asyncio.Event()  # set (then cleared) as each checkpoint ends
        self.jobs: dict[str, ReembedJob] = {}  # admin jobs over this partition's agents (re-embedding)
        self.folded_by_agent = 0  # events folded as the decider appended them (fold-on-append)
        self.folded_by_tail = 0  # events folded from the topic (catch-up and repair)
        # The tail's slices: it folds a fetch on the event loop at most ``tail.SLICE`` records at
        # a time, the loop taking a turn between two (api/kafka/worker/tail.py).
        self.tail_slices = 0
        self.largest_tail_slice = 0
        # Offsets of the erasures folded while the worker looks for a previous owner's pending
        # ones (api/kafka/worker/erasure.py ``complete_pending``): a catch-up's fold meets them,
        # so only what the models held before it is read again for them. None: not noted.
        self.erasures_folded: list[int] | None = None

    def tail_sliced(self, records: int) -> None:
        """The tail folds a slice of ``records`` records (api/kafka/worker/tail.py)."""
        self.tail_slices += 1
        self.largest_tail_slice = max(self.largest_tail_slice, records)

    def apply(self, offset: int, value: bytes, vector: bytes | None) -> None:
        """Fold one event as the embedded runner does (``ProjectionRunner.apply``): an erasure
        as the deletion it lists, an event it redacted only into the folds that keep envelopes
        (projections/redaction.py)."""
        self.apply_event(offset, decode(value), vector)

    def apply_event(self, offset: int, event: dict[str, Any], vector: bytes | None) -> None:
        """``apply`` of a record already opened and decoded (``event`` is the fold's own)."""
        if self.erasures_folded is not None and event["type"] in ERASURES:
            self.erasures_folded.append(offset)
        ev = fold_form(event)
        if vector is not None:
            ev["vector"] = vector
        redacted = is_redacted(ev)
        for p in self.projections:
            if not redacted or sees_redacted(p):
                p.apply(offset, ev)
            p.offset = offset
        self.offset = offset

    async def caught_up(self, offset: int, deadline_s: float = CATCH_UP_DEADLINE_S) -> None:
        """Wait until the models include ``offset`` (a write acknowledged earlier)."""
        end = time.monotonic() + deadline_s
        while self.offset < offset:
            self.advanced.clear()
            left = end - time.monotonic()
            if left <= 0:
                # a 503 the caller retries (dispatch answers log_unavailable), not an internal error
                raise LogUnavailable(
                    f"partition {self.partition} is catching up: read models at {self.offset}, waited for {offset}"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.advanced.wait(), left)
