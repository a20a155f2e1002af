"""Erasure (issue 16): after the erasure event is durably in the log, fold it, destroy the keys,
rewrite every checkpoint that knew the record, and record it in the erasure ledger. A crash
anywhere after the append is completed at the next start (``complete_pending``).
See docs/erasure.md, "The order of an erasure".
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import orjson

from memstream.api.services.settings import Settings
from memstream.projections.catalog import EPISODES, MEMORIES
from memstream.projections.runner import Projection, ProjectionRunner, pick
from memstream.streams.buses.embedded import EmbeddedCommandBus
from memstream.streams.commands import Command, EraseAgentData, EraseMemory
from memstream.streams.decision.whole_agent import names_every_record
from memstream.streams.events import Actor, Scope, decode, utcnow
from memstream.streams.folding import collector_paused
from memstream.streams.log.port import LogRecord
from memstream.streams.log.sealing import ERASURE_TYPES
from memstream.streams.log.sqlite import SqliteLog
from memstream.streams.release import short_switches

log = logging.getLogger(__name__)

LEDGER_NAME = "erasure-ledger.jsonl"
LEDGER_ENV = "MEMSTREAM_ERASURE_LEDGER"

# The memory and episode ids an erasure took (None: not known in this process any more).
Dropped = tuple[Iterable[int], Iterable[int]] | None


class ErasingEngine(Protocol):
    log: SqliteLog
    bus: EmbeddedCommandBus
    runner: ProjectionRunner

    async def read(self, query: Any) -> Any: ...

    async def settle(self, *, checkpoint: bool = False) -> None: ...


def ledger_paths(data_dir: Path) -> list[Path]:
    """Where erasures are recorded: the data directory's ledger, and MEMSTREAM_ERASURE_LEDGER
    (a path outside it, so a restore over a lost data directory still knows them)."""
    paths = [data_dir / LEDGER_NAME]
    extra = os.environ.get(LEDGER_ENV)
    if extra:
        paths.append(Path(extra))
    return paths


def ledger_entry(offset: int, ev: dict[str, Any]) -> dict[str, Any]:
    """What the ledger keeps of an erasure: ids and scopes, never content nor the reason."""
    p = ev["payload"]
    return {
        "event_id": ev["id"],
        "offset": offset,
        "at": ev["occurred_at"],
        "agent_id": ev["scope"]["agent_id"],
        "type": ev["type"],
        "kind": p["kind"],
        # None for an erasure of everything of the agent: its restore erases the agent again.
        "memory_ids": p.get("memory_ids"),
        "episode_ids": p.get("episode_ids"),
        "agent_scope": p["agent_scope"],
        "scopes": p["scopes"],
    }


def append_ledger(data_dir: Path, entry: dict[str, Any]) -> None:
    line = orjson.dumps(entry) + b"\n"
    for path in ledger_paths(data_dir):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())


def read_ledgers(paths: list[Path]) -> list[dict[str, Any]]:
    """Every entry of the ledgers at ``paths`` (once each, by event id), oldest first."""
    seen: dict[str, dict[str, Any]] = {}
    for path in paths:
        if not path.is_file():
            continue
        for line in path.read_bytes().splitlines():
            if line.strip():
                entry = orjson.loads(line)
                seen.setdefault(entry["event_id"], entry)
    return sorted(seen.values(), key=lambda e: (e["at"], e["event_id"]))


REAPPLY_CLIENT = "memstream-restore"


def _commands_of(entry: dict[str, Any]) -> list[Command]:
    """The commands that erase again, in a restored log, what a ledger entry erased."""
    agent = entry["agent_id"]
    reason = f"re-applied at restore from the erasure ledger (event {entry['event_id']})"

    def env(i: int) -> dict[str, Any]:
        return {
            "command_id": f"ledger:{entry['event_id']}:{i}",
            "scope": Scope(agent_id=agent),
            "actor": Actor(client_id=REAPPLY_CLIENT),
            "received_at": utcnow(),
        }

    if entry["kind"] == "agent":
        return [EraseAgentData(**env(0), reason=reason)]
    ids: list[tuple[Literal["mem", "ep"], int]] = [("mem", i) for i in entry["memory_ids"]]
    ids += [("ep", i) for i in entry["episode_ids"]]
    return [EraseMemory(**env(n), kind=kind, record_id=i, reason=reason) for n, (kind, i) in enumerate(ids)]


async def reapply_erasures(settings: Settings, ledger: list[dict[str, Any]]) -> list[str]:
    """After a restore: every ledger erasure the restored log lacks is appended again (on what
    it still holds of it: records the backup never had need nothing) and its keys destroyed.
    Returns the event ids of the erasures re-applied."""
    if not ledger:
        return []
    log_ = SqliteLog(settings.log_path, num_partitions=settings.partitions, synchronous=settings.sync)
    bus = EmbeddedCommandBus(log_)
    await bus.start()
    done: list[str] = []
    try:
        types = tuple(sorted(ERASURE_TYPES))
        present = {decode(r.value)["id"] for r in log_.read(0, types=types, vectors=False, limit=10_000_000)}
        for entry in ledger:
            if entry["event_id"] in present or entry.get("reapplies"):
                continue  # in the restored log already, or an earlier restore's copy of an entry
            for cmd in _commands_of(entry):
                committed = await bus.submit(cmd)
                if committed.offset is None:
                    continue  # not in the restored log: nothing of it to erase
                [rec] = log_.read_offsets([committed.offset])
                ev = decode(rec.value)
                destroy_keys(log_, committed.offset, ev)
                append_ledger(settings.data_dir, {**ledger_entry(committed.offset, ev), "reapplies": entry["event_id"]})
            done.append(entry["event_id"])
    finally:
        await bus.close()
        log_.close()
    return done


def destroy_keys(log_: SqliteLog, offset: int, ev: dict[str, Any]) -> int:
    """Destroy the keys an erasure event names (idempotent: none left, none destroyed)."""
    sealer = log_.sealer
    if sealer is None:
        return 0
    agent = ev["scope"]["agent_id"]
    scopes = ev["payload"]["scopes"]
    gone = sealer.keys.destroy_ids(log_.key_ids(agent, scopes, offset))
    sealer.forget(agent, scopes)
    return gone


def offset_of_command(log_: SqliteLog, agent_id: str, command_id: str) -> int | None:
    """The offset of the erasure event a command appended (for a retried erase command)."""
    types = tuple(sorted(ERASURE_TYPES))
    for rec in log_.read(0, agent_id=agent_id, types=types, vectors=False, limit=1_000_000):
        if decode(rec.value)["command_id"] == command_id:
            return rec.offset
    return None


def unreachable(log_: SqliteLog, refs_offsets: list[int]) -> list[str]:
    """What sealing cannot reach: events written before the log was sealed."""
    if log_.sealed_from == 0:
        return []
    if log_.sealed_from < 0:
        return ["this data directory was written with sealing off (MEMSTREAM_SEALING=off): its events are plaintext"]
    if any(o < log_.sealed_from for o in refs_offsets) or not refs_offsets:
        return [f"log offsets 0..{log_.sealed_from - 1} hold plaintext written before sealing; run memstream seal"]
    return []


async def complete(engine: ErasingEngine, offset: int, data_dir: Path) -> dict[str, Any]:
    """Steps 2 to 5 of an erasure whose event is at ``offset``: fold, destroy keys, rewrite
    checkpoints, record in the ledger. Returns what it did.

    The cyclic collector is paused meanwhile (and what survives frozen after): the fold and
    the checkpoints build and drop millions of objects and no cycles, and each generation-2
    pass they set off walked every object the process made since start-up, 0.2 to 0.8 s with
    the interpreter lock held (four of them in one erase of a 100k-memory agent), which every
    other agent's write waited for. The interpreter lock changes hands more often too
    (``short_switches``)."""
    with collector_paused(), short_switches():
        return await _complete(engine, offset, data_dir)


async def _complete(engine: ErasingEngine, offset: int, data_dir: Path) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    records = await loop.run_in_executor(None, engine.log.read_offsets, [offset])
    ev = decode(records[0].value)
    await engine.settle()  # every read model drops the record
    dropped = dropped_by(engine.runner.projections, ev)
    destroyed = await loop.run_in_executor(None, destroy_keys, engine.log, offset, ev)
    await _rewrite_checkpoints(engine)
    await loop.run_in_executor(None, append_ledger, data_dir, ledger_entry(offset, ev))
    if engine.log.sealer is not None:
        engine.log.sealer.keys.mark_erased(offset)
    return {"event": ev, "keys_destroyed": destroyed, "dropped": dropped}


def dropped_by(projections: Sequence[Projection], ev: dict[str, Any]) -> Dropped:
    """The memory and episode ids an erasure took, for its answer: listed by the event, or, for
    an erasure of everything of an agent (which names none), what the read models dropped when
    they folded it (``None`` when they folded it before this process started: a retry)."""
    p = ev["payload"]
    if not names_every_record(p):
        return p["memory_ids"], p["episode_ids"]
    by_name = {m.name: m for m in projections}
    memories, episodes = pick(by_name, MEMORIES).erased.get(ev["id"]), pick(by_name, EPISODES).erased.get(ev["id"])
    return None if memories is None or episodes is None else (memories, episodes)


async def _rewrite_checkpoints(engine: ErasingEngine) -> None:
    """Every checkpoint rewritten from state that no longer holds the record (the vector
    sidecars and graph files included: a checkpoint writes new ones and drops the old). Each
    checkpoint is written under the directory's ``RewriteLock``: a rebuild saving what it folded
    before the keys went finishes first and is written over here, or, holding the lock, finds
    this erasure's event (appended before any of this) and saves nothing (``ErasureWatch``)."""

    await engine.settle(checkpoint=True)
    await engine.bus.checkpoint()


