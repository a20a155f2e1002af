"""Fault injection (issue 6, item 3): damaged checkpoints, kills while checkpointing and while
rebuilding, and a full disk. The log is the truth: whatever happens to a checkpoint, the state
served after a restart digests equal to a replay of the log, and no acknowledged write is lost.

Trials: a few per fault in CI; MEMSTREAM_LONG_TESTS=1 runs ten times as many.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.rebuild import rebuild_all
from memstream.api.services.settings import Settings, load_settings
from memstream.api.tools.dispatch import run_tool
from memstream.api.tools.registry import Caller
from memstream.streams import snapshots as snapshots_module
from memstream.streams.events import decode
from memstream.streams.log.sqlite import SqliteLog
from tests.support.embedders import HashEmbedder
from tests.support.servers import ServerThread, log_end

PROCS = Path(__file__).parents[1] / "procs"
pytestmark = pytest.mark.slow  # trials that take tens of seconds (more with MEMSTREAM_LONG_TESTS=1)
LONG = bool(os.environ.get("MEMSTREAM_LONG_TESTS"))
KILL_TRIALS = 50 if LONG else 5
CALLER = Caller(client_id="faults")


def data_settings(data: Path, **over: Any) -> Settings:
    return load_settings(env={}, data_dir=data, sync="NORMAL", **over)


async def fill(data: Path, n: int = 1_500) -> None:
    """A log with memories (vectors included), an episode, a profile, declarations, standings,
    a lock, an update and a delete; closed cleanly, so every checkpoint is on disk."""
    engine = EmbeddedEngine(data_settings(data), embedder=HashEmbedder())
    await engine.start()
    try:
        answers = await asyncio.gather(
            *(
                run_tool(engine, CALLER, "store", {"agent_id": f"a{i % 4}", "content": f"note {i} on topic {i % 23}"})
                for i in range(n)
            )
        )
        ids = [body["id"] for body, _ in answers]
        for name, args in [
            ("archive_episode", {"agent_id": "a0", "summary": "an episode about topic 3"}),
            ("update_profile", {"agent_id": "a1", "profile": "prefers short answers"}),
            ("declare_associations", {"agent_id": "a0", "associations": {"entities": [{"name": "Ada"}]}}),
            ("declare_standing", {"agent_id": "a0", "ref": f"mem:{ids[0]}", "standing": "noise"}),
            ("lock_memory", {"agent_id": "a0", "memory_id": ids[4]}),
            ("update_memory", {"agent_id": "a1", "memory_id": ids[1], "content": "note 1, revised"}),
            ("delete_memory", {"agent_id": "a2", "memory_id": ids[2]}),
        ]:
            body, code = await run_tool(engine, CALLER, name, args)
            assert code is None, (name, body)
    finally:
        await engine.close()


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("filled") / "data"
    asyncio.run(fill(data))
    return data


def copy_of(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def assert_live_equals_replay(data: Path) -> dict[str, Any]:
    """What a start would serve (checkpoints + tail) digests equal to a replay from offset 0."""
    report = rebuild_all(data_settings(data), save=False)
    unequal = {k: v for k, v in report["projections"].items() if not v["equal"]}
    assert report["equal"], f"live state differs from the log's replay: {unequal}"
    return report


async def serve_answers(data: Path, **over: Any) -> dict[str, Any]:
    """Start an engine on the data dir and ask it something from every read model."""
    engine = EmbeddedEngine(data_settings(data, **over), embedder=HashEmbedder())
    await engine.start()
    try:
        out = {}
        for name, args in [
            ("recall", {"agent_id": "a0", "query": "topic 3"}),
            ("list_memories", {"agent_id": "a1", "limit": 5}),
            ("get_profile", {"agent_id": "a1"}),
            ("check_health", {}),
        ]:
            body, code = await run_tool(engine, CALLER, name, args)
            assert code is None, (name, body)
            out[name] = body
        out["digests"] = engine.runner.digests()
        return out
    finally:
        await engine.close()


# -- damaged checkpoints ------------------------------------------------------------------------


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    at = len(raw) * 2 // 3
    raw[at] ^= 0x5A
    path.write_bytes(bytes(raw))


def _garbage(path: Path) -> None:
    path.write_bytes(random.Random(1).randbytes(path.stat().st_size))


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _unusable_body(path: Path) -> None:
    """A snapshot that passes its checksum but holds nothing this version can load."""
    store = snapshots_module.SnapshotStore(path.parent)
    store.save(path.name[: -len(".snap")], {"offset": 7, "state": {"from": "another version"}})


def _delete(path: Path) -> None:
    path.unlink()


def _vector_blob(snapshots: Path, graphs: bool = False) -> Path:
    suffix = ".hnsw.blob" if graphs else ".blob"
    [blob] = [
        p for p in snapshots.glob("vectors-*.blob") if p.name.endswith(suffix) and (graphs or ".hnsw" not in p.name)
    ]
    return blob


DAMAGE: list[tuple[str, Callable[[Path], Path], Callable[[Path], None]]] = [
    ("memories json truncated", lambda s: s / "memories.snap", _truncate),
    ("lexical json bit flip", lambda s: s / "lexical.snap", _flip),
    ("history json garbage", lambda s: s / "history.snap", _garbage),
    ("decision json empty", lambda s: s / "decision.snap", _empty),
    ("decision json truncated", lambda s: s / "decision.snap", _truncate),
    ("versions json from another version", lambda s: s / "versions.snap", _unusable_body),
    ("vectors json bit flip", lambda s: s / "vectors.snap", _flip),
    ("vector sidecar truncated", lambda s: _vector_blob(s), _truncate),
    ("vector sidecar bit flip", lambda s: _vector_blob(s), _flip),
    ("vector sidecar garbage", lambda s: _vector_blob(s), _garbage),
    ("vector sidecar missing", lambda s: _vector_blob(s), _delete),
    ("vector graph sidecar bit flip", lambda s: _vector_blob(s, graphs=True), _flip),
]


# Vector graphs are read only by a server whose recall reaches past the window.
SERVED_WITH = {"vector graph sidecar bit flip": {"vector_reach": 50_000}}


@pytest.mark.parametrize(("what", "target", "damage"), DAMAGE, ids=[d[0] for d in DAMAGE])
def test_damaged_checkpoint_is_detected_and_rebuilt_from_the_log(
    filled: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, what: str, target: Any, damage: Any
) -> None:
    over = SERVED_WITH.get(what, {})
    clean = asyncio.run(serve_answers(copy_of(filled, tmp_path / "clean"), **over))
    data = copy_of(filled, tmp_path / "data")
    damage(target(data / "snapshots"))
    caplog.set_level(logging.WARNING)
    damaged = asyncio.run(serve_answers(data, **over))
    # Detected: a warning names the damaged checkpoint (the fold was rebuilt from the log).
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(w for w in warned if "rebuil" in w or "damaged" in w or "unusable" in w), (what, warned)
    # Rebuilt: the same state and the same answers as from sound checkpoints.
    assert damaged["digests"] == clean["digests"], what
    for name in ("recall", "list_memories", "get_profile"):
        assert damaged[name] == clean[name], (what, name)
    assert_live_equals_replay(data)


# -- SIGKILL while checkpointing ----------------------------------------------------------------


def read_acked(lines: list[str]) -> dict[str, int]:
    acked = {}
    for line in lines:
        if line.startswith("{"):
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # the last line may be cut by the kill
            if row["answer"].get("result") == "stored":
                acked[row["msg"]] = row["answer"]["id"]
    return acked


def stored_in_log(data: Path) -> dict[str, list[int]]:
    log = SqliteLog(data / "log.sqlite3")
    try:
        assert log.connection().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        out: dict[str, list[int]] = {}
        for rec in log.read(0, limit=10**9, vectors=False, types=("memory.stored",)):
            p = decode(rec.value)["payload"]
            out.setdefault(p.get("msg_id"), []).append(p["id"])
        return out
    finally:
        log.close()


def test_sigkill_while_checkpointing_loses_nothing_and_restarts_equal(filled: Path, tmp_path: Path) -> None:
    data = copy_of(filled, tmp_path / "data")
    rng = random.Random(61)
    acked: dict[str, int] = {}
    for trial in range(KILL_TRIALS):
        proc = subprocess.Popen(
            [sys.executable, str(PROCS / "checkpoint_loop.py"), str(data), f"t{trial}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 1.5))  # the kill's moment, at random: the thing under test
        proc.send_signal(signal.SIGKILL)
        rest = proc.stdout.read()
        proc.wait(timeout=30)
        acked.update(read_acked(rest.splitlines()))
        landed = stored_in_log(data)
        lost = [m for m in acked if m not in landed]
        assert not lost, f"trial {trial}: acknowledged but missing: {lost[:5]}"
        doubled = [m for m, ids in landed.items() if m is not None and len(ids) > 1]
        assert not doubled, f"trial {trial}: stored twice: {doubled[:5]}"
        assert all(landed[m] == [i] for m, i in acked.items())
        report = assert_live_equals_replay(data)
        assert report["events"] > 0
    assert acked, "the checkpointing process acknowledged nothing"
    asyncio.run(serve_answers(data))
    landed = stored_in_log(data)
    present = sum(1 for m in acked if m in landed)
    print(f"checkpoint kills: {KILL_TRIALS} trials, acknowledged {len(acked)}, present {present}")


# -- SIGKILL while rebuilding -------------------------------------------------------------------


def rebuild_cmd(data: Path) -> list[str]:
    code = "import sys; from memstream.api.cli.commands import main; sys.exit(main())"
    return [sys.executable, "-c", code, "rebuild", "--data-dir", str(data)]


def test_sigkill_during_rebuild_leaves_a_startable_store(filled: Path, tmp_path: Path) -> None:
    data = copy_of(filled, tmp_path / "data")
    # How long one rebuild takes here, to spread the kills over it.
    started = time.monotonic()
    done = subprocess.run(rebuild_cmd(data), capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    full = time.monotonic() - started
    rng = random.Random(62)
    events_before = stored_in_log(data)
    for _ in range(KILL_TRIALS):
        proc = subprocess.Popen(rebuild_cmd(data), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.1, full))  # the kill's moment, spread over a rebuild: the thing under test
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert_live_equals_replay(data)
    assert stored_in_log(data) == events_before
    asyncio.run(serve_answers(data))
    print(f"rebuild kills: {KILL_TRIALS} trials over a {full:.2f} s rebuild, live == replay after each")
    again = subprocess.run(rebuild_cmd(data), capture_output=True, timeout=300)
    assert again.returncode == 0, again.stderr.decode()[-2000:]


# -- a full disk ----------------------------------------------------------------------------------


def set_max_pages(engine: EmbeddedEngine, pages: int | None) -> None:
    """Cap the log's size on the writer's own connection (SQLite then fails appends with
    SQLITE_FULL, "database or disk is full": what a full disk gives), or lift the cap."""
    conn = engine.bus._conn
    assert conn is not None
    if pages is None:
        pages = 2**31 - 2
    engine.bus._executor.submit(conn.execute, f"PRAGMA max_page_count={int(pages)}").result()


def test_full_disk_fails_writes_cleanly_and_recovers(tmp_path: Path) -> None:
    settings = data_settings(tmp_path / "data")
    acked: dict[str, int] = {}
    refused: list[dict[str, Any]] = []
    with ServerThread(settings) as srv, httpx.Client(base_url=srv.url, timeout=30) as http:
        engine: EmbeddedEngine = srv.app.state.engine

        def store(i: int, **extra: Any) -> httpx.Response:
            body = {"agent_id": f"d{i % 3}", "content": f"disk note {i} " + "pad " * 200, "id": f"m{i}", **extra}
            return http.post("/v1/tools/store", json=body)

        for i in range(50):
            r = store(i)
            assert r.status_code == 200
            acked[f"m{i}"] = r.json()["id"]
        pages = engine.log.connection().execute("PRAGMA page_count").fetchone()[0]
        set_max_pages(engine, pages)
        events_full, _ = log_end(srv)
        for i in range(50, 120):
            r = store(i, command_id=f"c{i}")
            if r.status_code == 200:  # still room in the last page
                acked[f"m{i}"] = r.json()["id"]
                continue
            assert r.status_code == 503, r.text
            body = r.json()
            assert body["ok"] is False and "full" in body["error"], body
            assert "Traceback" not in r.text
            refused.append({"i": i, "body": body})
        assert len(refused) >= 60, "the cap did not bite"
        # Reads go on while the disk is full.
        r = http.post("/v1/tools/list_memories", json={"agent_id": "d0", "limit": 5})
        assert r.status_code == 200 and len(r.json()["memories"]) == 5, r.text
        assert http.get("/health").status_code == 200
        assert log_end(srv)[0] <= events_full + (len(acked) - 50) * 2
        # Space comes back: the refused commands, retried under their ids, land once.
        set_max_pages(engine, None)
        for row in refused:
            i = row["i"]
            r = store(i, command_id=f"c{i}")
            assert r.status_code == 200 and r.json()["result"] == "stored", r.text
            acked[f"m{i}"] = r.json()["id"]
        again = store(refused[0]["i"], command_id=f"c{refused[0]['i']}")
        assert again.json()["id"] == acked[f"m{refused[0]['i']}"]
        data = settings.data_dir
    landed = stored_in_log(data)
    assert {m: [i] for m, i in acked.items()} == landed
    assert_live_equals_replay(data)
    print(f"full disk: {len(refused)} writes refused (503), acknowledged {len(acked)}, present {len(landed)}")


def test_full_disk_while_checkpointing_keeps_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """ENOSPC from the snapshot writer (read models and decision state): writes and reads go
    on, no temporary file is left behind, and the checkpoints are whole once space returns."""
    settings = data_settings(tmp_path / "data", snapshot_every=5)
    real_fsync = os.fsync
    full = {"on": False}

    def fsync(fd: int) -> None:
        if full["on"]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(snapshots_module.os, "fsync", fsync)
    caplog.set_level(logging.WARNING)

    async def scenario() -> None:
        engine = EmbeddedEngine(settings, embedder=HashEmbedder())
        await engine.start()
        try:
            full["on"] = True
            for i in range(40):
                body, code = await run_tool(engine, CALLER, "store", {"agent_id": "s", "content": f"snap {i}"})
                assert code is None, body
                body, code = await run_tool(engine, CALLER, "recall", {"agent_id": "s", "query": f"snap {i}"})
                assert code is None, body
            await engine.checkpoints_written()  # written beside the reads and the writer: done (failed)
            assert not list(settings.snapshot_dir.glob(".*.tmp")), "a failed checkpoint left a temporary file"
            full["on"] = False
        finally:
            await engine.close()

    asyncio.run(scenario())
    assert any("ENOSPC" in r.getMessage() or "No space" in r.getMessage() for r in caplog.records)
    assert_live_equals_replay(settings.data_dir)
    assert sum(len(ids) for ids in stored_in_log(settings.data_dir).values()) == 40
