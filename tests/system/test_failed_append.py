"""The embedded decider when the log append of decided commands fails (docs/reliability.md,
"When an append fails"): the callers get 503 ``log_unavailable``, the decision state keeps
nothing the log does not hold (no command-id memo, dedup key, lock or id of a failed command),
and each command retried under its command id once the log recovers is applied exactly once.

The failures are real SQLite failures on the writer's connection: the log full
(``PRAGMA max_page_count`` at the file's size: SQLITE_FULL, what a full disk gives), the log
read-only (``PRAGMA query_only``: SQLITE_READONLY, what a read-only mount gives), and the log
full while the connection the writer folds with afterwards is closed, so the state cannot be
folded again at once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.rebuild import rebuild_all
from memstream.api.services.settings import Settings, load_settings
from memstream.api.tools.dispatch import run_tool
from memstream.api.tools.registry import Caller
from memstream.streams.buses.embedded import load_decision_state
from memstream.streams.events import decode
from memstream.streams.log.sqlite import SqliteLog
from tests.support.embedders import HashEmbedder

CALLER = Caller(client_id="failed-append")
AGENT = "fa"
PAD = "pad " * 200  # pages fill after a few stores


def settings_for(data: Path) -> Settings:
    return load_settings(env={}, data_dir=data, sync="NORMAL")


def on_writer(engine: EmbeddedEngine, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on the bus's writer thread (the thread its SQLite connections belong to)."""
    return engine.bus._executor.submit(fn).result()


def pragma(engine: EmbeddedEngine, statement: str) -> None:
    conn = engine.bus._conn
    assert conn is not None
    on_writer(engine, lambda: conn.execute(f"PRAGMA {statement}"))


async def call(engine: EmbeddedEngine, tool: str, **args: Any) -> tuple[dict[str, Any], str | None]:
    body, code = await run_tool(engine, CALLER, tool, {"agent_id": AGENT, **args})
    return body, code


def events_of(engine: EmbeddedEngine) -> list[tuple[int, dict[str, Any]]]:
    log: SqliteLog = engine.log
    return [(r.offset, decode(r.value)) for r in log.read(0, limit=10**9, vectors=False)]


def fresh_digest(engine: EmbeddedEngine) -> str:
    """The decision state folded from the log alone, as a restarted server would have it."""
    return load_decision_state(engine.log, None).digest()


async def fill_the_log(engine: EmbeddedEngine) -> None:
    """Cap the log at its size, then write until even the smallest record is refused: padded
    stores, then lock/unlock events, then duplicate stores (audit records only), each until
    SQLite answers "full". Then no write of any size fits, whichever batch it is decided in."""
    pages = engine.log.connection().execute("PRAGMA page_count").fetchone()[0]
    pragma(engine, f"max_page_count={int(pages)}")

    async def until_full(write: Callable[[int], Awaitable[tuple[dict[str, Any], str | None]]]) -> None:
        for i in range(2_000):
            body, code = await write(i)
            if code is not None:
                assert code == "log_unavailable" and "full" in body["error"], body
                return
        raise AssertionError("the page cap did not bite")

    await until_full(lambda i: call(engine, "store", content=f"filler {i} {PAD}"))
    body, code = await call(engine, "store", content="tiny", id="toggled")
    if code is None:  # still room for a small store: toggle its lock until there is none
        mid = body["id"]
        await until_full(lambda i: call(engine, "lock_memory" if i % 2 == 0 else "unlock_memory", memory_id=mid))
    await until_full(lambda i: call(engine, "store", content=f"seed 0 {PAD}"))  # skipped: an audit record each


async def make_full(engine: EmbeddedEngine) -> Callable[[], None]:
    await fill_the_log(engine)
    return lambda: pragma(engine, f"max_page_count={2**31 - 2}")


async def make_read_only(engine: EmbeddedEngine) -> Callable[[], None]:
    pragma(engine, "query_only=1")
    return lambda: pragma(engine, "query_only=0")


async def make_full_and_unreadable(engine: EmbeddedEngine) -> Callable[[], None]:
    """The log full, and the writer thread's read connection closed: after the failed append
    the bus cannot fold its state again until the connection is back."""
    await fill_the_log(engine)
    log: SqliteLog = engine.log
    on_writer(engine, lambda: log.connection().close())

    def recover() -> None:
        pragma(engine, f"max_page_count={2**31 - 2}")
        on_writer(engine, lambda: delattr(log._local, "conn"))  # the next read opens a new one

    return recover


