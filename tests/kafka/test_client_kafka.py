"""memstream.client against a Kafka deployment (a router in front of a worker, real processes):
the same typed answers, error classes and retries under one command id as against the embedded
server, with agents on different partitions; the change feed through the router, its opaque
positions resumed after and across a dropped connection."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from memstream.client import AsyncClient, Client, Conflict, Invalid, Locked, NotFound, TooLarge, UnknownTool
from memstream.client.results import HistoryResult, RecallResult, StoreResult
from tests.support.deployment import Deployment
from tests.support.error_codes import HeaderRecorder
from tests.support.proxies import ScriptedProxy, TcpRelay

pytestmark = [pytest.mark.kafka]
PARTITIONS = 3
AGENTS = ("ada", "bo", "cy", "dee")  # more agents than partitions: some share one, none is alone


async def test_the_client_through_a_kafka_router(deployment: Deployment) -> None:
    deployment.worker()
    deployment.router()
    await deployment.ready()
    async with asyncio.timeout(240):
        recorder = HeaderRecorder()
        with Client(deployment.url, client_id="kafka-notebook", transport=recorder) as memory:
            ids = {}
            for agent in AGENTS:
                stored = memory.store(agent, f"{agent} grows tomatoes on the balcony")
                assert isinstance(stored, StoreResult) and stored.stored and stored.id is not None
                ids[agent] = stored.id
            for agent in AGENTS:
                hits = memory.recall(agent, f"{agent} grows tomatoes on the balcony")
                assert isinstance(hits, RecallResult) and [h.memory_id for h in hits.messages] == [ids[agent]]
            assert memory.update_memory(ids["cy"], "cy grows chillies now").updated_id == ids["cy"]
            assert [m.content for m in memory.list_memories("cy").memories] == ["cy grows chillies now"]
            history = memory.history(agent_id="cy")
            assert isinstance(history, HistoryResult)
            assert [e.type for e in history.events] == ["memory.stored", "memory.updated"]
            assert {e.actor["client_id"] for e in history.events} == {"kafka-notebook"}

            with pytest.raises(Invalid):
                memory.store("ada", "")
            with pytest.raises(NotFound):
                memory.update_memory(987_654_321, "nothing there")
            with pytest.raises(UnknownTool):
                memory.call("no_such_tool", {"agent_id": "ada"})
            memory.lock_memory(ids["bo"])
            with pytest.raises(Locked):
                memory.update_memory(ids["bo"], "edited while locked")
            second = memory.store("dee", "dee keeps bees").id
            assert second is not None
            with pytest.raises(Conflict):  # one copy of a text per bucket
                memory.update_memory(second, "dee grows tomatoes on the balcony")
            with pytest.raises(TooLarge):
                memory.archive_episode("dee", "an episode", keywords="word " * 2500)
            # the worker names each code (Memstream-Error) and the router passes it through
            named = ["invalid", "not_found", "unknown_tool", "locked", "conflict", "too_large"]
            assert [c for c in recorder.codes if c] == named
            assert memory.delete_memory(ids["ada"]).deleted_id == ids["ada"]
            assert memory.list_memories("ada").count == 0

        # A write the router forwarded (the worker applied it) but whose answer was lost is
        # retried under its command id and applied once.
        with ScriptedProxy(deployment.url, ["forward-503", "forward-drop"]) as proxy:
            async with AsyncClient(proxy.url, backoff=0) as memory:
                stored = await memory.store("ada", "ada repotted the basil")
                assert stored.stored
                sent = [orjson.loads(s.body)["command_id"] for s in proxy.seen]
                assert len(sent) == 3 and len(set(sent)) == 1
                listed = await memory.list_memories("ada")
                assert [m.content for m in listed.memories] == ["ada repotted the basil"]
                events = (await memory.history(agent_id="ada")).events
                assert [e.command_id for e in events if e.type == "memory.stored"].count(sent[0]) == 1

        # The change feed through the router: the history entries, positions opaque and resumable.
        with Client(deployment.url) as memory:
            with memory.events("cy", start=0) as stream:
                got = [next(stream) for _ in range(2)]
            assert [(e.type, e.agent_id) for e in got] == [("memory.stored", "cy"), ("memory.updated", "cy")]
            assert [e.event_id for e in got] == [e.event_id for e in memory.history(agent_id="cy").events]
            with memory.events("cy", after=got[0].position) as stream:
                assert next(stream).event_id == got[1].event_id
            # A connection cut mid-stream resumes after the last event delivered: each once, in order.
            with TcpRelay(deployment.port) as relay, Client(relay.url, backoff=0.05) as via:
                with via.events("ada", start=0) as stream:
                    seen = [next(stream)]
                    relay.cut()
                    memory.store("ada", "ada sowed the carrots")
                    while seen[-1].change.get("content") != "ada sowed the carrots":
                        seen.append(next(stream))
                assert stream.cursor.connections >= 2
            history = memory.history(agent_id="ada").events
            assert [e.event_id for e in seen] == [e.event_id for e in history]
            assert [e.type for e in seen] == ["memory.stored", "memory.deleted", "memory.stored", "memory.stored"]
