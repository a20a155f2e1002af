"""Reconstruct and traverse latency for ONE agent with N memories, N/10 entities and N/2 relations.

What runs (in process, no HTTP; everything under a fresh temporary data dir):

1. Fill: N synthetic memories (``"topic<t> item<i> about ent<e> ..."``) stored through the engine's
   command bus with a feature-hashed 64-dim embedding (deterministic and instant, so the timing is
   memstream's, not a model's). Then one declaration per memory, anchored on it, naming the
   entity ``ent<i mod E>`` (E = N/10): every entity is mentioned by ~10 records. Then N/2
   entity → entity relations (seeded random pairs, 6 predicates), 64 per declaration.
2. Measure: ``--queries`` reconstruct calls (``"topic<t> ent<e>"``, default arguments: top_k 20,
   max_hops 2) and as many traverse calls (``entity="ent<e>"``, ``max_hops`` 2, limit 20) through
   ``dispatch``, after ``--warmup`` untimed ones; p50/p99 of the whole dispatch call.

Usage (repo root, project venv)::

    python bench/reconstruct_latency.py               # N = 100000 (slow fill: ~N+N/128 commands)
    python bench/reconstruct_latency.py --n 1000      # a quick check

Results: JSON on stdout (``--out`` also writes it). Other jobs share a small machine: the load
average is sampled before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from memstream.api.engine import Engine
from memstream.api.settings import load_settings
from memstream.api.tools.dispatch import dispatch
from memstream.api.tools.registry import Caller
from memstream.streams import commands as c
from memstream.streams.events import Actor, Embedding, Scope, new_id, utcnow

_WORD = re.compile(r"\w+")
PREDICATES = ["depends on", "owns", "hosts", "runs behind", "reports to", "replaces"]
AGENT = "bench"


class HashedEmbedder:
    """Feature-hashed bag of words (the test suite's embedder): fast and deterministic."""

    model_id = "bench-hash-64"
    dim = 64

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")
                out[i, h % self.dim] += 1.0 if (h >> 16) & 1 else -1.0
            norm = np.linalg.norm(out[i])
            out[i] = out[i] / norm if norm else 1.0 / np.sqrt(self.dim)
        return out


def _envelope() -> dict[str, Any]:
    return {
        "command_id": new_id(),
        "scope": Scope(agent_id=AGENT),
        "actor": Actor(client_id="bench", agent_id=AGENT),
        "received_at": utcnow(),
    }


async def fill(engine: Engine, n: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    entities = max(1, n // 10)
    emb = engine.embedder
    started = time.perf_counter()
    ids: list[int] = []
    batch = 256
    for start in range(0, n, batch):
        texts = [
            f"topic{i % 50} item{i} about ent{i % entities} and note{rng.randrange(1000)}"
            for i in range(start, min(n, start + batch))
        ]
        vectors = emb.embed(texts)
        for text, vec in zip(texts, vectors, strict=True):
            cmd = c.StoreMemory(**_envelope(), content=text, embedding=Embedding.from_vector(emb.model_id, vec))
            ids.append((await engine.submit(cmd)).outcome.id)  # type: ignore[arg-type]
    stored = time.perf_counter() - started
    for i, ident in enumerate(ids):
        cmd = c.DeclareAssociations(
            **_envelope(), anchor_ref=f"mem:{ident}", associations={"entities": [{"name": f"ent{i % entities}"}]}
        )
        await engine.submit(cmd)
    mentioned = time.perf_counter() - started - stored
    relations = [
        {
            "subject": f"ent{rng.randrange(entities)}",
            "predicate": rng.choice(PREDICATES),
            "object": f"ent{rng.randrange(entities)}",
        }
        for _ in range(n // 2)
    ]
    for start in range(0, len(relations), 64):
        cmd = c.DeclareAssociations(**_envelope(), associations={"relations": relations[start : start + 64]})
        await engine.submit(cmd)
    related = time.perf_counter() - started - stored - mentioned
    return {"store_s": round(stored, 2), "mentions_s": round(mentioned, 2), "relations_s": round(related, 2)}


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50_ms": round(statistics.median(ordered) * 1000, 3), "p99_ms": round(p99 * 1000, 3), "n": len(ordered)}


async def measure(engine: Engine, n: int, queries: int, warmup: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed + 1)
    entities = max(1, n // 10)
    caller = Caller(client_id="bench")
    out: dict[str, Any] = {}
    for tool in ("reconstruct", "traverse"):
        samples: list[float] = []
        returned: list[int] = []
        for q in range(warmup + queries):
            e = rng.randrange(entities)
            if tool == "reconstruct":
                args: dict[str, Any] = {"agent_id": AGENT, "query": f"topic{rng.randrange(50)} ent{e}"}
            else:
                args = {"agent_id": AGENT, "entity": f"ent{e}", "max_hops": 2, "limit": 20}
            t0 = time.perf_counter()
            body = await dispatch(engine, caller, tool, args)
            elapsed = time.perf_counter() - t0
            assert body.get("ok") is not False, body
            if q >= warmup:
                samples.append(elapsed)
                returned.append(len(body.get("items", body.get("entities", []))))
        out[tool] = {**_percentiles(samples), "mean_returned": round(sum(returned) / max(1, len(returned)), 2)}
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="memories (entities N/10, relations N/2)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="memstream-reconstruct-bench-") as tmp:
        settings = load_settings(env={}, data_dir=Path(tmp) / "data", sync="NORMAL")
        engine = Engine(settings, embedder=HashedEmbedder())  # type: ignore[arg-type]
        await engine.start()
        try:
            load_before = os.getloadavg()
            filled = await fill(engine, args.n, args.seed)
            result = {
                "n_memories": args.n,
                "n_entities": max(1, args.n // 10),
                "n_relations": args.n // 2,
                "fill": filled,
                **await measure(engine, args.n, args.queries, args.warmup, args.seed),
                "loadavg_before": [round(x, 2) for x in load_before],
                "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            }
        finally:
            await engine.close()
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