FAULTS: dict[str, Callable[[EmbeddedEngine], Awaitable[Callable[[], None]]]] = {
    "full": make_full,
    "read-only": make_read_only,
    "full, then unreadable": make_full_and_unreadable,
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_failed_append_leaves_no_trace_and_retries_apply_once(tmp_path: Path, fault: str) -> None:
    data = tmp_path / "data"

    async def scenario() -> None:
        engine = EmbeddedEngine(settings_for(data), embedder=HashEmbedder())
        await engine.start()
        try:
            seeded = []
            for i in range(4):
                body, code = await call(engine, "store", content=f"seed {i} {PAD}", id=f"seed-{i}")
                assert code is None and body["result"] == "stored", body
                seeded.append(int(body["id"]))
            recover = await FAULTS[fault](engine)
            before = engine.bus.state.digest() if engine.bus.state is not None else None
            end_before = engine.log.end_offset()

            # One batch of writes of every kind a memo, a dedup key, a lock or an id could leak from.
            batch = {
                "c-store": ("store", {"content": f"a new note {PAD}", "id": "new-msg"}),
                "c-dup": ("store", {"content": f"seed 0 {PAD}"}),  # a duplicate: skipped, audited
                "c-lock": ("lock_memory", {"memory_id": seeded[0]}),
                "c-update": ("update_memory", {"memory_id": seeded[1], "content": f"changed {PAD}"}),
                "c-delete": ("delete_memory", {"memory_id": seeded[2]}),
            }
            answers = await asyncio.gather(
                *(call(engine, tool, command_id=cid, **args) for cid, (tool, args) in batch.items())
            )
            for body, code in answers:
                assert code == "log_unavailable", body
                assert body["ok"] is False and body["error"].startswith("log_unavailable: "), body
                assert "Traceback" not in body["error"]
            assert engine.log.end_offset() == end_before  # nothing of the batch was written

            # The decision state holds nothing the log does not (or none at all until it can fold).
            state = engine.bus.state
            if fault == "full, then unreadable":
                assert state is None  # dropped: it could not be folded again
                # A write meanwhile: refused before anything is decided, and still no state.
                body, code = await call(engine, "store", content="while unreadable", command_id="c-meanwhile")
                assert code == "log_unavailable" and "not readable" in body["error"], body
                assert engine.bus.state is None
            else:
                assert state is not None and state.digest() == before
            if state is not None:
                for cid in batch:
                    assert state.agent(AGENT).commands.get(cid) is None, cid

            recover()
            assert engine.bus.state is None or engine.bus.state.digest() == fresh_digest(engine)
            # No phantom dedup key: another command with the failed store's msg id is stored.
            body, code = await call(engine, "store", content=f"another text {PAD}", id="new-msg", command_id="c-other")
            assert code is None and body["result"] == "stored", body
            other_id = int(body["id"])
            # Each failed command, retried under its command id, is applied once...
            retried = {cid: await call(engine, tool, command_id=cid, **args) for cid, (tool, args) in batch.items()}
            for cid, (body, code) in retried.items():
                assert code is None, (cid, body)
            assert retried["c-store"][0]["result"] == "skipped"  # by msg id, behind c-other: W1
            assert retried["c-store"][0]["id"] == other_id
            assert retried["c-dup"][0]["result"] == "skipped" and retried["c-dup"][0]["id"] == seeded[0]
            # ...and a second retry gets the first answer and appends nothing.
            end = engine.log.end_offset()
            for cid, (tool, args) in batch.items():
                again, code = await call(engine, tool, command_id=cid, **args)
                assert code is None and again == retried[cid][0], cid
            assert engine.log.end_offset() == end
            # The lock landed once and holds: the update of the locked memory is refused.
            body, code = await call(engine, "update_memory", memory_id=seeded[0], content="blocked")
            assert code is not None, body

            events = events_of(engine)
            assert [o for o, _ in events] == list(range(len(events)))  # dense offsets: no phantom offset
            by_command: dict[str, int] = {}
            for _, ev in events:
                by_command[ev["command_id"]] = by_command.get(ev["command_id"], 0) + 1
            assert by_command.get("c-lock") == 1 and by_command.get("c-update") == 1
            assert by_command.get("c-delete") == 1 and by_command.get("c-other") == 1
            assert "c-store" not in by_command and "c-dup" not in by_command  # skipped: audited only
            # Ids come from the log's counters: the agent's stored ids are consecutive in its
            # partition (a phantom store would have left a gap).
            ids = sorted(ev["payload"]["id"] for _, ev in events if ev["type"] == "memory.stored")
            step = engine.log.num_partitions
            assert ids == list(range(ids[0], ids[0] + step * len(ids), step))
            assert engine.bus.state is not None and engine.bus.state.digest() == fresh_digest(engine)
        finally:
            await engine.close()

    asyncio.run(scenario())
    report = rebuild_all(settings_for(data), save=False)
    assert report["equal"], {k: v for k, v in report["projections"].items() if not v["equal"]}
