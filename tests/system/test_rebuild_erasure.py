"""An erasure while ``memstream rebuild`` runs on a live store: the rebuild folded the record
before its keys were destroyed, so what it would save holds the erased text. It must not put
that on disk after the erasure rewrote every checkpoint without it (docs/erasure.md), and its
two sides may have opened the record on either side of the keys' destruction: it says so."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from memstream.api.cli.commands import main
from memstream.api.services import rebuild
from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.rebuild import rebuild_all
from memstream.api.services.settings import Settings, load_settings
from memstream.streams.snapshots import RewriteLock
from tests.support.broker import wait_until
from tests.support.calls import call, filled
from tests.support.embedders import HashEmbedder
from tests.support.file_hits import files_holding
from tests.system.test_erasure import vector_forms

SECRET = "Philomena Okonkwo-Brandt keeps her spare key under the heron statue"
NEEDLES = [SECRET.encode(), b"Philomena", *vector_forms(SECRET)]


@pytest.mark.parametrize("processes", [1, 2])
def test_an_erasure_during_a_rebuild_leaves_no_checkpoint_holding_the_record(tmp_path: Path, processes: int) -> None:
    settings = load_settings(env={}, data_dir=tmp_path / "data", sync="NORMAL")

    async def scenario() -> tuple[dict[str, Any], list[str]]:
        engine = EmbeddedEngine(settings, embedder=HashEmbedder())
        await engine.start()
        loop = asyncio.get_running_loop()
        try:
            secret = await call(engine, "store", agent_id="p", content=SECRET)
            for i in range(20):
                await call(engine, "store", agent_id="p", content=f"an ordinary note {i}")
            erased: list[dict[str, Any]] = []

            def progress(_phase: str, done: int, total: int) -> None:
                # The rebuild has folded its read models to the ends it took, the record
                # included: the erasure lands (and rewrites every checkpoint) before the rebuild
                # saves what it folded.
                if done >= total and not erased:
                    args = {"agent_id": "p", "memory_id": secret["id"], "reason": "data subject request"}
                    erased.append(
                        asyncio.run_coroutine_threadsafe(call(engine, "erase_memory", **args), loop).result(60)
                    )

            report = await asyncio.to_thread(rebuild_all, settings, progress=progress, processes=processes)
            assert erased and erased[0]["ok"] is True, erased
            # Looked at while the server runs: its own next checkpoint (or its close) would
            # write over what the rebuild saved, and hide it.
            held = [str(p.relative_to(settings.data_dir)) for p, _ in files_holding(settings.snapshot_dir, NEEDLES)]
            return report, held
        finally:
            await engine.close()

    report, held = asyncio.run(scenario())
    # Its two sides may have opened the record on either side of the keys' destruction: the
    # report says so rather than stand as a comparison.
    assert "erasure" in report["erasure_meanwhile"], report
    assert report["saved"] is False and "run the rebuild again" in report["not_saved"], report
    assert held == [], f"the erased text is in {held}"
    # What is on disk is the server's own checkpoints, after the erasure: a start from them is
    # the log's replay.
    again = rebuild_all(settings, save=False, processes=processes)
    assert again["equal"], again


def test_a_rebuild_with_no_erasure_meanwhile_saves(tmp_path: Path) -> None:
    settings = load_settings(env={}, data_dir=tmp_path / "data", sync="NORMAL")
    filled(settings, "p", [f"a note {i}" for i in range(5)])
    report = rebuild_all(settings)
    assert report["equal"] and report["saved"] is True and "not_saved" not in report


async def test_an_erasure_rewrites_the_checkpoints_after_a_save_that_holds_the_lock(
    engine: EmbeddedEngine, settings: Settings
) -> None:
    # A rebuild found no erasure and is saving, holding the lock, what it folded before the
    # keys went: the erasure's rewrite waits for it and writes over it, never the reverse.
    secret = await call(engine, "store", agent_id="p", content=SECRET)
    await call(engine, "store", agent_id="p", content="an ordinary note")
    await engine.settle(checkpoint=True)  # checkpoints that hold the record
    folded_before = {p: p.read_bytes() for p in settings.snapshot_dir.glob("*.snap")}
    assert any(SECRET.encode() in data for data in folded_before.values())
    sealer = engine.log.sealer
    assert sealer is not None
    generation = sealer.keys.generation()
    saving = RewriteLock(settings.snapshot_dir)
    saving.acquire()
    try:
        args = {"agent_id": "p", "memory_id": secret["id"], "reason": "data subject request"}
        erasing = asyncio.create_task(call(engine, "erase_memory", **args))

        async def keys_destroyed() -> bool:
            return sealer.keys.generation() != generation

        await wait_until("the erasure destroyed the record's keys", keys_destroyed)
        for path, data in folded_before.items():
            path.write_bytes(data)  # the rebuild's save
    finally:
        saving.release()
    assert (await erasing)["ok"] is True
    held = [str(p.relative_to(settings.data_dir)) for p, _ in files_holding(settings.snapshot_dir, NEEDLES)]
    assert held == [], f"the erased text is in {held}"


@pytest.mark.parametrize(
    ("erasure", "code"),
    [("an erasure destroyed keys of records the rebuild was reading", 75), (None, 1)],
)
def test_the_cli_tells_an_erasure_meanwhile_from_a_real_difference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, erasure: str | None, code: int
) -> None:
    unequal: dict[str, Any] = {"equal": False, "saved": False, "projections": {}}
    if erasure is not None:
        unequal |= {"erasure_meanwhile": erasure, "not_saved": f"{erasure}: run the rebuild again to compare and save"}
    monkeypatch.setattr(rebuild, "rebuild_all", lambda *_a, **_k: unequal)
    result = CliRunner().invoke(main, ["rebuild", "--data-dir", str(tmp_path / "data")])
    assert result.exit_code == code, result.output
    assert orjson.loads(result.stdout) == unequal
    assert ("run it again" in result.stderr) is (erasure is not None)
