"""What the console's own reads cost on a fleet: ``list_agents`` (every agent, with counts and
last activity) and ``association_graph`` (one agent's whole graph), through dispatch on an
in-process embedded engine, now and ``as_of`` a point half-way through the log.

The fleet: ``--agents`` agents sharing ``--memories`` memories round-robin (no embedder: these
reads never embed); every memory declares two entities of its agent's pool of ``--entities``
names and one relation between them, so each agent's graph holds up to that many entities.

    python bench/console_reads.py                     # 500 agents, 20,000 memories, 40 entities each
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import load_settings
from memstream.api.tools.dispatch import dispatch
from memstream.api.tools.registry import Caller

CALLER = Caller(client_id="bench")


async def timed(run: Callable[[], Awaitable[dict[str, Any]]], rounds: int) -> dict[str, float]:
    ms = []
    for _ in range(rounds):
        t = time.perf_counter()
        body = await run()
        ms.append((time.perf_counter() - t) * 1000)
        assert body.get("ok") is not False, body
    ms.sort()
    return {"p50_ms": round(statistics.median(ms), 2), "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2)}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as root:
        settings = load_settings(env={}, data_dir=Path(root), sync="NORMAL", embedder="none")
        engine = EmbeddedEngine(settings)
        await engine.start()
        try:
            started = time.perf_counter()
            for base in range(0, args.memories, 256):  # concurrent batches: one commit per batch
                calls = []
                for i in range(base, min(base + 256, args.memories)):
                    agent = f"agent-{i % args.agents:05d}"
                    a, b = (i // args.agents) % args.entities, (i // args.agents + 1) % args.entities
                    rider = {
                        "entities": [{"name": f"entity {a}"}, {"name": f"entity {b}"}],
                        "relations": [{"subject": f"entity {a}", "predicate": "relates to", "object": f"entity {b}"}],
                    }
                    text = f"memory {i} of {agent} about entity {a} and entity {b}"
                    calls.append(
                        dispatch(engine, CALLER, "store", {"agent_id": agent, "content": text, "associations": rider})
                    )
                for body in await asyncio.gather(*calls):
                    assert body.get("result") == "stored", body
            fill_s = time.perf_counter() - started
            end = engine.log.end_offset()
            agent = "agent-00000"

            def tool(name: str, **call: Any) -> Callable[[], Awaitable[dict[str, Any]]]:
                return lambda: dispatch(engine, CALLER, name, call)

            listing = await tool("list_agents", limit=10_000)()
            graph = await tool("association_graph", agent_id=agent)()
            return {
                "agents": args.agents,
                "memories": args.memories,
                "events": end,
                "fill_s": round(fill_s, 1),
                "listed": listing["count"],
                "graph": {
                    "entities": graph["count"],
                    "relations": len(graph["relations"]),
                    "records": len(graph["records"]),
                },
                "list_agents": await timed(tool("list_agents", limit=10_000), args.rounds),
                "list_agents_as_of_half": await timed(tool("list_agents", limit=10_000, as_of=end // 2), args.rounds),
                "association_graph": await timed(tool("association_graph", agent_id=agent), args.rounds),
                "association_graph_as_of_half": await timed(
                    tool("association_graph", agent_id=agent, as_of=end // 2), args.rounds
                ),
            }
        finally:
            await engine.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=500)
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--entities", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=30)
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
