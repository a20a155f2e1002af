"""Recall under load and after replay (issue 3 tests): recall during a write storm never errors,
and read models rebuilt from the log answer a query set exactly as the live ones did."""

from __future__ import annotations

import asyncio
from typing import Any

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import Settings
from tests.support.calls import call
from tests.support.embedders import HashEmbedder
from tests.support.faces import HttpFace
from tests.support.servers import ServerThread

QUERIES = [
    "deploy key rotation",
    "green tea",
    "billing database",
    "printer paper jam",
    "vpn certificate",
    "kubernetes nodes",
    "",
]


async def test_recall_during_a_write_storm_never_errors(http_server: ServerThread) -> None:
    face = HttpFace(http_server.url)
    stop = asyncio.Event()
    errors: list[Any] = []
    writes = 0
    recalls = 0

    async def writer(n: int) -> None:
        nonlocal writes
        for i in range(60):
            body = await face.call(
                "store", {"agent_id": "storm", "content": f"writer {n} note {i} about printer paper"}
            )
            if body.get("result") != "stored":
                errors.append(body)
            writes += 1

    async def reader() -> None:
        nonlocal recalls
        while not stop.is_set():
            for q in QUERIES:
                body = await face.call("recall", {"agent_id": "storm", "query": q, "limit": 5})
                if "messages" not in body or body.get("ok") is False:
                    errors.append(body)
                recalls += 1

    readers = [asyncio.create_task(reader()) for _ in range(2)]
    async with asyncio.timeout(120):
        await asyncio.gather(*(writer(n) for n in range(4)))  # the storm: 240 stores
        stop.set()
        await asyncio.gather(*readers)
    await face.close()
    assert not errors, errors[:3]
    assert writes == 240 and recalls > 0


async def test_rebuilt_read_models_answer_recall_exactly_as_live(settings: Settings) -> None:
    engine = EmbeddedEngine(settings, embedder=HashEmbedder())
    await engine.start()
    topics = ["deploy key rotation staging", "green tea mornings", "billing database postgres", "printer paper jam"]
    for i in range(80):
        await call(engine, "store", agent_id="rp", content=f"{topics[i % 4]} entry {i}", id=f"r{i}")
    for mid in range(1, 400, 37):
        await call(engine, "update_memory", agent_id="rp", memory_id=mid, content=f"rewritten {mid} printer")
        await call(engine, "delete_memory", agent_id="rp", memory_id=mid + 16)
    await call(engine, "archive_episode", agent_id="rp", summary="talked about printers and tea")
    live = [await call(engine, "recall", agent_id="rp", query=q, limit=10) for q in QUERIES]
    await engine.close()

    for snap in settings.snapshot_dir.iterdir():
        snap.unlink()  # no checkpoint of any kind: everything is folded from offset 0
    rebuilt = EmbeddedEngine(settings, embedder=HashEmbedder())
    await rebuilt.start()
    try:
        again = [await call(rebuilt, "recall", agent_id="rp", query=q, limit=10) for q in QUERIES]
    finally:
        await rebuilt.close()
    assert again == live
    assert any(body["messages"] for body in live)