# (the last erasure offset seen, the erasure events past the last one completed), or None: the log
# is not sealed (nothing to complete).
Pending = tuple[int, list[LogRecord]] | None


def read_pending(log_: SqliteLog) -> Pending:
    """What ``complete_pending`` completes. Past the last completed erasure the log is scanned
    (the whole log when none was ever erased: ~1.9 s at 1M memories), so a start runs this on a
    thread while it loads its checkpoints: SQLite's scan does not hold the interpreter lock."""
    sealer = log_.sealer
    if sealer is None:
        return None
    through, last = sealer.keys.erased_through()
    return last, log_.read(through + 1, types=tuple(sorted(ERASURE_TYPES)), vectors=False, limit=1_000_000)


async def complete_pending(engine: ErasingEngine, data_dir: Path, restored_offset: int, found: Pending) -> int:
    """At start: finish every erasure the log holds past the last one completed (a crash
    between the append and the answer), and rewrite checkpoints older than the last erasure.
    ``restored_offset``: the oldest offset the read models were restored from; ``found``:
    ``read_pending`` of the log (read while they loaded: the log takes no writes before the
    start completes)."""
    loop = asyncio.get_running_loop()
    sealer = engine.log.sealer
    if found is None or sealer is None:
        return 0
    last, pending = found
    done = 0
    for rec in pending:
        ev = decode(rec.value)
        await loop.run_in_executor(None, destroy_keys, engine.log, rec.offset, ev)
        if ev["actor"]["client_id"] != REAPPLY_CLIENT:  # a restore recorded those itself
            await loop.run_in_executor(None, append_ledger, data_dir, ledger_entry(rec.offset, ev))
        done += 1
        last = max(last, rec.offset)
    if done or restored_offset < last:
        await _rewrite_checkpoints(engine)
    if pending:
        sealer.keys.mark_erased(pending[-1].offset)
    return done
