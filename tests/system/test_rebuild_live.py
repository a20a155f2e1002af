"""``memstream rebuild`` on a live store (docs/operations.md): a server goes on writing, refusing
and checkpointing while the rebuild folds, and the rebuild still compares like with like (both
sides folded to the same ends of the log and the audit table), so it reports equal digests.
The soak benchmark (bench/soak.py) found it reporting a false difference (exit 1)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from memstream.api.services import rebuild
from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.rebuild import WorkerFailed, rebuild_all
from memstream.api.services.settings import load_settings
from memstream.api.tools.dispatch import run_tool
from memstream.api.tools.registry import Caller
from tests.support.calls import filled
from tests.support.embedders import HashEmbedder

CALLER = Caller(client_id="rebuild-live")


@pytest.mark.parametrize("processes", [1, 2])
def test_rebuild_while_a_server_writes_reports_equal(tmp_path: Path, processes: int) -> None:
    settings = load_settings(env={}, data_dir=tmp_path / "data", sync="NORMAL", snapshot_every=7)

    async def scenario() -> dict[str, Any]:
        engine = EmbeddedEngine(settings, embedder=HashEmbedder())
        await engine.start()
        loop = asyncio.get_running_loop()

        async def writes(tag: str, n: int) -> None:
            for i in range(n):
                body, code = await run_tool(engine, CALLER, "store", {"agent_id": f"r{i % 3}", "content": f"{tag} {i}"})
                assert code is None, body
                # a duplicate: skipped, an audit record (the decision state's memo)
                body, code = await run_tool(engine, CALLER, "store", {"agent_id": f"r{i % 3}", "content": f"{tag} {i}"})
                assert code is None and body["result"] == "skipped", body
                await engine.read(lambda: None)  # fold: read-model checkpoints every 7 events

        during: list[int] = []

        def progress(_phase: str, _done: int, _total: int) -> None:
            # The rebuild has taken the log's ends and folded the fresh side: the server writes
            # more (events, audit records, checkpoints) before the live side is folded.
            if not during:
                during.append(1)
                asyncio.run_coroutine_threadsafe(writes("during", 20), loop).result(timeout=60)

        try:
            await writes("before", 30)
            report = await asyncio.to_thread(rebuild_all, settings, progress=progress, processes=processes)
            await writes("after", 5)
        finally:
            await engine.close()
        assert during, "the rebuild reported no progress"
        return report

    report = asyncio.run(scenario())
    unequal = {k: v for k, v in report["projections"].items() if not v["equal"]}
    assert report["equal"], unequal
    assert report["events"] == 30  # folded to the ends it took, not what was written meanwhile
    # The server's later start from what the rebuild saved (and the log's tail) is the log's replay.
    again = rebuild_all(settings, save=False, processes=processes)
    assert again["equal"] and again["events"] == 55


@pytest.mark.parametrize("how", ["raise", "die"])
def test_a_failure_of_the_second_process_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    settings = load_settings(env={}, data_dir=tmp_path / "data", sync="NORMAL")
    filled(settings, "f", [f"text {i}" for i in range(5)])
    assert rebuild_all(settings, processes=2)["equal"]
    monkeypatch.setattr(rebuild, "WORKER", ["-m", "tests.support.failing_rebuild_worker"])
    monkeypatch.setenv("REBUILD_WORKER_FAILS", how)
    expected = "the worker's fold failed" if how == "raise" else "exit code 3"
    with pytest.raises(WorkerFailed, match=expected):
        rebuild_all(settings, processes=2)
