"""`memstream seal` (issue 16, migration): a data directory written before sealing is replayed into
a sealed log. Afterwards no file under it holds a record erased before the migration (text or
vector), the log holds no plaintext content at all, reads answer as before, a rebuild digests
equal, and erasures reach everything. SIGKILL at random moments leaves the old log or the new.

Kill trials: 6 by default; MEMSTREAM_SEAL_TRIALS sets another count.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.seal_migration import clean_leftovers
from memstream.api.services.settings import Settings, load_settings
from tests.support.calls import call
from tests.support.embedders import HashEmbedder
from tests.system.test_crash import Server
from tests.system.test_erasure import OTHER, SECRET, hits, rebuild_equal, secret_needles, store

AGENT = "kate"
LIVE = [OTHER, "the greenhouse thermostat reads nineteen degrees at dawn"]
AFTER = "written after sealing began: the heron nests by the sluice"
GONE_AGENT = "the canal boat is moored at Grindley Brook for lee's winter"
LOCKED = "a locked memory: the vault code rhymes with tangerine"
REFUSED = "a refused rewrite that mentions the ptarmigan"
TRIALS = int(os.environ.get("MEMSTREAM_SEAL_TRIALS") or 6)


def seal_cli(data: Path, *extra: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "memstream.api.cli", "seal", "--data-dir", str(data), *extra],
        capture_output=True,
        timeout=300,
    )


async def served(data: Path) -> list[Any]:
    """What a real server process answers over HTTP for the agent's records."""
    server = Server(data)
    try:
        await server.ready()
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            listed = (await http.post("/v1/tools/list_memories", json={"agent_id": AGENT, "limit": 1000})).json()
            recalled = (await http.post("/v1/tools/recall", json={"agent_id": AGENT, "query": "vault code"})).json()
    finally:
        server.stop()
    return [sorted(orjson.dumps(m, option=orjson.OPT_SORT_KEYS) for m in listed["memories"]), recalled["messages"]]


def meta(data: Path) -> dict[str, str]:
    conn = sqlite3.connect(data / "log.sqlite3")
    try:
        return dict(conn.execute("SELECT key, value FROM meta").fetchall())
    finally:
        conn.close()


async def reads(settings: Settings) -> dict[str, Any]:
    """What a server answers for the live records: lists, contents, recall."""
    eng = EmbeddedEngine(settings, embedder=HashEmbedder())
    await eng.start()
    try:
        listed = await call(eng, "list_memories", agent_id=AGENT, limit=1000)
        ids = sorted(m["id"] for m in listed["memories"])
        contents = await call(eng, "get_contents", agent_id=AGENT, ids=ids)
        recalled = await call(eng, "recall", agent_id=AGENT, query="greenhouse thermostat")
        return {
            "ids": ids,
            "contents": sorted(orjson.dumps(m, option=orjson.OPT_SORT_KEYS) for m in listed["memories"]),
            "get_contents": orjson.dumps(contents, option=orjson.OPT_SORT_KEYS),
            "recall": [r.get("content") for r in recalled["messages"]],
        }
    finally:
        await eng.close()


async def plaintext_dir(settings: Settings, monkeypatch: pytest.MonkeyPatch, extra: int = 0) -> list[str]:
    """A data directory as written before sealing, then one erasure and one store under sealing.
    Returns the erasure's `unreachable`."""
    monkeypatch.setenv("MEMSTREAM_SEALING", "off")
    eng = EmbeddedEngine(settings, embedder=HashEmbedder())
    await eng.start()
    try:
        secret = await store(eng, AGENT, SECRET)
        for text in LIVE:
            await store(eng, AGENT, text)
        locked = await store(eng, AGENT, LOCKED, lock=True)
        for i in range(extra):
            await store(eng, f"bulk-{i % 5}", f"bulk memory {i} mentions the lighthouse keeper's ledger")
        await call(eng, "update_profile", agent_id=AGENT, content="kate keeps bees on the allotment")
        await store(eng, "lee", GONE_AGENT)  # all of lee's data is erased before the migration
        # A refused update: the audit trail keeps a copy of the request, content included.
        refused = await call(eng, "update_memory", agent_id=AGENT, memory_id=locked, content=REFUSED)
        assert refused["ok"] is False and "locked" in refused["error"], refused
    finally:
        await eng.close()
    monkeypatch.delenv("MEMSTREAM_SEALING")
    eng = EmbeddedEngine(settings, embedder=HashEmbedder())
    await eng.start()
    try:
        out = await call(eng, "erase_memory", agent_id=AGENT, memory_id=secret, reason="request")
        assert out["ok"] is True, out
        await store(eng, AGENT, AFTER)
        gone = await call(eng, "erase_agent_data", agent_id="lee", reason="request")
        assert gone["ok"] is True and gone["unreachable"], gone
        return list(out["unreachable"])
    finally:
        await eng.close()


