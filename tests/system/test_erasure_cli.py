"""`memstream erase` and `memstream keys rotate` (issue 16)."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import orjson
from click.testing import CliRunner

from memstream.api.cli.commands import main
from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import Settings
from tests.support.calls import call
from tests.support.embedders import HashEmbedder
from tests.system.test_erasure import OTHER, SECRET, hits, rebuild_equal, secret_needles, store


async def seed(settings: Settings) -> int:
    eng = EmbeddedEngine(settings, embedder=HashEmbedder())
    await eng.start()
    try:
        mid = await store(eng, "kim", SECRET)
        await store(eng, "kim", OTHER, source={"type": "user", "id": "s-1"})
        return mid
    finally:
        await eng.close()


def test_erase_from_the_command_line(settings: Settings) -> None:
    mid = asyncio.run(seed(settings))
    d = str(settings.data_dir)
    runner = CliRunner()
    bad = runner.invoke(main, ["erase", "--data-dir", d, "--agent", "kim", "--reason", "x"])
    assert bad.exit_code != 0 and "exactly one" in bad.output
    args = ["erase", "--data-dir", d, "--agent", "kim", "--memory", str(mid), "--reason", "ticket 7"]
    out = runner.invoke(main, args)
    assert out.exit_code == 0, out.output
    report = orjson.loads(out.stdout)
    assert report["ok"] and report["erased"] == [f"mem:{mid}"] and report["unreachable"] == []
    again = runner.invoke(main, ["erase", "--data-dir", d, "--agent", "kim", "--memory", str(mid), "--reason", "x"])
    assert again.exit_code == 1  # gone already: not found
    by_source = runner.invoke(main, ["erase", "--data-dir", d, "--agent", "kim", "--source", "s-1", "--reason", "r"])
    assert by_source.exit_code == 0 and orjson.loads(by_source.stdout)["erased_memories"] == 1
    assert hits(settings.data_dir, [*secret_needles(SECRET), OTHER.encode()]) == []
    rebuild_equal(settings)


async def listed(settings: Settings) -> str:
    eng = EmbeddedEngine(settings, embedder=HashEmbedder())
    await eng.start()
    try:
        return repr(await call(eng, "list_memories", agent_id="kim"))
    finally:
        await eng.close()


def test_keys_rotate_rewraps_under_a_new_master_key(settings: Settings, tmp_path: Path) -> None:
    asyncio.run(seed(settings))
    old_key = (settings.data_dir / "master.key").read_text()
    runner = CliRunner()
    out = runner.invoke(main, ["keys", "rotate", "--data-dir", str(settings.data_dir), "--no-progress"])
    assert out.exit_code == 0, out.output
    assert orjson.loads(out.stdout)["keys_rewrapped"] >= 2
    assert (settings.data_dir / "master.key").read_text() != old_key
    given = tmp_path / "given.key"
    given.write_text(base64.b64encode(bytes(range(32))).decode())
    out = runner.invoke(main, ["keys", "rotate", "--data-dir", str(settings.data_dir), "--new-key-file", str(given)])
    assert out.exit_code == 0, out.output
    assert SECRET in asyncio.run(listed(settings))
    rebuild_equal(settings)
