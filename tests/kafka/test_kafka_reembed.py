"""Re-embedding in Kafka mode, through the router: a re-embed of every agent runs on each
partition's worker over its own agents and reports as one job; one agent's runs on its worker;
recall and new stores follow each agent's model afterwards."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from memstream.streams.log.port import partition_for
from tests.support.deployment import Deployment
from tests.support.embedders import HashEmbedder, SecondHashEmbedder
from tests.support.faces import HttpFace
from tests.support.fleet import TOPICS

pytestmark = [pytest.mark.kafka]

PARTITIONS = 4
AGENTS = ["ada", "bob", "cy", "dee", "eve", "fay"]


def cosine(embedder: HashEmbedder, a: str, b: str) -> float:
    va, vb = embedder.embed([a, b])
    return float(np.dot(va, vb) / (math.sqrt(float(np.dot(va, va))) * math.sqrt(float(np.dot(vb, vb)))))


async def test_reembed_every_agent_and_one_agent_through_the_router(deployment: Deployment) -> None:
    assert len({partition_for(a, PARTITIONS) for a in AGENTS}) > 1, "the agents should span partitions"
    deployment.worker()
    deployment.worker()
    deployment.router()
    await deployment.ready()
    face = HttpFace(deployment.url)
    try:
        async with asyncio.timeout(240):
            for i in range(24):
                agent = AGENTS[i % len(AGENTS)]
                body = await face.call("store", {"agent_id": agent, "content": f"{TOPICS[i % 5]} note {i}"})
                assert body["result"] == "stored", body
            assert (await face.call("reembed_status", {}))["job"] is None

            started = await face.call("reembed", {"model": SecondHashEmbedder.model_id, "wait": True})
            job = started["job"]
            assert started["ok"] is True and job["state"] == "finished", started
            assert job["done"] == job["total"] == 24 and job["result"]["complete"] is True
            assert job["result"]["reembedded"] == 24
            assert sorted(a["agent_id"] for a in job["result"]["agents"]) == sorted(AGENTS)
            assert all(a["switched"] for a in job["result"]["agents"])
            assert len(job["partitions"]) == PARTITIONS  # every partition ran it over its own agents
            status = (await face.call("reembed_status", {}))["job"]
            assert status["state"] == "finished" and status["done"] == 24

            # recall answers with the new model's cosine, and new stores are embedded with it
            recalled = await face.call("recall", {"agent_id": "ada", "query": "green tea", "limit": 3})
            best = recalled["messages"][-1]
            assert best["match_reason"]["cosine"] == pytest.approx(
                cosine(SecondHashEmbedder(), "green tea", best["content"]), abs=1e-5
            )
            stored = await face.call("store", {"agent_id": "ada", "content": "fresh oolong tea arrived"})
            assert stored["result"] == "stored"

            # one agent back to the first model: only that agent moves
            back = await face.call("reembed", {"model": HashEmbedder.model_id, "agent_id": "ada", "wait": True})
            assert back["ok"] is True and back["job"]["result"]["complete"] is True
            assert back["job"]["result"]["reembedded"] == 5  # ada's 4 notes and the fresh one
            for agent, model in (("ada", HashEmbedder()), ("bob", SecondHashEmbedder())):
                rows = await face.call("recall", {"agent_id": agent, "query": "printer paper jam", "limit": 2})
                top = rows["messages"][-1]
                assert top["match_reason"]["cosine"] == pytest.approx(
                    cosine(model, "printer paper jam", top["content"]), abs=1e-5
                ), agent
    finally:
        await face.close()
