"""Re-embedding (issue 3 item 7): every live record gains a vector of the new model, recall keeps
answering from the old one meanwhile, the agent switches only when complete, and a job killed
with SIGKILL is finished by running it again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.rebuild import rebuild_all
from memstream.api.services.reembed import Reembedder
from memstream.api.services.settings import Settings
from memstream.streams import commands as c
from memstream.streams.events import Actor, Embedding, Scope, utcnow
from memstream.streams.log.sqlite import SqliteLog
from tests.support.calls import call
from tests.support.embedders import HashEmbedder, SecondHashEmbedder
from tests.support.faces import HttpFace
from tests.support.servers import ServerThread

TOPICS = ["deploy key rotation", "green tea mornings", "billing database", "printer paper jam", "vpn certificate"]
PROCS = Path(__file__).resolve().parents[1] / "procs"


def cosine(emb: Any, a: str, b: str) -> float:
    va, vb = emb.embed([a, b])
    return float(np.dot(va, vb) / (np.linalg.norm(va) * np.linalg.norm(vb)))


def events_of(settings: Settings, type_: str) -> list[Any]:
    log = SqliteLog(settings.log_path)
    try:
        return [r for r in log.read(0, limit=1_000_000, vectors=False) if r.type == type_]
    finally:
        log.close()


async def fill(engine: EmbeddedEngine, agent: str, n: int) -> None:
    for i in range(n):
        await call(engine, "store", agent_id=agent, content=f"{TOPICS[i % len(TOPICS)]} note {i}", id=f"{agent}{i}")
    await call(engine, "archive_episode", agent_id=agent, summary="we talked about tea and printers")


def engine_for(settings: Settings) -> EmbeddedEngine:
    return EmbeddedEngine(settings, embedder=HashEmbedder(), embedders={"test-hash-b": SecondHashEmbedder()})


async def test_reembed_moves_the_agent_and_recall_follows(settings: Settings) -> None:
    engine = engine_for(settings)
    await engine.start()
    try:
        await fill(engine, "a", 30)
        await fill(engine, "other", 5)
        before = await call(engine, "recall", agent_id="a", query="green tea", limit=3)
        old_cos = before["messages"][-1]["match_reason"]["cosine"]
        assert old_cos == pytest.approx(cosine(HashEmbedder(), "green tea", before["messages"][-1]["content"]))

        report = await Reembedder(engine, SecondHashEmbedder(), batch=7).run(["a"])
        assert report.complete and report.agents[0].reembedded == 31  # 30 memories + 1 episode
        assert report.agents[0].previous == "test-hash-64"
        assert await engine.read(lambda: engine.vectors.model_of("a")) == "test-hash-b"
        assert await engine.read(lambda: engine.vectors.models("a")) == {"test-hash-b": 31}
        assert (
            await engine.read(lambda: engine.vectors.model_of("other")) == "test-hash-64"
        )  # only the named agent moved

        after = await call(engine, "recall", agent_id="a", query="green tea", limit=3)
        best = after["messages"][-1]
        assert "green tea" in best["content"]
        # the cosine is the new model's: the query was embedded with the agent's model too
        assert best["match_reason"]["cosine"] == pytest.approx(
            cosine(SecondHashEmbedder(), "green tea", best["content"])
        )

        # new writes to the moved agent are embedded with its model, not the configured one
        stored = await call(engine, "store", agent_id="a", content="fresh oolong tea arrived")
        assert stored["result"] == "stored"
        assert await engine.read(lambda: engine.vectors.models("a")) == {"test-hash-b": 32}
        rows = await call(engine, "list_memories", agent_id="a", limit=1)
        assert rows

        # a write embedded with another model is refused with a clear reason, and nothing lands
        end = engine.log.end_offset()
        out = await engine.submit(
            c.StoreMemory(
                command_id="stray",
                scope=Scope(agent_id="a"),
                actor=Actor(client_id="t"),
                received_at=utcnow(),
                content="stray vector",
                embedding=Embedding.from_vector("test-hash-64", np.ones(64, np.float32)),
            )
        )
        assert out.outcome.error == "model_mismatch" and "test-hash-b" in (out.outcome.reason or "")
        assert engine.log.end_offset() == end

        # running the job again has nothing to do and appends nothing
        again = await Reembedder(engine, SecondHashEmbedder()).run(["a"])
        assert again.complete and again.agents[0].reembedded == 0
        assert engine.log.end_offset() == end
    finally:
        await engine.close()
    report = rebuild_all(settings, save=False)
    assert report["equal"], report["projections"]


async def test_recall_answers_from_the_old_model_during_the_job(settings: Settings) -> None:
    engine = engine_for(settings)
    await engine.start()
    try:
        await fill(engine, "a", 60)

        class Slow(SecondHashEmbedder):
            def embed(self, texts: Any) -> Any:
                time.sleep(0.02)  # a slow model, so the job lasts while recall runs: the thing under test
                return super().embed(texts)

        job = asyncio.create_task(Reembedder(engine, Slow(), batch=4).run())
        answers = []
        async with asyncio.timeout(120):  # recall, over and over, until the job ends
            while not job.done():
                body = await call(engine, "recall", agent_id="a", query="printer paper jam", limit=5)
                answers.append(body)
                await asyncio.sleep(0.01)
        report = await job
        assert report.complete
        assert len(answers) > 5, "the job finished before recall was exercised during it"
        for body in answers:
            assert body["messages"], body
            assert "printer paper jam" in body["messages"][-1]["content"]
        health = await call(engine, "check_health")
        assert health["status"] == "healthy" and not [i for i in health["issues"] if i["check"] == "embedding"]
    finally:
        await engine.close()


async def test_an_edit_during_the_job_is_embedded_from_its_new_text(settings: Settings) -> None:
    engine = engine_for(settings)
    await engine.start()
    try:
        await fill(engine, "a", 12)
        edited = False

        class EditingMidway(SecondHashEmbedder):
            """Edits memory 'a3' after the job read its text and before its vector is submitted."""

            def embed(self, texts: Any) -> Any:
                nonlocal edited
                if not edited:
                    edited = True
                    fut = asyncio.run_coroutine_threadsafe(
                        call(engine, "update_memory", agent_id="a", memory_id=row_id, content="now about oolong"), loop
                    )
                    assert fut.result(timeout=30)["ok"] is True
                return super().embed(texts)

        loop = asyncio.get_running_loop()
        row_id = await engine.read(lambda: next(r.id for r in engine.memories.of_agent("a") if r.msg_id == "a3"))
        report = await Reembedder(engine, EditingMidway(), batch=100).run(["a"])
        assert report.complete and report.agents[0].retried == 1 and report.agents[0].passes >= 2
        best = (await call(engine, "recall", agent_id="a", query="oolong", limit=1))["messages"][-1]
        assert best["ref"] == f"mem:{row_id}"
        # the vector is the new model's, of the new text
        assert best["match_reason"]["cosine"] == pytest.approx(
            cosine(SecondHashEmbedder(), "oolong", "now about oolong")
        )
    finally:
        await engine.close()


async def test_switch_is_refused_until_every_record_has_the_model(settings: Settings) -> None:
    engine = engine_for(settings)
    await engine.start()
    try:
        await fill(engine, "a", 3)

        def switch(cid: str) -> c.SwitchEmbedding:
            env = {"scope": Scope(agent_id="a"), "actor": Actor(client_id="t"), "received_at": utcnow()}
            return c.SwitchEmbedding(command_id=cid, model="test-hash-b", **env)

        out = await engine.submit(switch("s1"))
        assert out.outcome.error == "incomplete" and "4 memories or episodes" in (out.outcome.reason or "")
        audit = await call(engine, "audit_log", agent_id="a")
        assert any("incomplete" in str(e) for e in audit["records"])
        assert await engine.read(lambda: engine.vectors.model_of("a")) == "test-hash-64"
        health = await call(engine, "check_health")
        assert not [i for i in health["issues"] if i["check"] == "embedding"]
    finally:
        await engine.close()


async def test_the_admin_tool_runs_the_job_and_reports_progress(settings: Settings) -> None:
    from memstream.api.services.embedding import register_embedder

    register_embedder("test-hash-b", SecondHashEmbedder)
    with ServerThread(settings) as srv:
        face = HttpFace(srv.url)
        try:
            for i in range(20):
                await face.call("store", {"agent_id": "t", "content": f"{TOPICS[i % 5]} item {i}"})
            unknown = await face.call("reembed", {"model": "no-such-model"})
            assert unknown["ok"] is False and "unknown embedder" in unknown["error"]
            assert (await face.call("reembed_status", {}))["job"] is None
            started = await face.call("reembed", {"model": "test-hash-b", "wait": True})
            assert started["ok"] is True
            status = (await face.call("reembed_status", {}))["job"]
            assert status["state"] == "finished" and status["done"] == status["total"] == 20
            assert status["result"]["complete"] is True
            best = (await face.call("recall", {"agent_id": "t", "query": "vpn certificate", "limit": 1}))["messages"]
            assert "vpn certificate" in best[-1]["content"]
        finally:
            await face.close()


@pytest.mark.parametrize("trial", range(2))
def test_reembed_killed_with_sigkill_resumes_and_completes(settings: Settings, trial: int) -> None:
    async def setup() -> None:
        engine = EmbeddedEngine(settings, embedder=HashEmbedder())
        await engine.start()
        try:
            await fill(engine, "k1", 120)
            await fill(engine, "k2", 80)
        finally:
            await engine.close()

    asyncio.run(setup())
    total = 202  # 200 memories + 2 episodes
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    args = [sys.executable, str(PROCS / "reembed.py"), str(settings.data_dir)]
    proc = subprocess.Popen([*args, "0.03"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        target = 40 + 60 * trial  # kill at different points of the job
        while len(events_of(settings, "memory.reembedded")) < target:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the job made no progress"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    done_before = len(events_of(settings, "memory.reembedded"))
    assert target <= done_before < total
    assert not events_of(settings, "embedding.switched")

    finished = subprocess.run(args, env=env, capture_output=True, timeout=120)
    assert finished.returncode == 0, finished.stderr.decode()[-2000:]
    # every live record re-embedded exactly once across both runs, and both agents switched
    reembedded = events_of(settings, "memory.reembedded")
    assert len(reembedded) == total
    assert len(events_of(settings, "embedding.switched")) == 2
    report = rebuild_all(settings, save=False)
    assert report["equal"], report["projections"]

    async def check() -> None:
        engine = engine_for(settings)
        await engine.start()
        try:
            assert await engine.read(lambda: engine.vectors.models("k1")) == {"test-hash-b": 121}
            assert await engine.read(lambda: engine.vectors.models("k2")) == {"test-hash-b": 81}
            best = (await call(engine, "recall", agent_id="k2", query="billing database", limit=1))["messages"]
            assert "billing database" in best[-1]["content"]
        finally:
            await engine.close()

    asyncio.run(check())


async def test_a_switch_made_by_another_process_is_seen_by_the_next_store(settings: Settings) -> None:
    server = engine_for(settings)
    await server.start()
    other = engine_for(settings)  # the CLI's engine: another handle on the same data directory
    try:
        await fill(server, "a", 10)
        await call(server, "recall", agent_id="a", query="tea")  # the server's read models fold
        await other.start()
        assert (await Reembedder(other, SecondHashEmbedder()).run(["a"])).complete
        # the server has not read since: its read models still say the old model
        assert server.vectors.model_of("a") == "test-hash-64"
        stored = await call(server, "store", agent_id="a", content="written right after the switch")
        assert stored["result"] == "stored", stored
        assert await server.read(lambda: server.vectors.models("a")) == {"test-hash-b": 12}
    finally:
        await other.close()
        await server.close()


async def test_a_stores_lookup_of_switches_stays_off_the_agents_tail(settings: Settings) -> None:
    """Every store asks for the agent's embedding switches since the read models' offset. With
    nothing reading, that tail grows with every write, so the lookup must go through the partial
    index of switches, not scan the agent's events (a 50k-event tail cost 64 ms a store)."""
    engine = engine_for(settings)
    await engine.start()
    try:
        await fill(engine, "a", 5)  # a tail past the read models' offset: nothing has read yet
        statements: list[str] = []
        connection = engine.log.connection()
        connection.set_trace_callback(statements.append)
        try:
            engine.agent_model("a")  # None: the read models have not folded the agent yet
        finally:
            connection.set_trace_callback(None)
        lookups = [s for s in statements if "FROM events" in s and "embedding.switched" in s]
        assert lookups, statements
        for sql in lookups:
            plan = " ".join(str(row) for row in connection.execute(f"EXPLAIN QUERY PLAN {sql}"))
            assert "events_switches" in plan, (sql, plan)
    finally:
        await engine.close()
