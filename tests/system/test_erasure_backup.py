"""Backups, restores and erasures (issue 16): a backup taken after an erasure holds nothing of
it; restoring an older backup applies the erasures recorded since (the erasure ledger of the
data directory, or MEMSTREAM_ERASURE_LEDGER outside it), so an erased record never returns."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from memstream.api.services.backup import backup_log, restore_log
from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import Settings, load_settings
from tests.support.calls import call
from tests.support.embedders import HashEmbedder
from tests.system.test_erasure import OTHER, SECRET, hits, rebuild_equal, secret_needles, store


async def erase_after_backup(settings: Settings, backup: Path) -> tuple[int, int]:
    """Store the secret, another memory and a profile; back up; erase the secret and the
    profile's agent-wide data of another agent; return the ids."""
    eng = EmbeddedEngine(settings, embedder=HashEmbedder())
    await eng.start()
    try:
        secret = await store(eng, "alice", SECRET, lock=True)
        other = await store(eng, "alice", OTHER)
        await call(eng, "update_profile", agent_id="bob", profile="Bob Quillbottom lives on Elm Street")
        await store(eng, "bob", "bob's note about Zebulon's nougat")
        backup_log(settings, backup)
        assert (await call(eng, "erase_memory", agent_id="alice", memory_id=secret, reason="request"))["ok"]
        assert (await call(eng, "erase_agent_data", agent_id="bob", reason="account closed"))["ok"]
    finally:
        await eng.close()
    return secret, other


async def assert_erased(settings: Settings) -> None:
    needles = [*secret_needles(SECRET), b"Quillbottom", b"Zebulon"]
    assert hits(settings.data_dir, needles) == []
    eng = EmbeddedEngine(settings, embedder=HashEmbedder())
    await eng.start()
    try:
        alice = repr(await call(eng, "list_memories", agent_id="alice"))
        assert "Zebulon" not in alice and OTHER in alice
        assert "Quillbottom" not in repr(await call(eng, "get_profile", agent_id="bob"))
        assert "Zebulon" not in repr(await call(eng, "recall", agent_id="bob", query="nougat"))
    finally:
        await eng.close()
    rebuild_equal(settings)


def move_aside(settings: Settings, where: Path) -> None:
    """What the operator does before a restore: the log and its key store go elsewhere."""
    where.mkdir()
    for path in settings.data_dir.glob("*"):
        if path.name.startswith(("log.sqlite3", "keys.db")):
            shutil.move(path, where / path.name)


async def test_a_backup_after_an_erasure_holds_nothing_of_it(settings: Settings, tmp_path: Path) -> None:
    await erase_after_backup(settings, tmp_path / "old")
    backup_log(settings, tmp_path / "new")
    assert hits(tmp_path / "new", [*secret_needles(SECRET), b"Quillbottom", b"Zebulon"]) == []
    # The old backup still holds it, readable with its own keys: what restore must undo.
    assert hits(tmp_path / "old", [SECRET.encode()]) == []  # sealed at rest
    restored = load_settings(env={}, data_dir=tmp_path / "from-new", sync="NORMAL")
    restore_log(tmp_path / "new", restored)
    await assert_erased(restored)


async def test_restoring_an_old_backup_applies_the_erasures_since(settings: Settings, tmp_path: Path) -> None:
    await erase_after_backup(settings, tmp_path / "old")
    move_aside(settings, tmp_path / "aside")
    report = restore_log(tmp_path / "old", settings)
    assert len(report["erasures_reapplied"]) == 2, report
    await assert_erased(settings)


async def test_restore_into_a_new_directory_reads_the_outside_ledger(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTREAM_ERASURE_LEDGER", str(tmp_path / "outside" / "ledger.jsonl"))
    await erase_after_backup(settings, tmp_path / "old")
    shutil.rmtree(settings.data_dir)  # the data directory is lost; the ledger outside is not
    fresh = load_settings(env={}, data_dir=tmp_path / "fresh", sync="NORMAL")
    report = restore_log(tmp_path / "old", fresh)
    assert len(report["erasures_reapplied"]) == 2, report
    await assert_erased(fresh)
    # A second restore of the same backup elsewhere re-applies them again (the ledger keeps them).
    again = load_settings(env={}, data_dir=tmp_path / "again", sync="NORMAL")
    assert len(restore_log(tmp_path / "old", again)["erasures_reapplied"]) == 2
    await assert_erased(again)
