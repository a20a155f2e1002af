"""The projection runner: tail the log, fold events into projections, checkpoint, rebuild.

A projection is a fold (``apply(offset, event)``) with a canonical snapshot form. The runner
owns the I/O around it: where to resume (the snapshot's offset), how far to read, when to
checkpoint. ``rebuild`` is the replay promise made executable: fresh projections folded from
offset 0 must digest equal to the live ones (H2).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

import orjson

from memstream.projections.redaction import fold_form, is_redacted, sees_redacted
from memstream.streams.events import decode
from memstream.streams.folding import bulk_fold, collector_paused
from memstream.streams.log.port import EventLog, LogRecord
from memstream.streams.snapshots import RewriteLock, SnapshotStore

log = logging.getLogger(__name__)


class Projection(Protocol):
    """A read model folded from events. ``offset`` is the last event applied (-1: none)."""

    name: str
    offset: int

    def apply(self, offset: int, event: dict[str, Any]) -> None: ...

    def to_snapshot(self) -> dict[str, Any]:
        """Canonical JSON-able state: equal states give equal snapshots (offset excluded)."""
        ...

    def load_snapshot(self, body: dict[str, Any]) -> None: ...


P = TypeVar("P", bound=Projection)
P_co = TypeVar("P_co", bound=Projection, covariant=True)
# Makes a fresh, empty projection, with whatever constructor arguments it needs.
ProjectionFactory = Callable[[], Projection]


class Named(Protocol[P_co]):
    """A read model's name and type: the key of the runner's typed lookup (see projections/catalog.py)."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> type[P_co]: ...


def digest_of(projection: Projection) -> str:
    return hashlib.sha256(orjson.dumps(projection.to_snapshot(), option=orjson.OPT_SORT_KEYS)).hexdigest()


ProgressFn = Callable[[int, int], None]


# A record opened and decoded: (offset, its event as stored, its vector attachment).
Opened = tuple[int, dict[str, Any], bytes | None]


def fold_record(projections: Iterable[Projection], offset: int, value: bytes, vector: bytes | None) -> None:
    """Fold the record at ``offset`` (its encoded event and vector attachment) into each
    projection that has not applied it: an erasure as the deletion it lists, an event it
    redacted only into the folds that keep envelopes (projections/redaction.py)."""
    fold_event(projections, offset, decode(value), vector)


def fold_event(projections: Iterable[Projection], offset: int, event: dict[str, Any], vector: bytes | None) -> None:
    """``fold_record`` of a record already decoded (``event`` is the fold's own: it is changed)."""
    ev, redacted = _fold_form(event, vector)
    _apply_each(projections, offset, ev, redacted)


def _fold_form(event: dict[str, Any], vector: bytes | None) -> tuple[dict[str, Any], bool]:
    """A record's event in fold form, with its vector attachment, and whether it is redacted."""
    ev = fold_form(event)
    if vector is not None:
        ev["vector"] = vector  # the attachment, for folds that need vectors
    return ev, is_redacted(ev)


def _apply_each(projections: Iterable[Projection], offset: int, ev: dict[str, Any], redacted: bool) -> None:
    for p in projections:
        if offset > p.offset:
            if not redacted or sees_redacted(p):
                p.apply(offset, ev)
            p.offset = offset


@runtime_checkable
class BatchFolding(Protocol):
    """A projection that folds a run of events at once (``apply_many``), with the same result
    as ``apply`` of each in turn: the lexical read model merges a batch's postings in bulk."""

    offset: int

    def apply_many(self, events: Sequence[tuple[int, dict[str, Any]]]) -> None: ...


@runtime_checkable
class DecodedReads(Protocol):
    """A log that reads its records straight into decoded events (the embedded log: its sealed
    records are opened into dicts, not into bytes parsed again: ``SqliteLog.read_decoded``)."""

    def read_decoded(self, start: int = 0, stop: int | None = None, *, limit: int, vectors: bool) -> list[Opened]: ...


def fold_records(projections: Sequence[Projection], records: Sequence[LogRecord]) -> None:
    """``fold_record`` of each record in turn, each decoded once (``fold_opened``)."""
    fold_opened(projections, [(rec.offset, decode(rec.value), rec.vector) for rec in records])


