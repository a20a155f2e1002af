"""Online backup and restore (issue 6, docs/operations.md): back up a live data directory while
writers run, restore into a fresh directory, and check that the restored log rebuilds to the
same digests as the original at the backup point and holds every write acknowledged before
the backup began."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx
import orjson
import pytest
from click.testing import CliRunner

from memstream.api.cli.commands import main
from memstream.api.services.backup import BackupError, backup_log, restore_log
from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.rebuild import rebuild_all
from memstream.api.services.settings import Settings, load_settings
from tests.support.embedders import HashEmbedder
from tests.support.servers import ServerThread


def writer(url: str, agent: str, acked: list[str], stop: threading.Event) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        i = 0
        while not stop.is_set():
            content = f"{agent} live write number {i}"
            r = client.post("/v1/tools/store", json={"agent_id": agent, "content": content})
            if r.status_code == 200 and r.json().get("result") == "stored":
                acked.append(content)  # appended only after the server acknowledged it
            i += 1


def test_online_backup_while_writing_then_restore(settings: Settings, tmp_path: Path) -> None:
    stop = threading.Event()
    acked: dict[str, list[str]] = {f"w{i}": [] for i in range(3)}
    with ServerThread(settings) as server:
        threads = [threading.Thread(target=writer, args=(server.url, a, acked[a], stop)) for a in acked]
        for t in threads:
            t.start()
        try:
            while sum(len(v) for v in acked.values()) < 60:
                threading.Event().wait(0.02)
            before = {a: list(v) for a, v in acked.items()}  # acknowledged before the backup began
            result = CliRunner().invoke(
                main,
                ["backup", "--data-dir", str(settings.data_dir), str(tmp_path / "bk")],
            )
            assert result.exit_code == 0, result.output
            # the writers kept going during and after the backup
            count_at_backup = sum(len(v) for v in acked.values())
            while sum(len(v) for v in acked.values()) < count_at_backup + 20:
                threading.Event().wait(0.02)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
    report = orjson.loads(result.stdout)
    assert report["integrity"] == "ok" and report["events"] > 0
    backup_events = report["events"]
    assert sum(len(v) for v in before.values()) <= backup_events
    assert not list((tmp_path / "bk").glob("*.partial")) and not list((tmp_path / "bk").glob("*-wal"))

    restored = load_settings(env={}, data_dir=tmp_path / "restored", sync="NORMAL")
    out = restore_log(tmp_path / "bk", restored)
    assert out["events"] == backup_events

    # The restored log rebuilds to exactly the original's state at the backup point.
    original_then = rebuild_all(settings, stop=backup_events, save=False)
    again = rebuild_all(restored, save=True)
    assert again["equal"], again
    assert again["events"] == backup_events
    for name, digests in original_then["projections"].items():
        assert again["projections"][name]["rebuilt"] == digests["rebuilt"], name

    async def contents() -> set[str]:
        eng = EmbeddedEngine(restored, embedder=HashEmbedder())
        await eng.start()
        try:
            return await eng.read(lambda: {r.content for r in eng.memories.rows.values()})
        finally:
            await eng.close()

    present = asyncio.run(contents())
    for agent, texts in before.items():
        missing = [t for t in texts if t not in present]
        assert not missing, (agent, missing[:3])
    # and the backup is a point in time: writes after it are not in it
    assert len(present) == backup_events < sum(len(v) for v in acked.values())


def test_restore_refuses_a_data_dir_with_a_log(settings: Settings, tmp_path: Path) -> None:
    async def make() -> None:
        eng = EmbeddedEngine(settings, embedder=HashEmbedder())
        await eng.start()
        await eng.close()

    asyncio.run(make())
    backup_log(settings, tmp_path / "bk")
    with pytest.raises(BackupError, match="exists already"):
        backup_log(settings, tmp_path / "bk")
    with pytest.raises(BackupError, match="already has a log"):
        restore_log(tmp_path / "bk", settings)
    with pytest.raises(BackupError, match="no backup"):
        restore_log(tmp_path / "nothing-here", settings)