def in_log(data: Path, needles: list[bytes]) -> list[int]:
    """Which needles the log file (with its WAL) holds."""
    raw = b"".join(p.read_bytes() for p in data.iterdir() if p.name.startswith("log.sqlite3"))
    return [i for i, n in enumerate(needles) if n in raw]


def log_needles() -> list[bytes]:
    return [t.encode() for t in [*LIVE, AFTER, LOCKED, REFUSED, "kate keeps bees"]]


async def test_seal_migrates_a_plaintext_data_dir(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    data = settings.data_dir
    unreachable = await plaintext_dir(settings, monkeypatch)
    end = int(meta(data)["sealed_from"])
    assert unreachable == [f"log offsets 0..{end - 1} hold plaintext written before sealing; run memstream seal"]
    assert in_log(data, [SECRET.encode(), GONE_AGENT.encode()]) == [0, 1]  # erased, still in the old log
    assert in_log(data, log_needles()[:2]) != [] and in_log(data, [REFUSED.encode()]) != []
    before = await reads(settings)
    before_http = await served(data)
    assert LOCKED in repr(before_http[1]) and len(before_http[0]) == 4
    assert LIVE[1] in before["recall"] and len(before["ids"]) == 4 and SECRET not in repr(before)

    done = seal_cli(data, "--progress")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    report = orjson.loads(done.stdout)
    assert report["sealed"] is True and report["digests_equal"] is True and report["erased_keys_destroyed"] >= 1
    assert report["plaintext_offsets"] == f"0..{end - 1}" and report["audit_records"] >= 1
    assert "records/s" in done.stderr.decode()  # the progress bar, on stderr

    assert hits(data, secret_needles(SECRET)) == []  # no file: log, checkpoints, keys, ledger
    assert hits(data, secret_needles(GONE_AGENT)) == []  # erase_agent_data before the migration
    assert in_log(data, log_needles()) == []  # the log holds no plaintext content
    assert sorted(p.name for p in data.iterdir() if "log.sqlite3" in p.name) == ["log.sqlite3"]
    assert meta(data)["sealed_from"] == "0"
    assert await reads(settings) == before
    assert await served(data) == before_http  # a real server on the sealed directory answers as before
    rebuild_equal(settings)

    eng = EmbeddedEngine(settings, embedder=HashEmbedder())
    await eng.start()
    try:
        listed = await call(eng, "list_memories", agent_id=AGENT)
        old = next(m["id"] for m in listed["memories"] if m["content"] == LIVE[0])
        out = await call(eng, "erase_memory", agent_id=AGENT, memory_id=old, reason="request")
        assert out["ok"] is True and out["unreachable"] == []
    finally:
        await eng.close()
    assert hits(data, [LIVE[0].encode()]) == []
    rebuild_equal(settings)

    again = seal_cli(data)
    assert again.returncode == 0 and orjson.loads(again.stdout)["already_sealed"] is True


async def test_seal_refuses_while_a_server_holds_the_log(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = settings.data_dir
    await plaintext_dir(settings, monkeypatch)
    server = Server(data)
    try:
        await server.ready()
        refused = seal_cli(data)
    finally:
        server.stop()
    assert refused.returncode != 0
    assert "another process has" in refused.stderr.decode() and "stop it" in refused.stderr.decode()
    assert int(meta(data)["sealed_from"]) > 0  # untouched
    assert not (data / "log.sqlite3.sealing").exists()
    assert in_log(data, [LIVE[0].encode()]) != []


def killed_at(data: Path, after_s: float) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "memstream.api.cli", "seal", "--data-dir", str(data), "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        proc.wait(timeout=after_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.mark.slow
async def test_sigkill_during_seal_leaves_the_old_log_or_the_new(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    await plaintext_dir(settings, monkeypatch, extra=400)
    pristine = tmp_path / "pristine"
    shutil.copytree(settings.data_dir, pristine)
    before = await reads(settings)
    started = time.perf_counter()
    assert seal_cli(settings.data_dir).returncode == 0
    full_s = time.perf_counter() - started
    rng = random.Random(int(os.environ.get("MEMSTREAM_CRASH_SEED") or 16))
    outcomes = []
    for trial in range(TRIALS):
        data = tmp_path / f"t{trial}"
        shutil.copytree(pristine, data)
        # Half the kills anywhere in the run, half in its last fifth (verification, swap, scrub).
        killed_at(data, rng.uniform(0.3, 1.0) * full_s if trial % 2 else rng.uniform(0.8, 1.02) * full_s)
        trial_settings = load_settings(env={}, data_dir=data, sync="NORMAL")
        sealed = meta(data)["sealed_from"] == "0"
        outcomes.append("new" if sealed else "old")
        if not sealed:  # the old log, whole: its plaintext still there, nothing lost
            assert in_log(data, [LIVE[0].encode()]) != []
        assert await reads(trial_settings) == before, f"trial {trial}: reads differ after the kill"
        rerun = seal_cli(data)
        assert rerun.returncode == 0, rerun.stderr.decode()[-3000:]
        assert not [p.name for p in data.iterdir() if p.name.startswith("log.sqlite3.")]
        assert hits(data, secret_needles(SECRET)) == []
        assert in_log(data, log_needles()) == []
        assert await reads(trial_settings) == before
        rebuild_equal(trial_settings)
    print(f"full migration {full_s:.2f} s; after the kill: {outcomes}")


def test_leftovers_of_a_killed_run_are_cleaned_without_touching_the_log(tmp_path: Path) -> None:
    log = tmp_path / "log.sqlite3"
    log.write_bytes(b"the live log's bytes")
    # Killed between the second name and the swap: the retired name is the live log itself.
    os.link(log, tmp_path / "log.sqlite3.retired")
    (tmp_path / "log.sqlite3.sealing").write_bytes(b"partial")
    (tmp_path / "log.sqlite3.sealing-wal").write_bytes(b"partial wal")
    assert sorted(clean_leftovers(log)) == ["log.sqlite3.retired", "log.sqlite3.sealing", "log.sqlite3.sealing-wal"]
    assert log.read_bytes() == b"the live log's bytes"
    # Killed after the swap: the retired file is the old log, scrubbed before it is deleted.
    old = tmp_path / "old-inode"
    old.write_bytes(b"old plaintext")
    os.link(old, tmp_path / "log.sqlite3.retired")
    assert clean_leftovers(log) == ["log.sqlite3.retired"]
    assert old.read_bytes() == bytes(len(b"old plaintext"))  # the same inode, zeroed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.sqlite3", "old-inode"]


def test_seal_of_a_missing_log_is_refused(tmp_path: Path) -> None:
    out = seal_cli(tmp_path / "nothing-here")
    assert out.returncode != 0 and "no log at" in out.stderr.decode()




async def test_seal_of_a_log_never_opened_with_sealing(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """No meta.sealed_from, no keys.db: every event is plaintext, and the key store is made."""
    monkeypatch.setenv("MEMSTREAM_SEALING", "off")
    eng = EmbeddedEngine(settings, embedder=HashEmbedder())
    await eng.start()
    try:
        for text in LIVE:
            await store(eng, AGENT, text)
    finally:
        await eng.close()
    monkeypatch.delenv("MEMSTREAM_SEALING")
    data = settings.data_dir
    assert "sealed_from" not in meta(data) and not (data / "keys.db").exists()
    done = seal_cli(data, "--no-progress")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert orjson.loads(done.stdout)["records_sealed"] == len(LIVE)
    assert meta(data)["sealed_from"] == "0" and (data / "keys.db").exists()
    assert in_log(data, log_needles()) == []
    eng = EmbeddedEngine(settings, embedder=HashEmbedder())
    await eng.start()
    try:
        listed = await call(eng, "list_memories", agent_id=AGENT)
        assert sorted(m["content"] for m in listed["memories"]) == sorted(LIVE)
        out = await call(eng, "erase_memory", agent_id=AGENT, memory_id=listed["memories"][0]["id"], reason="r")
        assert out["ok"] is True and out["unreachable"] == []
    finally:
        await eng.close()
    rebuild_equal(settings)