def fold_opened(projections: Sequence[Projection], records: Sequence[Opened]) -> None:
    """``fold_event`` of each record in turn: the projections without ``apply_many`` fold it
    there and then; each one with it gets the batch's events it has not applied (and may see)
    in one call afterwards. Projections are independent of each other, so the order between
    them does not matter, only each one's own order of events."""
    batching = [p for p in projections if isinstance(p, BatchFolding)]
    if not batching:
        for offset, event, vector in records:
            fold_event(projections, offset, event, vector)
        return
    singly = [p for p in projections if not isinstance(p, BatchFolding)]
    events: list[tuple[int, dict[str, Any], bool]] = []
    for offset, event, vector in records:
        ev, redacted = _fold_form(event, vector)
        _apply_each(singly, offset, ev, redacted)
        events.append((offset, ev, redacted))
    if not events:
        return
    last = events[-1][0]
    for b in batching:
        sees = sees_redacted(b)
        b.apply_many([(o, ev) for o, ev, redacted in events if o > b.offset and (sees or not redacted)])
        b.offset = max(b.offset, last)


class FoldedModels(Protocol):
    """Read models folded up to a point of a log: a runner's, or a Kafka worker's of one
    partition (api/kafka/worker/). ``offset`` is the last event they include (-1: none)."""

    @property
    def projections(self) -> Sequence[Projection]: ...

    @property
    def offset(self) -> int: ...

    def apply(self, offset: int, value: bytes, vector: bytes | None) -> None:
        """Fold the record at ``offset``: its encoded event, and its vector attachment if any."""
        ...

    def apply_event(self, offset: int, event: dict[str, Any], vector: bytes | None) -> None:
        """``apply`` of a record already opened and decoded (``event`` is the fold's own)."""
        ...


def pick(by_name: Mapping[str, Projection], model: Named[P]) -> P:
    """The projection named ``model.name`` among ``by_name``, checked to be a ``model.kind``."""
    p = by_name[model.name]
    if not isinstance(p, model.kind):
        raise TypeError(f"read model {model.name!r} is a {type(p).__name__}, not a {model.kind.__name__}")
    return p


