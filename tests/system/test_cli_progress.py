"""Progress of long CLI work (issue 20): import, export, backup and restore report counts from the
work itself to a callable (the services never print), and the CLI draws them on stderr when
asked (or on a terminal) while stdout stays exactly the command's output."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from memstream.api.cli.commands import main
from memstream.api.services import backup
from memstream.api.services.embedding import register_embedder
from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import Settings, load_settings
from memstream.api.tools.registry import Caller
from memstream.api.tools.transfer.collect import collect
from memstream.api.tools.transfer.importing import import_file
from tests.support.embedders import HashEmbedder

MEMORIES = 700  # more than one export chunk (500) and many import chunks (64)


def export_file() -> bytes:
    """A CPersona-style file of MEMORIES memories, an episode, a profile and a record of a kind
    memstream does not import (done at once, as an error)."""
    lines: list[dict[str, Any]] = [
        {"_type": "memory", "id": i, "agent_id": "prog", "content": f"progress note number {i} about topic {i % 13}"}
        for i in range(MEMORIES)
    ]
    lines.append({"_type": "episode", "id": 1, "agent_id": "prog", "summary": "a talk about progress bars"})
    lines.append({"_type": "profile", "agent_id": "prog", "content": "likes to see how far along things are"})
    lines.append({"_type": "entity", "id": 1, "name": "not imported"})
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


class Recorder:
    """A Progress that keeps every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, done: int, total: int, /) -> None:
        self.calls.append((done, total))

    def check_complete(self, total: int) -> None:
        assert self.calls, "never called"
        dones = [d for d, _ in self.calls]
        assert dones == sorted(dones), "done went backwards"
        assert {t for _, t in self.calls} == {total}
        assert self.calls[-1] == (total, total)
        assert all(0 <= d <= total for d in dones)


async def _imported(settings: Settings, raw: bytes, progress: Recorder) -> dict[str, Any]:
    eng = EmbeddedEngine(settings, embedder=HashEmbedder())
    await eng.start()
    try:
        return await import_file(eng, Caller(client_id="test"), raw, progress=progress)
    finally:
        await eng.close()


def test_import_and_export_report_records_up_to_the_total(settings: Settings) -> None:
    raw = export_file()
    seen = Recorder()
    report = asyncio.run(_imported(settings, raw, seen))
    assert report["imported_memories"] == MEMORIES and report["imported_episodes"] == 1, report
    seen.check_complete(MEMORIES + 3)
    assert len(seen.calls) > MEMORIES // 64  # one report per chunk at least, not one at the end

    async def exported(progress: Recorder) -> int:
        eng = EmbeddedEngine(settings, embedder=HashEmbedder())
        await eng.start()
        try:
            _, records = await collect(eng, "prog", include_embeddings=True, progress=progress)
            return len(records)
        finally:
            await eng.close()

    out = Recorder()
    count = asyncio.run(exported(out))
    assert count == MEMORIES + 2
    out.check_complete(count)
    assert any(0 < d < count for d, _ in out.calls)  # a report between the chunks

    again = Recorder()  # a second import decides every record as a retry, and says so as it goes
    assert asyncio.run(_imported(settings, raw, again))["skipped_memories"] == MEMORIES
    again.check_complete(MEMORIES + 3)


def test_backup_and_restore_report_bytes_up_to_the_file_size(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(_imported(settings, export_file(), Recorder()))
    monkeypatch.setattr(backup, "STEP_PAGES", 8)  # many steps from a small log
    seen = Recorder()
    report = backup.backup_log(settings, tmp_path / "bk", seen)
    assert report["integrity"] == "ok"
    seen.check_complete(report["bytes"])
    assert len(seen.calls) > 2

    back = Recorder()
    restored = load_settings(env={}, data_dir=tmp_path / "restored", sync="NORMAL")
    again = backup.restore_log(tmp_path / "bk", restored, back)
    back.check_complete(again["bytes"])
    assert again["events"] == report["events"]


def _cli(args: list[str]) -> Any:
    result = CliRunner(env={"MEMSTREAM_EMBEDDER": "test-hash-64"}).invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def _without_volatile(report: dict[str, Any]) -> dict[str, Any]:
    # paths name each run's own destination (a backup's log, key store and master key)
    return {k: v for k, v in report.items() if k not in ("seconds", "path", "keys", "master_key", "exported_at")}


def test_cli_draws_progress_on_stderr_and_leaves_stdout_alone(tmp_path: Path) -> None:
    register_embedder("test-hash-64", HashEmbedder)
    dump = tmp_path / "in.jsonl"
    dump.write_bytes(export_file())
    data = str(tmp_path / "data")

    # Asked for: a bar with the file's record count and a rate; stdout is the JSON report alone.
    shown = _cli(["import", "--progress", "--data-dir", data, str(dump)])
    assert f"{MEMORIES + 3}/{MEMORIES + 3}" in shown.stderr and "records/s" in shown.stderr
    first = orjson.loads(shown.stdout)
    assert first["imported_memories"] == MEMORIES
    # Not a terminal and not asked: nothing on stderr, the same report shape on stdout.
    quiet = _cli(["import", "--data-dir", data, str(dump)])
    assert quiet.stderr == ""
    assert orjson.loads(quiet.stdout)["skipped_memories"] == MEMORIES

    shown = _cli(["export", "--progress", "--data-dir", data, "--agent", "prog"])
    assert f"{MEMORIES + 2}/{MEMORIES + 2}" in shown.stderr and "records/s" in shown.stderr
    quiet = _cli(["export", "--no-progress", "--data-dir", data, "--agent", "prog"])
    assert "records/s" not in quiet.stderr and quiet.stderr.startswith("exported ")
    with_bar = [orjson.loads(x) for x in shown.stdout.splitlines()]
    without = [orjson.loads(x) for x in quiet.stdout.splitlines()]
    assert [_without_volatile(r) for r in with_bar] == [_without_volatile(r) for r in without]
    assert len(with_bar) == MEMORIES + 3  # the header and every record

    shown = _cli(["backup", "--progress", "--data-dir", data, str(tmp_path / "bk1")])
    quiet = _cli(["backup", "--data-dir", data, str(tmp_path / "bk2")])
    assert "backup" in shown.stderr and "B/s" in shown.stderr and quiet.stderr == ""
    assert _without_volatile(orjson.loads(shown.stdout)) == _without_volatile(orjson.loads(quiet.stdout))

    shown = _cli(["restore", "--progress", "--data-dir", str(tmp_path / "r1"), str(tmp_path / "bk1")])
    quiet = _cli(["restore", "--data-dir", str(tmp_path / "r2"), str(tmp_path / "bk2")])
    assert "restore" in shown.stderr and "B/s" in shown.stderr and quiet.stderr == ""
    assert _without_volatile(orjson.loads(shown.stdout)) == _without_volatile(orjson.loads(quiet.stdout))
