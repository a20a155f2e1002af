"""What an erasure of a large agent holds up, embedded (issue 16; docs/erasure.md, "What
others see during an erasure"): its long steps run with the cyclic collector paused and a
short switch interval, and a read of the erased agent issued while they run answers as
after the erasure, never half."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from typing import Any

import pytest

from memstream.api.services.engine import EmbeddedEngine
from memstream.projections.runner import ProjectionRunner
from memstream.projections.vectors.projection import VectorProjection
from memstream.streams.release import SWITCH_S
from tests.support.calls import call

DEADLINE_S = 60.0


async def fill(engine: EmbeddedEngine, agent: str, n: int) -> None:
    for i in range(n):
        out = await call(engine, "store", agent_id=agent, content=f"{agent} remembers the harbour light {i}")
        assert out["result"] == "stored", out


async def test_the_erasures_steps_run_with_the_collector_paused(
    engine: EmbeddedEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    await fill(engine, "big", 30)
    await fill(engine, "small", 3)
    seen: list[tuple[str, bool]] = []
    intervals: list[float] = []
    real_catch_up, real_checkpoint = ProjectionRunner.catch_up, ProjectionRunner.checkpoint

    def catch_up(self: ProjectionRunner, *a: Any, **k: Any) -> int:
        seen.append(("fold", gc.isenabled()))
        intervals.append(sys.getswitchinterval())
        return real_catch_up(self, *a, **k)

    def checkpoint(self: ProjectionRunner) -> None:
        seen.append(("checkpoint", gc.isenabled()))
        real_checkpoint(self)

    monkeypatch.setattr(ProjectionRunner, "catch_up", catch_up)
    monkeypatch.setattr(ProjectionRunner, "checkpoint", checkpoint)
    assert gc.isenabled()
    out = await call(engine, "erase_agent_data", agent_id="big", reason="closed")
    assert out["ok"] is True and out["erased_memories"] == 30, out
    assert ("fold", False) in seen and ("checkpoint", False) in seen
    assert ("fold", True) not in seen and ("checkpoint", True) not in seen
    assert gc.isenabled()  # and back on after
    assert intervals and max(intervals) <= SWITCH_S < sys.getswitchinterval()
    assert len((await call(engine, "list_memories", agent_id="small"))["memories"]) == 3


async def test_a_read_during_the_erasures_fold_answers_as_after_it(
    engine: EmbeddedEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    await fill(engine, "big", 20)
    await fill(engine, "small", 2)
    inside, release = threading.Event(), threading.Event()
    real = VectorProjection.apply

    def apply(self: VectorProjection, offset: int, ev: dict[str, Any]) -> None:
        real(self, offset, ev)
        if ev["payload"].get("erased") and not inside.is_set():
            inside.set()  # the vectors dropped the agent, the read models after them not yet
            assert release.wait(DEADLINE_S)

    monkeypatch.setattr(VectorProjection, "apply", apply)
    eraser = asyncio.create_task(call(engine, "erase_agent_data", agent_id="big", reason="closed"))
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, inside.wait, DEADLINE_S)
    reads = asyncio.gather(
        call(engine, "list_memories", agent_id="big"),
        call(engine, "recall", agent_id="big", query="harbour light"),
        call(engine, "list_memories", agent_id="small"),
    )
    for _ in range(20):
        await asyncio.sleep(0)
    assert not reads.done()  # it waits for the fold, whose halfway state it must not see
    stored = await call(engine, "store", agent_id="small", content="a write goes on meanwhile")
    assert stored["result"] == "stored", stored  # writes do not wait for the fold
    release.set()
    big_list, big_recall, small_list = await reads
    assert big_list["memories"] == [] and "harbour" not in repr(big_recall)
    assert len(small_list["memories"]) == 3
    out = await eraser
    assert out["ok"] is True and out["erased_memories"] == 20, out
