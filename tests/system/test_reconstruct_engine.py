"""Reconstruct and the association graph on an in-process engine (a temporary data directory),
beyond the face contracts: golden outputs for a fixed log, rebuild equals live, and
declare-then-retract restores every answer (hypothesis). The pure budget cut:
tests/unit/test_reconstruct.py."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.rebuild import rebuild_all
from memstream.api.services.settings import Settings, load_settings
from tests.support.calls import call
from tests.support.embedders import HashEmbedder

GOLDEN = Path(__file__).parents[1] / "fixtures" / "reconstruct_golden.json"
T = "2026-02-0{}T09:{:02d}:00+00:00"

CORPUS = [
    "Ticket 4411: checkout latency spiked after the Friday release.",
    "Gateway nodes were resized on Monday to cut checkout latency.",
    "The region eu-west had a network incident on Friday.",
    "The billing service runs on Postgres 14.",
    "Correction: the billing service runs on Postgres 16 now.",
    "Bob owns the billing service and answers its pages.",
    "Green tea is preferred over coffee by the platform team.",
]


async def _scenario(engine: EmbeddedEngine) -> list[int]:
    ids = []
    for i, text in enumerate(CORPUS):
        r = await call(engine, "store", agent_id="alice", content=text, timestamp=T.format(1 + i % 3, i))
        ids.append(r["id"])
    await call(
        engine,
        "archive_episode",
        agent_id="alice",
        summary="Checkout latency incident review",
        history=[{"timestamp": T.format(1, 0)}, {"timestamp": T.format(2, 59)}],
    )
    m = [f"mem:{i}" for i in ids]
    await call(
        engine,
        "declare_associations",
        agent_id="alice",
        anchor_ref=m[0],
        associations={"entities": [{"name": "checkout"}]},
    )
    await call(
        engine,
        "declare_associations",
        agent_id="alice",
        anchor_ref=m[1],
        associations={"entities": [{"name": "gateway"}]},
    )
    await call(
        engine,
        "declare_associations",
        agent_id="alice",
        anchor_ref=m[2],
        associations={"entities": [{"name": "eu-west"}]},
    )
    await call(
        engine,
        "declare_associations",
        agent_id="alice",
        anchor_ref=m[5],
        associations={"entities": [{"name": "Bob", "aliases": ["Robert"]}, {"name": "billing service"}]},
    )
    await call(
        engine,
        "declare_associations",
        agent_id="alice",
        associations={
            "relations": [
                {"subject": "checkout", "predicate": "runs behind", "object": "gateway"},
                {"subject": "eu-west", "predicate": "hosts", "object": "gateway"},
                {"subject": m[4], "predicate": "corrects", "object": m[3]},
            ]
        },
    )
    return ids


GOLDEN_QUERIES: list[dict[str, Any]] = [
    {"query": "checkout latency ticket 4411"},
    {"query": "checkout latency ticket 4411", "max_hops": 1},
    {"query": "billing service Postgres"},
    {"query": "Robert billing service pages"},
    {"query": "what is the"},
    {"query": "checkout latency", "count": 1, "mode": "lite"},
    {"query": "checkout latency incident", "budget": 1},
]


async def test_golden_reconstruct_outputs(settings: Settings) -> None:
    engine = EmbeddedEngine(settings, embedder=HashEmbedder())
    await engine.start()
    try:
        await _scenario(engine)
        got = [
            {"args": q, "response": await call(engine, "reconstruct", agent_id="alice", **q)} for q in GOLDEN_QUERIES
        ]
    finally:
        await engine.close()
    if os.environ.get("MEMSTREAM_REGEN_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n")
    assert got == json.loads(GOLDEN.read_text())


async def test_rebuild_equals_live_for_the_association_graph(settings: Settings) -> None:
    engine = EmbeddedEngine(settings, embedder=HashEmbedder())
    await engine.start()
    ids = await _scenario(engine)
    await call(engine, "declare_associations", agent_id="alice", retract={"relations": [1]})
    await call(engine, "delete_memory", agent_id="alice", memory_id=ids[1])  # takes its mention along
    live = await engine.read(engine.runner.digests)
    live["decision"] = engine.bus.state.digest()  # type: ignore[union-attr]
    graph = engine.associations.graph("alice")
    assert graph is not None and f"mem:{ids[1]}" not in graph.mentioned and 1 not in graph.relations
    await engine.close()
    report = rebuild_all(settings)
    assert report["equal"], report
    assert report["projections"]["associations"]["rebuilt"] == live["associations"]
    assert report["projections"]["decision"]["rebuilt"] == live["decision"]
    # and from no snapshot at all
    for snap in settings.snapshot_dir.glob("*.snap"):
        snap.unlink()
    again = EmbeddedEngine(settings, embedder=HashEmbedder())
    await again.start()
    assert (await again.read(again.runner.digests))["associations"] == live["associations"]
    await again.close()


# -- declare then retract returns every answer to what it was (hypothesis) -------------------------

NAMES = ["checkout", "gateway", "eu-west", "Bob", "billing service", "tea", "Postgres"]
ALIASES = ["Robert", "gw", "latency", "pg", "green"]
PREDICATES = ["runs behind", "hosts", "corrects", "supports", "owns", "qualifies"]

entity_items = st.builds(
    lambda name, aliases: {"name": name, "aliases": aliases},
    st.sampled_from(NAMES),
    st.lists(st.sampled_from(ALIASES), max_size=2),
)
endpoint = st.one_of(st.sampled_from(NAMES), st.integers(0, len(CORPUS) - 1))
relation_items = st.builds(lambda s, p, o: (s, p, o), endpoint, st.sampled_from(PREDICATES), endpoint)
declarations = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(0, len(CORPUS) - 1)),
        st.lists(entity_items, max_size=3),
        st.lists(relation_items, max_size=3),
    ),
    min_size=1,
    max_size=4,
)

PROBES = ["checkout latency", "Robert billing", "billing service Postgres", "green tea gw"]
_agents = itertools.count()
_loop = asyncio.new_event_loop()


async def _answers(engine: EmbeddedEngine, agent: str) -> list[Any]:
    out: list[Any] = []
    for q in PROBES:
        out.append(await call(engine, "recall", agent_id=agent, query=q))
        out.append(await call(engine, "reconstruct", agent_id=agent, query=q))
    for name in [*NAMES, *ALIASES]:
        out.append(await call(engine, "traverse", agent_id=agent, entity=name, max_hops=3))
    return out


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(decls=declarations)
def test_declare_then_retract_restores_every_answer(tmp_path_factory: Any, decls: list[Any]) -> None:
    async def run() -> None:
        data = tmp_path_factory.mktemp("prop") / "data"
        engine = EmbeddedEngine(load_settings(env={}, data_dir=data, sync="NORMAL"), embedder=HashEmbedder())
        await engine.start()
        try:
            agent = f"a{next(_agents)}"
            ids = [
                (await call(engine, "store", agent_id=agent, content=t, timestamp=T.format(1, i)))["id"]
                for i, t in enumerate(CORPUS)
            ]
            before = await _answers(engine, agent)

            def ep(v: Any) -> str:
                return v if isinstance(v, str) else f"mem:{ids[v]}"

            entities: set[int] = set()
            relations: set[int] = set()
            for anchor, ents, rels in decls:
                r = await call(
                    engine,
                    "declare_associations",
                    agent_id=agent,
                    anchor_ref="" if anchor is None else f"mem:{ids[anchor]}",
                    associations={
                        "entities": ents,
                        "relations": [{"subject": ep(s), "predicate": p, "object": ep(o)} for s, p, o in rels],
                    },
                )
                assert r["ok"] is True, r
                entities |= {e["id"] for e in r["entities"]}
                relations |= set(r["relations"])
            # entities registered as relation endpoints are found through traverse
            for name in NAMES:
                t = await call(engine, "traverse", agent_id=agent, entity=name, max_hops=0)
                entities |= {e["id"] for e in t["entities"]}
            r = await call(
                engine,
                "declare_associations",
                agent_id=agent,
                retract={"relations": sorted(relations), "entities": sorted(entities)},
            )
            assert r["ok"] is True, r
            assert await _answers(engine, agent) == before
            assert engine.associations.graph(agent) is None
        finally:
            await engine.close()

    _loop.run_until_complete(run())