class ProjectionRunner:
    """Folds the projections its factories make; a projection whose checkpoint cannot be
    loaded is replaced by a fresh one from the same factory."""

    def __init__(
        self,
        log: EventLog,
        factories: Iterable[ProjectionFactory],
        snapshots: SnapshotStore | None = None,
        *,
        checkpoint_every: int = 100_000,
    ) -> None:
        self.log = log
        self.projections: list[Projection] = []
        self._factories: dict[str, ProjectionFactory] = {}
        for make in factories:
            p = make()
            self.projections.append(p)
            self._factories[p.name] = make
        self._by_name = {p.name: p for p in self.projections}
        self.snapshots = snapshots
        self.checkpoint_every = checkpoint_every
        self._since_checkpoint = 0

    @classmethod
    def over(cls, log: EventLog, projections: Sequence[Projection]) -> ProjectionRunner:
        """A runner folding the given projections, without checkpoints (so nothing to rebuild)."""
        return cls(log, [_given(p) for p in projections])

    def get(self, model: Named[P]) -> P:
        """The projection named ``model.name``, checked to be a ``model.kind``."""
        return pick(self._by_name, model)

    @property
    def events_since_checkpoint(self) -> int:
        """Events folded since the last checkpoint was written (or since start-up)."""
        return self._since_checkpoint

    @property
    def offset(self) -> int:
        """The last offset every projection has applied."""
        return min((p.offset for p in self.projections), default=-1)

    def restore(self) -> None:
        """Resume each projection from its checkpoint, when one is sound. A checkpoint that
        cannot be loaded (damaged, or written by an incompatible version) is discarded and
        that projection starts empty: the log rebuilds it.

        The checkpoints load one after another. Loading three at once on threads (wave 6) bought
        no wall time on a quiet machine (1M: 26-33 s either way; the loads hold the GIL but for
        their file reads and checksums) and raised the peak RSS by ~500 MB, over the 3 GB goal,
        with every parsed body alive at once (docs/benchmarks.md, "Restart"). A load that raises
        leaves only its own read model to be refolded."""
        snapshots = self.snapshots
        if snapshots is None:
            return

        def load(p: Projection) -> Exception | None:
            body = snapshots.load(p.name)
            if body is None:
                return None
            try:
                p.load_snapshot(body["state"])
                p.offset = body["offset"]
            except Exception as exc:  # the checkpoint is unusable, not the process
                return exc
            return None

        with collector_paused():
            unusable = [load(p) for p in self.projections]
        for i, (p, exc) in enumerate(zip(list(self.projections), unusable, strict=True)):
            if exc is not None:
                log.warning("checkpoint of %s is unusable (%s); rebuilding it from the log", p.name, exc)
                fresh = self._factories[p.name]()
                self.projections[i] = self._by_name[p.name] = fresh

    def checkpoint(self) -> None:
        if self.snapshots is not None:
            self.checkpoint_to(self.snapshots)

    def checkpoint_to(self, snapshots: SnapshotStore) -> None:
        for p in self.projections:
            # A checkpoint and the collection of the sidecars it no longer names, as one step
            # against another writer of the directory (a rebuild beside a server): between the
            # two, the other's checkpoint could name a sidecar this collection then drops.
            with RewriteLock(snapshots.directory):
                snapshots.save(p.name, {"offset": p.offset, "state": p.to_snapshot()})
                drop_stale = getattr(p, "drop_stale_sidecars", None)
                if drop_stale is not None:
                    drop_stale()
        self._since_checkpoint = 0

    def catch_up(
        self,
        stop: int | None = None,
        progress: ProgressFn | None = None,
        batch: int = 5_000,
        *,
        checkpoint: bool = True,
    ) -> int:
        """Apply every event up to ``stop`` (default: the log's end); returns how many. Then
        checkpoint if one is due, unless ``checkpoint`` is False: the caller runs
        ``checkpoint_if_due`` later (a read answers first, api/services/engine.py)."""
        end = self.log.end_offset() if stop is None else stop
        pos = self.offset + 1
        with bulk_fold(end - pos):
            applied = self._fold(pos, end, progress, batch)
        self._since_checkpoint += applied
        if checkpoint:
            self.checkpoint_if_due()
        return applied

    @property
    def checkpoint_due(self) -> bool:
        return self.snapshots is not None and self._since_checkpoint >= self.checkpoint_every

    def checkpoint_if_due(self) -> None:
        if not self.checkpoint_due:
            return
        assert self.snapshots is not None
        lock = RewriteLock(self.snapshots.directory)
        if not lock.acquire(blocking=False):
            # Another writer of the directory (a rebuild's save, tens of seconds at a million
            # memories) is at it: reads wait for a due checkpoint, so try after the next fold.
            return
        try:
            self.checkpoint()
        except OSError as exc:  # a checkpoint is a shortcut: without one a start replays more
            log.warning("could not checkpoint the read models (%s); will retry later", exc)
            self._since_checkpoint = 0  # next try after another checkpoint_every events
        finally:
            lock.release()

    def _fold(self, pos: int, end: int, progress: ProgressFn | None, batch: int) -> int:
        applied = 0
        vectors = any(getattr(p, "needs_vectors", False) for p in self.projections)
        decoded = self.log if isinstance(self.log, DecodedReads) else None
        while pos < end:
            if decoded is not None:
                opened = decoded.read_decoded(pos, end, limit=batch, vectors=vectors)
            else:
                opened = [
                    (r.offset, decode(r.value), r.vector) for r in self.log.read(pos, end, limit=batch, vectors=vectors)
                ]
            if not opened:
                break
            fold_opened(self.projections, opened)
            applied += len(opened)
            pos = opened[-1][0] + 1
            if progress is not None:
                progress(pos, end)
        return applied

    def apply(self, offset: int, value: bytes, vector: bytes | None) -> None:
        """Fold one record into every projection that has not applied it (``FoldedModels``)."""
        fold_record(self.projections, offset, value, vector)

    def apply_event(self, offset: int, event: dict[str, Any], vector: bytes | None) -> None:
        """``apply`` of a record already decoded (a rebuild's pass shared with the decision state)."""
        fold_event(self.projections, offset, event, vector)

    def digests(self) -> dict[str, str]:
        return {p.name: digest_of(p) for p in self.projections}


def _given(projection: Projection) -> ProjectionFactory:
    return lambda: projection


def replay(
    log: EventLog,
    factories: Iterable[Callable[[], Projection]],
    stop: int | None = None,
    progress: ProgressFn | None = None,
) -> ProjectionRunner:
    """Fresh projections folded from offset 0 (to ``stop``): the rebuild, with no snapshot."""
    runner = ProjectionRunner(log, factories, snapshots=None)
    runner.catch_up(stop, progress=progress)
    return runner
