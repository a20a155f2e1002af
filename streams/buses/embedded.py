"""The embedded command bus: decide inside the log's write transaction, with group commit, so
racing writers can never both land and an answer is only given for a write on disk.
See docs/architecture.md, "The write path".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from memstream.streams.commands import Command
from memstream.streams.deciders.step import NewAudit, NewEvent, decide_and_fold
from memstream.streams.decision.capture import capture
from memstream.streams.decision.limits import Limits
from memstream.streams.decision.state import DecisionState
from memstream.streams.events import AuditRecord, decode
from memstream.streams.folding import bulk_fold, collector_paused
from memstream.streams.log.port import Committed, LogUnavailable
from memstream.streams.log.sealing import ERASURE_TYPES, Sealer
from memstream.streams.log.sqlite import SqliteLog
from memstream.streams.snapshots import SnapshotStore

log = logging.getLogger(__name__)

DECISION_SNAPSHOT = "decision"
MAX_BATCH = 512
# Folds a record into read models: (offset, its opened and decoded event, its opened vector).
# The event is the one the decision state folded just before: the read models may change it.
RecordFold = Callable[[int, dict[str, Any], bytes | None], None]


@dataclass(slots=True)
class _Pending:
    item: Command | AuditRecord
    future: asyncio.Future[Committed]


def restore_decision_state(log_: SqliteLog, snapshots: SnapshotStore | None) -> DecisionState:
    """The decision state of its snapshot, if sound and compatible (else empty), not caught up."""
    if snapshots is not None:
        with collector_paused():
            body = snapshots.load(DECISION_SNAPSHOT)
            if (
                body is not None
                and body.get("format") in DecisionState.FORMATS
                and body.get("num_partitions") == log_.num_partitions
            ):
                return DecisionState.from_snapshot(body)
    return DecisionState(log_.num_partitions)


def load_decision_state(log_: SqliteLog, snapshots: SnapshotStore | None) -> DecisionState:
    """The decision state from its snapshot (if sound and compatible) plus the log's tail."""
    state = restore_decision_state(log_, snapshots)
    catch_up_decision_state(log_, state)
    return state


def catch_up_decision_state(
    log_: SqliteLog,
    state: DecisionState,
    conn: sqlite3.Connection | None = None,
    *,
    stop: tuple[int, int] | None = None,
    also: RecordFold | None = None,
) -> int:
    """Fold every event and audit record the state has not seen yet; returns how many.
    ``stop``: (events end, audit end), exclusive: fold only up to there, and only the audit
    records decided before the events end (what a rebuild on a live log compares with).
    ``also``: given each event as it is folded (offset, opened value, opened vector), so read
    models fold in the same pass and a sealed record is opened once for both (a rebuild).

    Audit records carry the event offset they were decided after, so the two tables are
    merged back into the order the decider saw them: the command-id memo (and its bounded
    window) is then identical on every replay.
    """
    db = conn if conn is not None else log_.connection()
    if stop is not None:
        behind = stop[0] - 1 - state.event_offset
    else:
        behind = log_.end_offset() - 1 - state.event_offset if conn is None else 0
    with bulk_fold(behind):
        return _catch_up(db, state, stop, log_.sealer, also)


def _opened(sealer: Sealer | None, value: bytes) -> dict[str, Any]:
    if sealer is None:
        return decode(value)
    ev = sealer.open_decoded(value, None)[0]
    if ev.get("type") in ERASURE_TYPES:
        # Another process erased: its keys are going, so new writes must not reuse a cached one.
        sealer.forget(ev["scope"]["agent_id"], ev["payload"].get("scopes"))
    return ev


def _opened_with(sealer: Sealer | None, value: bytes, vector: bytes | None) -> tuple[dict[str, Any], bytes | None]:
    """``_opened``, with the opened vector for the read models' fold."""
    if sealer is None:
        return decode(value), vector
    ev, vector = sealer.open_decoded(value, vector)
    if ev.get("type") in ERASURE_TYPES:
        sealer.forget(ev["scope"]["agent_id"], ev["payload"].get("scopes"))
    return ev, vector


