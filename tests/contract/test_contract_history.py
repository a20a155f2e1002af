"""History, replay and audit contracts H1, H2, H4, through both faces and the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.rebuild import rebuild_all
from memstream.api.services.settings import Settings
from tests.support.calls import call
from tests.support.embedders import HashEmbedder
from tests.support.servers import free_port


async def test_h1_history_lists_every_event_oldest_first_and_survives_delete(face: Any) -> None:
    m = await face.call("store", {"agent_id": "h", "content": "first text", "id": "h1"})
    ref = f"mem:{m['id']}"
    await face.call("lock_memory", {"agent_id": "h", "memory_id": m["id"]})
    await face.call("unlock_memory", {"agent_id": "h", "memory_id": m["id"]})
    await face.call("update_memory", {"agent_id": "h", "memory_id": m["id"], "content": "second text"})
    await face.call("delete_memory", {"agent_id": "h", "memory_id": m["id"]})
    hist = await face.call("history", {"ref": ref})
    types = [e["type"] for e in hist["events"]]
    assert types == ["memory.stored", "memory.locked", "memory.unlocked", "memory.updated", "memory.deleted"]
    offsets = [e["offset"] for e in hist["events"]]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    for e in hist["events"]:
        assert e["actor"]["client_id"] == "tester" and e["actor"]["agent_id"] == "h"
        assert e["at"] and e["command_id"] and e["event_id"]
    assert hist["events"][0]["change"]["content"] == "first text"
    assert hist["events"][3]["change"]["content"] == "second text"
    # The memory is gone from reads but its history stays.
    got = await face.call("get_contents", {"agent_id": "h", "refs": [ref]})
    assert got["missing"] == [ref]
    # Owner check: another agent sees no history of it.
    assert (await face.call("history", {"ref": ref, "agent_id": "someone-else"}))["ok"] is False


async def test_h1_agent_history_and_bulk_delete_are_recorded(face: Any) -> None:
    a = await face.call("store", {"agent_id": "hb", "content": "one"})
    await face.call("store", {"agent_id": "hb", "content": "two"})
    await face.call("delete_agent_data", {"agent_id": "hb"})
    hist = await face.call("history", {"ref": f"mem:{a['id']}"})
    assert [e["type"] for e in hist["events"]] == ["memory.stored", "agent_data.deleted"]
    agent_hist = await face.call("history", {"agent_id": "hb"})
    assert [e["type"] for e in agent_hist["events"]] == ["memory.stored", "memory.stored", "agent_data.deleted"]


async def test_h4_every_refused_command_is_audited(face: Any) -> None:
    m = await face.call("store", {"agent_id": "au", "content": "locked fact", "lock": True})
    await face.call("update_memory", {"agent_id": "au", "memory_id": m["id"], "content": "nope"})
    await face.call("delete_memory", {"agent_id": "au", "memory_id": 987654})
    await face.call("store", {"agent_id": "au", "content": 42})
    await face.call("store", {"agent_id": "au", "content": "x", "timestamp": "not-a-time"})
    audit = await face.call("audit_log", {"agent_id": "au"})
    whats = [(r["tool"], r["who"]["client_id"]) for r in audit["records"]]
    assert ("update_memory", "tester") in whats
    assert ("delete_memory", "tester") in whats
    assert sum(1 for t, _ in whats if t == "store") == 2
    for r in audit["records"]:
        assert r["kind"] == "refused" and r["why"] and r["at"]
    locked = next(r for r in audit["records"] if r["tool"] == "update_memory")
    assert "locked" in locked["why"]


async def _workload(engine: EmbeddedEngine) -> None:
    ids = []
    for i in range(40):
        r = await call(engine, "store", agent_id=f"ag{i % 3}", content=f"memory number {i}", id=f"m{i % 30}")
        if r["result"] == "stored":
            ids.append((f"ag{i % 3}", r["id"]))
    for agent, mid in ids[:10]:
        await call(engine, "update_memory", agent_id=agent, memory_id=mid, content=f"edited {mid}")
    for agent, mid in ids[10:15]:
        await call(engine, "lock_memory", agent_id=agent, memory_id=mid)
    for agent, mid in ids[15:20]:
        await call(engine, "delete_memory", agent_id=agent, memory_id=mid)
    await call(engine, "archive_episode", agent_id="ag1", summary="an episode", keywords="k")
    await call(engine, "update_profile", agent_id="ag2", profile="profile text")
    await call(engine, "set_recall_precision", agent_id="ag0", precision="lenient")
    await call(engine, "delete_agent_data", agent_id="ag2")


async def test_h2_rebuild_equals_live_and_calls_no_model(settings: Settings) -> None:
    embedder = HashEmbedder()
    engine = EmbeddedEngine(settings, embedder=embedder)
    await engine.start()
    await _workload(engine)
    live = await engine.read(engine.runner.digests)
    live["decision"] = engine.bus.state.digest()  # type: ignore[union-attr]
    calls = embedder.calls
    await engine.close()

    report = rebuild_all(settings)
    assert report["equal"], report
    assert {k: v["rebuilt"] for k, v in report["projections"].items()} == live
    assert embedder.calls == calls

    # The snapshots are only a shortcut: remove them all, restart, same state.
    for snap in settings.snapshot_dir.glob("*.snap"):
        snap.unlink()
    again = EmbeddedEngine(settings, embedder=HashEmbedder())
    await again.start()
    digests = await again.read(again.runner.digests)
    digests["decision"] = again.bus.state.digest()  # type: ignore[union-attr]
    await again.close()
    assert digests == live


async def test_h2_cli_rebuild_reports_equal_digests_without_an_embedder(settings: Settings) -> None:
    engine = EmbeddedEngine(settings, embedder=HashEmbedder())
    await engine.start()
    await _workload(engine)
    await engine.close()
    env = {
        **os.environ,
        "MEMSTREAM_DATA_DIR": str(settings.data_dir),
        # Any attempt to embed would fail: nothing listens there.
        "MEMSTREAM_EMBEDDING_URL": f"http://127.0.0.1:{free_port()}/embed",
    }
    out = subprocess.run(
        [sys.executable, "-m", "memstream.api.cli", "rebuild"], env=env, capture_output=True, timeout=120
    )
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    report = orjson.loads(out.stdout)  # the progress bar went to stderr: stdout is the report alone
    assert report["equal"] is True and report["events"] > 0
    assert set(report["projections"]) == {
        "memories", "episodes", "profiles", "history", "precision", "vectors", "lexical", "associations",
        "standings", "versions", "decision",
    }  # fmt: skip


def test_cli_history_and_tail(settings: Settings, tmp_path: Path) -> None:
    import asyncio

    async def seed() -> int:
        engine = EmbeddedEngine(settings, embedder=HashEmbedder())
        await engine.start()
        r = await call(engine, "store", agent_id="cli", content="cli memory")
        await call(engine, "update_memory", agent_id="cli", memory_id=r["id"], content="cli memory v2")
        await engine.close()
        return int(r["id"])

    mid = asyncio.run(seed())
    env = {**os.environ, "MEMSTREAM_DATA_DIR": str(settings.data_dir)}
    hist = subprocess.run(
        [sys.executable, "-m", "memstream.api.cli", "history", f"mem:{mid}"], env=env, capture_output=True, timeout=60
    )
    assert hist.returncode == 0, hist.stderr.decode()
    lines = [orjson.loads(x) for x in hist.stdout.splitlines()]
    assert [x["type"] for x in lines] == ["memory.stored", "memory.updated"]
    tail = subprocess.run(
        [sys.executable, "-m", "memstream.api.cli", "tail", "--from", "0"], env=env, capture_output=True, timeout=60
    )
    assert tail.returncode == 0 and len(tail.stdout.splitlines()) == 2


async def test_h4_refusals_with_unpaired_surrogates_are_audited(engine: EmbeddedEngine) -> None:
    for args in (
        {"agent_id": "sur", "content": "half a pair: \udfff"},
        {"agent_id": "sur", "content": "fine", "channel": "\ud800"},
    ):
        body = await call(engine, "store", **args)
        assert body["ok"] is False and "UTF-8" in body["reason"]
    audit = await call(engine, "audit_log", agent_id="sur")
    assert audit["count"] == 2
    assert engine.log.end_offset() == 0


async def test_unusable_checkpoints_are_rebuilt_from_the_log(settings: Settings) -> None:
    engine = EmbeddedEngine(settings, embedder=HashEmbedder())
    await engine.start()
    await _workload(engine)
    live = await engine.read(engine.runner.digests)
    await engine.close()
    # One checkpoint torn, one from an "incompatible version" (it passes the checksum).
    torn = settings.snapshot_dir / "memories.snap"
    torn.write_bytes(torn.read_bytes()[:-100])
    from memstream.streams.snapshots import SnapshotStore

    SnapshotStore(settings.snapshot_dir).save("lexical", {"offset": 10**9, "state": {"version": -1}})
    again = EmbeddedEngine(settings, embedder=HashEmbedder())
    await again.start()
    try:
        assert await again.read(again.runner.digests) == live
    finally:
        await again.close()
