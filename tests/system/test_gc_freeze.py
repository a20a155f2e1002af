"""A started engine's read models are frozen out of the cyclic GC (``freeze_long_lived``), so
no generation-2 collection walks them while the server answers: without it a server started
from snapshots paid pauses of hundreds of ms at 100k memories (docs/associations.md, 100k)."""

from __future__ import annotations

import gc

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import Settings
from tests.support.calls import call
from tests.support.embedders import HashEmbedder


async def test_a_started_engine_freezes_its_read_models(settings: Settings) -> None:
    first = EmbeddedEngine(settings, embedder=HashEmbedder())
    await first.start()
    try:
        for i in range(20):
            await call(first, "store", agent_id="a", content=f"note {i} about green tea")
    finally:
        await first.close()
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    second = EmbeddedEngine(settings, embedder=HashEmbedder())
    await second.start()
    try:
        assert gc.get_freeze_count() > 0
        rows = second.memories.of_agent("a")
        assert len(rows) == 20
        assert not any(gc.is_tracked(r) and r in gc.get_objects(generation=2) for r in rows[:3])
    finally:
        await second.close()
        gc.unfreeze()