def _catch_up(
    db: sqlite3.Connection,
    state: DecisionState,
    stop: tuple[int, int] | None = None,
    sealer: Sealer | None = None,
    also: RecordFold | None = None,
) -> int:
    n = 0
    events_sql = f'SELECT "offset", value, {"NULL" if also is None else "vector"} FROM events WHERE "offset" > ?'
    audit_sql = 'SELECT "offset", after_event, value FROM audit WHERE "offset" > ?'
    limits: tuple[int, ...] = ()
    if stop is not None:
        events_sql += ' AND "offset" < ?'
        audit_sql += ' AND "offset" < ? AND after_event < ?'
        limits = (stop[1], stop[0])
    while True:
        rows = db.execute(
            events_sql + ' ORDER BY "offset" LIMIT 5000',
            (state.event_offset, *([stop[0]] if stop is not None else [])),
        ).fetchall()
        bound = rows[-1][0] if len(rows) == 5000 else None
        sql = audit_sql
        args: tuple[int, ...] = (state.audit_offset, *limits)
        if bound is not None:
            sql += " AND after_event < ?"
            args += (bound,)
        audits = db.execute(sql + ' ORDER BY "offset"', args).fetchall()
        if sealer is not None:  # the batch's keys in one query, not one per record
            sealer.refresh()
            sealer.fetch([row[1] for row in rows] + [row[2] for row in audits])
        i = 0
        for offset, value, vector in rows:
            while i < len(audits) and audits[i][1] < offset:
                state.apply_audit(audits[i][0], _opened(sealer, audits[i][2]))
                i += 1
            if also is None:
                state.apply_event(offset, _opened(sealer, value))
            else:
                ev, vector = _opened_with(sealer, value, vector)
                state.apply_event(offset, ev)
                also(offset, ev, vector)
        for a_offset, _, value in audits[i:]:
            state.apply_audit(a_offset, _opened(sealer, value))
        n += len(rows) + len(audits)
        if bound is None:
            return n


class EmbeddedCommandBus:
    def __init__(
        self,
        log_: SqliteLog,
        *,
        limits: Limits | None = None,
        snapshots: SnapshotStore | None = None,
        snapshot_every: int = 100_000,
    ) -> None:
        self.log = log_
        self.limits = limits or Limits()
        self.snapshots = snapshots
        self.snapshot_every = snapshot_every
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memstream-writer")
        # Decision snapshots are built and written here, one at a time and in the order asked,
        # so an erasure's (``checkpoint``) always lands after any periodic one before it.
        self._snapshotter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memstream-decision-snapshot")
        self._saving: Future[None] | None = None  # the periodic snapshot being written
        self._conn: sqlite3.Connection | None = None
        self.state: DecisionState | None = None
        self._since_snapshot = 0
        self._queue: asyncio.Queue[_Pending] | None = None
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._open)
        self._queue = asyncio.Queue()
        self._task = asyncio.create_task(self._run(), name="memstream-committer")

    @property
    def committing(self) -> bool:
        """Whether the task that commits queued writes is alive (started and not stopped)."""
        return self._task is not None and not self._task.done()

    def _open(self) -> None:
        self._conn = self.log.writer_connection()
        self.state = restore_decision_state(self.log, self.snapshots)
        # What was folded past the snapshot counts as unsaved: a cold start (no snapshot, or
        # one of another format) saves what it folded, so the next start does not fold it again.
        self._since_snapshot = catch_up_decision_state(self.log, self.state)
        if self.snapshots is not None and self._since_snapshot >= self.snapshot_every:
            self._save_snapshot()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._shutdown)
        self._executor.shutdown(wait=True)
        self._snapshotter.shutdown(wait=True)

    def _shutdown(self) -> None:
        if self._saving is not None:  # a periodic snapshot still being written: this one goes after it
            with contextlib.suppress(Exception):
                self._saving.result()
        if self.state is not None and self.snapshots is not None and self._since_snapshot:
            self._save_snapshot()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def checkpoint(self) -> None:
        """Rewrite the decision snapshot now (after an erasure: the old one knew the record)."""
        snapshots = self.snapshots
        if snapshots is None:
            return
        loop = asyncio.get_running_loop()

        def captured() -> DecisionState | None:
            return capture(self.state) if self.state is not None else None

        # Copied on the writer thread (the state is its own), built and written on another:
        # the writer goes on committing other agents' writes meanwhile. The copy is of the
        # state after the erasure, so the snapshot on disk holds none of the erased data.
        state = await loop.run_in_executor(self._executor, captured)
        if state is not None:
            await loop.run_in_executor(self._snapshotter, _save, snapshots, state)

    @property
    def snapshot_pending(self) -> bool:
        """A periodic decision snapshot is being written beside the writer."""
        return self._saving is not None and not self._saving.done()

    async def on_snapshot_thread(self, work: Callable[[], None]) -> None:
        """Run ``work`` (the read models' checkpoint) on the thread that writes decision
        snapshots, after any being written: the process's checkpoints go one at a time, so
        their peaks do not add (at 1M memories they overlapped and met within 13 MB of 3 GB)."""
        await asyncio.get_running_loop().run_in_executor(self._snapshotter, work)

    # -- the port ---------------------------------------------------------------------------

    async def submit(self, command: Command) -> Committed:
        return await self._enqueue(command)

    async def record_refusal(self, record: AuditRecord) -> None:
        await self._enqueue(record)

    async def _enqueue(self, item: Command | AuditRecord) -> Committed:
        if self._queue is None:
            raise RuntimeError("the command bus is not started")
        fut: asyncio.Future[Committed] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(item, fut))
        return await fut

    # -- the committer ----------------------------------------------------------------------

    async def _run(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            while len(batch) < MAX_BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            batch = [p for p in batch if not p.future.cancelled()]
            if not batch:
                continue
            try:
                results = await loop.run_in_executor(self._executor, self._commit, [p.item for p in batch])
            except Exception as exc:  # the whole batch failed: nothing of it was appended
                err = exc if isinstance(exc, LogUnavailable) else LogUnavailable(str(exc))
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(err)
                continue
            for p, result in zip(batch, results, strict=True):
                if p.future.done():
                    continue
                if isinstance(result, BaseException):
                    p.future.set_exception(result)
                else:
                    p.future.set_result(result)

    def _commit(self, items: list[Command | AuditRecord]) -> list[Committed | BaseException]:
        """One transaction: catch up, decide in order, append, commit. Runs on the writer thread."""
        conn = self._conn
        assert conn is not None
        if self.state is None:  # dropped after a failed append, and not folded again yet
            try:
                self.state = load_decision_state(self.log, self.snapshots)
            except (sqlite3.Error, OSError) as exc:
                raise LogUnavailable(f"the log is not readable: {exc}") from exc
        state = self.state
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise LogUnavailable(f"the log is not writable: {exc}") from exc
        try:
            catch_up_decision_state(self.log, state, conn)
            results: list[Committed | BaseException] = []
            events: list[NewEvent] = []
            audits: list[NewAudit] = []
            for item in items:
                try:
                    results.append(decide_and_fold(state, item, self.limits, events, audits))
                except Exception as exc:  # a bug in one decider must not sink the batch
                    log.exception("decider failed")
                    results.append(exc)
            event_rows, audit_rows, bindings = self._sealed(events, audits)
            if bindings:
                conn.executemany("INSERT INTO key_scopes VALUES (?,?,?,?)", bindings)
            if event_rows:
                conn.executemany(
                    'INSERT INTO events("offset", partition, agent, type, value, vector) VALUES (?,?,?,?,?,?)',
                    event_rows,
                )
            if audit_rows:
                conn.executemany(
                    'INSERT INTO audit("offset", partition, agent, kind, after_event, value) VALUES (?,?,?,?,?,?)',
                    audit_rows,
                )
            conn.execute("COMMIT")
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if self.log.sealer is not None:
                self.log.sealer.reset()  # keys it cached may not have reached the key store
            # The state already folded events that were never committed: drop it and fold it
            # afresh. If the log cannot be read now either, no state is kept (readers of the
            # decision state see none): the next batch folds it before deciding anything.
            self.state = None
            try:
                self.state = load_decision_state(self.log, self.snapshots)
            except Exception as reload_exc:
                log.warning("the decision state could not be folded again after a failed append: %s", reload_exc)
            raise LogUnavailable(f"append failed, nothing was written: {exc}") from exc
        self._since_snapshot += len(events)
        if self.snapshots is not None and self._since_snapshot >= self.snapshot_every:
            self._save_snapshot_behind()
        return results

    def _sealed(
        self, events: list[NewEvent], audits: list[NewAudit]
    ) -> tuple[
        list[tuple[int, int, str, str, bytes, bytes | None]],
        list[tuple[int, int, str, str, int, bytes]],
        list[tuple[bytes, str, str, int]],
    ]:
        """The rows to insert, sealed, and which new key seals what (committed with them; the
        keys themselves are durable in the key store before they are handed out)."""
        sealer = self.log.sealer
        event_rows = []
        for e in events:
            value, vector = e.value, e.vector
            if sealer is not None:
                sealed = sealer.seal_event(e.offset, decode(e.value), e.vector)
                if sealed is not None:
                    value, vector = sealed
            event_rows.append((e.offset, e.partition, e.agent, e.type, value, vector))
        audit_rows = []
        for a in audits:
            value = a.value
            if sealer is not None:
                # Keys are ordered by event offsets: an audit record's comes after the event it followed.
                value = sealer.seal_audit(a.after_event + 1, decode(a.value)) or value
            audit_rows.append((a.offset, a.partition, a.agent, a.kind, a.after_event, value))
        return event_rows, audit_rows, sealer.take_bindings() if sealer is not None else []

    def _save_snapshot_behind(self) -> None:
        """The periodic snapshot: the state copied here on the writer (its own; ``capture``
        copies containers only), built and written on the snapshot thread while the writer
        commits on. Built and written here it held every write: 1.6-2.7 s at 1M memories, each
        ``snapshot_every`` events (docs/benchmarks.md, "A running server's checkpoint (wave 11)")."""
        assert self.state is not None and self.snapshots is not None
        if self._saving is not None and not self._saving.done():
            return  # the previous one is still being written: a later commit asks again
        self._since_snapshot = 0
        self._saving = self._snapshotter.submit(_write_snapshot, self.snapshots, capture(self.state))

    def _save_snapshot(self) -> None:
        assert self.state is not None and self.snapshots is not None
        try:
            self.snapshots.save(DECISION_SNAPSHOT, self.state.to_snapshot())
            self._since_snapshot = 0
        except OSError as exc:  # a missing snapshot costs replay time, never correctness
            log.warning("could not write the decision snapshot: %s", exc)
            self._since_snapshot = 0  # next try after another snapshot_every events, not every commit


def _save(snapshots: SnapshotStore, state: DecisionState) -> None:
    snapshots.save(DECISION_SNAPSHOT, state.to_snapshot())


def _write_snapshot(snapshots: SnapshotStore, state: DecisionState) -> None:
    """A periodic snapshot, on the snapshot thread: nobody waits for its outcome, so it is logged."""
    try:
        _save(snapshots, state)
    except OSError as exc:  # a missing snapshot costs replay time, never correctness
        log.warning("could not write the decision snapshot: %s", exc)
    except Exception:
        log.exception("the decision snapshot failed")
