"""Reconstruct and traverse latency for ONE agent with N memories, N/10 entities and N/2 relations,
for memstream and, on the same workload in the same run, CPersona 2.6 (ratio CPersona / memstream).

Workload (deterministic, ``--seed``), the same for both systems:

* N synthetic memories ``"topic<t> item<i> about ent<e> and note<k>"`` (t = i mod 50, e = i mod E,
  E = N/10, k seeded): every text is distinct.
* N mention declarations, one per memory, anchored on it (``anchor_ref`` ``mem:<id>``), naming the
  entity ``ent<i mod E>``: every entity is mentioned by ~10 records.
* N/2 entity → entity relations (seeded random pairs, 6 predicates), 64 per declaration (CPersona's
  ``MAX_ITEMS`` bound per call).
* Queries: ``--queries`` reconstruct calls ``{query: "topic<t> ent<e>", top_k: 20, max_hops: 2}``
  (both systems' defaults, passed explicitly) and as many traverse calls ``{entity: "ent<e>",
  max_hops: 2, limit: 20}``, after ``--warmup`` untimed ones; p50/p99 of the whole call.

Embeddings are identical for both systems: the feature-hashed 64-dim bag of words
``bench-hash-64`` (the test suite's embedder: deterministic, ~µs per text, so the timings are the
stores', not a model's). memstream in process calls it directly; CPersona (and memstream over MCP)
get the same vectors from an ``/embed`` server (bench/embed_server.py's ``EmbedServer`` serving this
embedder, loopback, in a thread of this process, with TCP_NODELAY: see ``_NoDelayHandler``):
``CPERSONA_EMBEDDING_MODE=http``. The query embedding is inside the timed span over MCP (one /embed
round trip, ~0.5 ms), outside it nowhere else.

Phases, per run (everything in fresh temporary directories, every child process stopped):

1. memstream in process (``--sizes``): fill through ``EmbeddedEngine.submit`` (the command bus), then the
   queries through ``dispatch`` (no transport).
2. memstream over MCP stdio (``--mcp-sizes``, default the CPersona size): ``python -m
   memstream.api.cli mcp`` on the data dir phase 1 filled (after its checkpoint), with
   ``MEMSTREAM_EMBEDDING_URL`` pointing at the same /embed server, driven by the same MCP client
   as CPersona (bench/eval_recall.py's ``McpStdio``): the transport-matched comparison.
3. CPersona (``--cpersona-n``; 0 skips): a fresh database filled with the calls ``store`` and
   ``declare_associations`` (``--cpersona-fill``, below), then the same queries with CPersona's
   defaults over MCP stdio; then the same database served again with
   ``CPERSONA_RECONSTRUCT_ADJACENCY_SECONDS=0`` and the same queries (the fill stores everything
   from one source within seconds, so the default "adjacent in time, same source" key folds every
   answer into one or two items; memstream has no such key: the second pass answers in its shape).

CPersona fill (``--cpersona-fill``):

* ``mcp`` (default): the calls over MCP stdio to the server that then answers the queries
  (``--cpersona-concurrency`` requests in flight). ~11 ms per store and ~8 ms per mention here
  (the transport's per-call cost, flat in N), so about an hour at 100k.
* ``bulk``: the same calls, in the same order, written as JSON lines (each store with the vector
  the /embed server would answer) and applied by bench/cpersona/bulk_fill.py under CPersona's own
  interpreter through CPersona's tool handlers in process (its store, its declaration, its FTS
  triggers and block tasks); then a fresh server answers the queries, with
  ``CPERSONA_CALIBRATE_ON_MODEL_CHANGE=false`` so it is as uncalibrated as the server that fills
  over MCP (that one calibrated at startup on an empty database). Same rows as the MCP fill
  (bench/cpersona/verify_bulk_fill.py, whose command and result the report names); the memories'
  wall-clock stamps are closer together, which the default adjacency key reads (the
  adjacency-off pass does not). ~1.5 ms per store, under 1 ms per declaration: ~4 min at 100k.

Ratios are reported at the size both systems ran.
Order: memstream sizes up to the CPersona size, then CPersona, then the larger memstream sizes.

Usage (repo root, project venv)::

    python bench/reconstruct_latency.py --sizes 5000,100000 --cpersona-n 5000 --queries 300   # issue 4
    python bench/reconstruct_latency.py --sizes 100000 --mcp-sizes 100000 --cpersona-n 100000 \
        --cpersona-fill bulk --queries 300 --warmup 20 --out bench/results/reconstruct_latency_100k.json
    python bench/reconstruct_latency.py --sizes 1000 --cpersona-n 0               # a quick check

Results: JSON (``--out``, default bench/results/reconstruct_latency.json, rewritten after every
phase) and a table on stdout. Other jobs share a small machine: the load average is sampled
around every phase, so figures are upper bounds under that load.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads

import argparse
import asyncio
import hashlib
import json
import platform
import random
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from cpersona_bulk import (
    SERVE_AS_MCP_FILLED,
    VERIFY_COMMAND,
    VERIFY_RESULT,
    cpersona_python,
    declare_line,
    run_bulk_fill,
    store_line,
    write_ops,
)
from embed_server import EmbedServer, _Handler, serve_in_thread
from eval_recall import DEFAULT_CPERSONA, McpStdio, _dist_version, cpersona_env

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import load_settings
from memstream.api.tools.dispatch import dispatch
from memstream.api.tools.registry import Caller
from memstream.streams import commands as c
from memstream.streams.events import Actor, Embedding, Scope, new_id, utcnow

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "bench" / "results" / "reconstruct_latency.json"
_WORD = re.compile(r"\w+")
PREDICATES = ["depends on", "owns", "hosts", "runs behind", "reports to", "replaces"]
AGENT = "bench"
TOP_K, HOPS, TRAVERSE_LIMIT, REL_PER_CALL = 20, 2, 20, 64


def log(msg: str) -> None:
    print(f"[reconstruct-latency {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a child process (Linux /proc), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


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


class _NoDelayHandler(_Handler):
    """bench/embed_server.py's handler with TCP_NODELAY: it writes the headers and the body in two
    sends, so with Nagle on, every /embed answer waited for the client's delayed ACK (~40 ms here,
    measured: p50 44 ms per request vs 0.55 ms with this flag), which would swamp a reconstruct."""

    disable_nagle_algorithm = True


# =============================================================================================
# Workload
# =============================================================================================


@dataclass
class Workload:
    n: int
    entities: int
    texts: list[str]
    mention: list[str]  # memory i mentions this entity
    relations: list[dict[str, str]]
    reconstruct_queries: list[str]
    traverse_entities: list[str]


def workload(n: int, seed: int, count: int) -> Workload:
    """The same memories, mentions, relations and queries for every system at size n."""
    rng = random.Random(seed)
    e_count = max(1, n // 10)
    texts = [f"topic{i % 50} item{i} about ent{i % e_count} and note{rng.randrange(1000)}" for i in range(n)]
    relations = [
        {
            "subject": f"ent{rng.randrange(e_count)}",
            "predicate": rng.choice(PREDICATES),
            "object": f"ent{rng.randrange(e_count)}",
        }
        for _ in range(n // 2)
    ]
    q = random.Random(seed + 1)
    recon = []
    for _ in range(count):
        e = q.randrange(e_count)
        recon.append(f"topic{q.randrange(50)} ent{e}")
    trav = [f"ent{q.randrange(e_count)}" for _ in range(count)]
    return Workload(n, e_count, texts, [f"ent{i % e_count}" for i in range(n)], relations, recon, trav)


def reconstruct_args(query: str) -> dict[str, Any]:
    return {"agent_id": AGENT, "query": query, "top_k": TOP_K, "max_hops": HOPS}


def traverse_args(entity: str) -> dict[str, Any]:
    return {"agent_id": AGENT, "entity": entity, "max_hops": HOPS, "limit": TRAVERSE_LIMIT}


# =============================================================================================
# Measurement (shared by every system)
# =============================================================================================


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(p99 * 1000, 3),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 3),
        "n": len(ordered),
    }


Call = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


async def measure(
    call: Call, wl: Workload, warmup: int, cpu: Callable[[], float | None] | None = None
) -> dict[str, Any]:
    """Warm-up then timed reconstruct calls, then the same for traverse; the answers' shapes."""
    out: dict[str, Any] = {}
    for tool, queries, make in (
        ("reconstruct", wl.reconstruct_queries, reconstruct_args),
        ("traverse", wl.traverse_entities, traverse_args),
    ):
        for q in queries[:warmup]:
            await call(tool, make(q))
        samples: list[float] = []
        items: list[int] = []
        claims: list[int] = []
        nbytes: list[int] = []
        shortfall: Counter[str] = Counter()
        errors = 0
        c0 = cpu() if cpu else None
        for q in queries[warmup:]:
            t0 = time.perf_counter()
            body = await call(tool, make(q))
            samples.append(time.perf_counter() - t0)
            if body.get("ok") is False:
                errors += 1
                continue
            nbytes.append(len(json.dumps(body, separators=(",", ":"))))
            if tool == "reconstruct":
                its = body.get("items") or []
                items.append(len(its))
                claims.append(sum(len(it.get("claims") or [it]) for it in its))
                shortfall[str(body.get("shortfall_reason"))] += 1
            else:
                items.append(len(body.get("entities") or []))
                claims.append(len(body.get("relations") or []))
        c1 = cpu() if cpu else None
        r: dict[str, Any] = {
            **_percentiles(samples),
            "mean_returned": round(statistics.fmean(items), 2) if items else None,
            ("mean_claims" if tool == "reconstruct" else "mean_relations"): (
                round(statistics.fmean(claims), 2) if claims else None
            ),
            "mean_response_bytes": round(statistics.fmean(nbytes)) if nbytes else None,
            "errors": errors,
        }
        if tool == "reconstruct":
            r["shortfall_reasons"] = dict(shortfall)
        if c0 is not None and c1 is not None:
            r["server_cpu_ms_per_call"] = round((c1 - c0) * 1000 / len(samples), 2)
        out[tool] = r
    return out


# =============================================================================================
# memstream in process
# =============================================================================================


def _envelope() -> dict[str, Any]:
    return {
        "command_id": new_id(),
        "scope": Scope(agent_id=AGENT),
        "actor": Actor(client_id="bench", agent_id=AGENT),
        "received_at": utcnow(),
    }


async def memstream_fill(engine: EmbeddedEngine, wl: Workload) -> dict[str, Any]:
    emb = engine.embedder
    started = time.perf_counter()
    ids: list[int] = []
    outcomes: Counter[str] = Counter()
    for start in range(0, wl.n, 256):
        texts = wl.texts[start : start + 256]
        for text, vec in zip(texts, emb.embed(texts), strict=True):
            cmd = c.StoreMemory(**_envelope(), content=text, embedding=Embedding.from_vector(emb.model_id, vec))
            res = await engine.submit(cmd)
            outcomes[str(res.outcome.result)] += 1
            ids.append(res.outcome.id)  # type: ignore[arg-type]
    stored = time.perf_counter() - started
    for ident, ent in zip(ids, wl.mention, strict=True):
        cmd = c.DeclareAssociations(
            **_envelope(), anchor_ref=f"mem:{ident}", associations={"entities": [{"name": ent}]}
        )
        await engine.submit(cmd)
    mentioned = time.perf_counter() - started - stored
    for start in range(0, len(wl.relations), REL_PER_CALL):
        rel = wl.relations[start : start + REL_PER_CALL]
        await engine.submit(c.DeclareAssociations(**_envelope(), associations={"relations": rel}))
    related = time.perf_counter() - started - stored - mentioned
    return {
        "store_s": round(stored, 2),
        "store_per_s": round(wl.n / stored),
        "mentions_s": round(mentioned, 2),
        "relations_s": round(related, 2),
        "store_outcomes": dict(outcomes),
    }


async def memstream_in_process(data_dir: Path, wl: Workload, warmup: int) -> dict[str, Any]:
    settings = load_settings(env={}, data_dir=data_dir, sync="NORMAL")
    engine = EmbeddedEngine(settings, embedder=HashedEmbedder())  # type: ignore[arg-type]
    await engine.start()
    caller = Caller(client_id="bench")

    async def call(tool: str, args: dict[str, Any]) -> dict[str, Any]:
        return await dispatch(engine, caller, tool, args)

    try:
        r: dict[str, Any] = {"loadavg_before": loadavg()}
        r["fill"] = await memstream_fill(engine, wl)
        r["loadavg_after_fill"] = loadavg()
        r.update(await measure(call, wl, warmup))
        r["loadavg_after"] = loadavg()
    finally:
        await engine.close()  # writes the checkpoint the MCP phase starts from
    return r


# =============================================================================================
# Over MCP stdio: memstream's `mcp` and CPersona, one client
# =============================================================================================


def mcp_call(client: McpStdio) -> Call:
    async def call(tool: str, args: dict[str, Any]) -> dict[str, Any]:
        return client.call_tool(tool, args)  # blocking on purpose: one request in flight

    return call


def memstream_mcp(data_dir: Path, wl: Workload, warmup: int, embed_url: str, work: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_")}
    env.update(
        {
            "MEMSTREAM_EMBEDDING_URL": embed_url,
            "MEMSTREAM_EMBEDDING_MODEL_ID": HashedEmbedder.model_id,
            "MEMSTREAM_EMBEDDING_DIM": str(HashedEmbedder.dim),
        }
    )
    argv = [sys.executable, "-m", "memstream.api.cli", "--log-level", "WARNING", "mcp", "--data-dir", str(data_dir)]
    r: dict[str, Any] = {
        "loadavg_before": loadavg(),
        "argv": "python -m memstream.api.cli mcp --data-dir <phase-1 dir>",
    }
    t0 = time.perf_counter()
    client = McpStdio(argv, env, work, work / f"memstream-mcp-{wl.n}.stderr")
    try:
        init = client.handshake()
        r["server_info"] = init.get("serverInfo")
        client.call_tool("traverse", traverse_args(wl.traverse_entities[0]), timeout=1800)  # ready
        r["ready_s"] = round(time.perf_counter() - t0, 2)
        r.update(asyncio.run(measure(mcp_call(client), wl, warmup, lambda: proc_cpu_s(client.proc.pid))))
        r["loadavg_after"] = loadavg()
    finally:
        client.close()
    return r


def _parallel(fn: Callable[[int], dict[str, Any]], count: int, concurrency: int, label: str) -> list[dict[str, Any]]:
    done = 0
    lock = threading.Lock()
    t0 = time.perf_counter()

    def one(i: int) -> dict[str, Any]:
        nonlocal done
        try:
            body = fn(i)
        except Exception as exc:  # reported, never silent
            body = {"ok": False, "error": str(exc)}
        with lock:
            done += 1
            if done % 500 == 0:
                log(f"{label}: {done}/{count} ({done / (time.perf_counter() - t0):.1f}/s)")
        return body

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        return list(pool.map(one, range(count)))


def store_args(wl: Workload, i: int) -> dict[str, Any]:
    return {"agent_id": AGENT, "content": wl.texts[i]}


def mention_args(wl: Workload, i: int, anchor_ref: str | None) -> dict[str, Any]:
    """Memory i's mention declaration (``anchor_ref`` None: bulk_fill anchors it by key)."""
    args: dict[str, Any] = {"agent_id": AGENT, "associations": {"entities": [{"name": wl.mention[i]}]}}
    if anchor_ref is not None:
        args["anchor_ref"] = anchor_ref
    return args


def relation_args(wl: Workload, start: int) -> dict[str, Any]:
    return {"agent_id": AGENT, "associations": {"relations": wl.relations[start : start + REL_PER_CALL]}}


def cpersona_fill_mcp(client: McpStdio, wl: Workload, concurrency: int) -> dict[str, Any]:
    """The fill through MCP stdio: N stores, N mention declarations, N/2 relations in calls of 64."""
    pid = client.proc.pid
    cpu0 = proc_cpu_s(pid)
    fill: dict[str, Any] = {"method": "mcp", "concurrency": concurrency}
    t0 = time.perf_counter()
    stores = _parallel(lambda i: client.call_tool("store", store_args(wl, i)), wl.n, concurrency, "cpersona store")
    fill["store_s"] = round(time.perf_counter() - t0, 2)
    fill["store_per_s"] = round(wl.n / fill["store_s"], 1)
    fill["store_outcomes"] = dict(Counter(str(b.get("result") or b.get("ok")) for b in stores))
    fill["stored_embedded"] = sum(1 for b in stores if b.get("embedded") is True)
    bad = [b for b in stores if b.get("result") != "stored"]
    if bad:
        raise RuntimeError(f"cpersona store: {len(bad)} not stored, first {json.dumps(bad[0])[:300]}")
    log(f"cpersona: stored {wl.n} in {fill['store_s']} s")
    t1 = time.perf_counter()
    decl = _parallel(
        lambda i: client.call_tool("declare_associations", mention_args(wl, i, f"mem:{stores[i]['id']}")),
        wl.n,
        concurrency,
        "cpersona mentions",
    )
    fill["mentions_s"] = round(time.perf_counter() - t1, 2)
    fill["mention_errors"] = sum(1 for b in decl if b.get("ok") is False)
    fill["mentions_declared"] = sum(int(b.get("mentions") or 0) for b in decl)
    fill["mentions_dropped"] = sum(len(b.get("dropped") or []) for b in decl)
    log(f"cpersona: mentions in {fill['mentions_s']} s")
    t2 = time.perf_counter()
    rel_bodies = [
        client.call_tool("declare_associations", relation_args(wl, s))
        for s in range(0, len(wl.relations), REL_PER_CALL)
    ]
    fill["relations_s"] = round(time.perf_counter() - t2, 2)
    fill["relation_errors"] = sum(1 for b in rel_bodies if b.get("ok") is False)
    fill["relations_declared"] = sum(len(b.get("relations") or []) for b in rel_bodies)
    fill["relations_dropped"] = sum(len(b.get("dropped") or []) for b in rel_bodies)
    cpu1 = proc_cpu_s(pid)
    if cpu0 is not None and cpu1 is not None:
        fill["cpersona_cpu_s"] = round(cpu1 - cpu0, 1)
    return fill


def write_cpersona_ops(wl: Workload, path: Path) -> int:
    """The MCP fill's calls, in its order, as bulk_fill.py lines; each store carries the vector the
    /embed server would have answered for its text (the same embedder, the same serialisation)."""
    emb = HashedEmbedder()

    def lines() -> Any:
        for start in range(0, wl.n, 1024):
            vecs = emb.embed(wl.texts[start : start + 1024])
            for j, vec in enumerate(vecs):
                yield store_line(store_args(wl, start + j), key=f"m{start + j}", vector=vec)
        for i in range(wl.n):
            yield declare_line(mention_args(wl, i, None), anchor_key=f"m{i}")
        for s in range(0, len(wl.relations), REL_PER_CALL):
            yield declare_line(relation_args(wl, s))

    return write_ops(path, lines())


def cpersona_fill_bulk(args: argparse.Namespace, wl: Workload, env: dict[str, str], work: Path) -> dict[str, Any]:
    """The same calls through bench/cpersona/bulk_fill.py (CPersona's handlers, in its own process)."""
    ops = work / f"cpersona-ops-{wl.n}.jsonl"
    t0 = time.perf_counter()
    count = write_cpersona_ops(wl, ops)
    write_s = time.perf_counter() - t0
    log(f"cpersona: bulk fill of {count} calls")
    body = run_bulk_fill(cpersona_python(args.cpersona), ops, env, work, work / "cpersona-bulk-fill.stderr")
    ops.unlink(missing_ok=True)
    if body["exit_status"] != 0:
        raise RuntimeError(f"bulk fill: not every call was accepted: {json.dumps(body['first_failures'])[:600]}")
    return {
        "method": "bulk",
        "ops_written_s": round(write_s, 2),
        "bulk_fill_wall_s": body["wall_s"],
        "store_s": body["store_s"],
        "store_per_s": body["stores_per_s"],
        "store_outcomes": body["store_results"],
        "declare_s": body["declare_s"],
        "declare_outcomes": body["declare_results"],
        "mentions_declared": body["mentions_declared"],
        "relations_declared": body["relations_declared"],
        "items_dropped": body["items_dropped"],
        "task_drain_s": body["task_drain_s"],
        "bulk_fill_total_s": body["total_s"],
        "counters": body["counters"],
        "verification": {"command": VERIFY_COMMAND, "result": VERIFY_RESULT},
    }


def cpersona(args: argparse.Namespace, wl: Workload, warmup: int, embed_url: str, work: Path) -> dict[str, Any]:
    if not Path(args.cpersona).exists():
        raise FileNotFoundError(f"{args.cpersona} not found")
    home = work / "cpersona-home"
    (home / "data").mkdir(parents=True, exist_ok=True)
    env = cpersona_env(home, embed_url, {})
    load_before = loadavg()
    fill: dict[str, Any] | None = None
    if args.cpersona_fill == "bulk":
        fill = cpersona_fill_bulk(args, wl, env, work)
        env = cpersona_env(home, embed_url, SERVE_AS_MCP_FILLED)
    r: dict[str, Any] = {
        "version": _dist_version(args.cpersona, "cpersona"),
        "fill_method": args.cpersona_fill,
        "concurrency": args.cpersona_concurrency,
        "env": {k: v for k, v in env.items() if k.startswith("CPERSONA_") and k != "CPERSONA_DB_PATH"},
        "loadavg_before": load_before,
    }
    client = McpStdio([args.cpersona], env, home, work / "cpersona.stderr")
    try:
        init = client.handshake()
        r["mcp_server_info_version"] = (init.get("serverInfo") or {}).get("version")
        pid = client.proc.pid
        if fill is None:
            fill = cpersona_fill_mcp(client, wl, args.cpersona_concurrency)
        r["fill"] = fill
        r["loadavg_after_fill"] = loadavg()
        log(f"cpersona: fill {fill}")
        r.update(asyncio.run(measure(mcp_call(client), wl, warmup, lambda: proc_cpu_s(pid))))
        r["loadavg_after"] = loadavg()
    finally:
        client.close()
    if args.cpersona_adjacency_off:
        # The fill stores every memory from one source within seconds, so CPersona's default
        # "adjacent in time, same source" key (CPERSONA_RECONSTRUCT_ADJACENCY_SECONDS=60) folds a
        # whole answer into one item; memstream has no such key. The same database, served again
        # with the key off, answers in memstream's shape.
        extra = {"CPERSONA_RECONSTRUCT_ADJACENCY_SECONDS": "0"}
        off: dict[str, Any] = {"env": extra, "loadavg_before": loadavg()}
        client = McpStdio([args.cpersona], cpersona_env(home, embed_url, extra), home, work / "cpersona-adj0.stderr")
        try:
            client.handshake()
            off.update(asyncio.run(measure(mcp_call(client), wl, warmup, lambda: proc_cpu_s(client.proc.pid))))
            off["loadavg_after"] = loadavg()
        finally:
            client.close()
        r["adjacency_off"] = off
    return r


# =============================================================================================
# Report
# =============================================================================================


def ratios(report: dict[str, Any]) -> dict[str, Any]:
    """CPersona's latency over memstream's at the size both ran, per tool and percentile."""
    cp = report.get("cpersona") or {}
    n = cp.get("n_memories")
    out: dict[str, Any] = {}
    if not n or "reconstruct" not in cp:
        return out
    for cp_label, cpr in (("cpersona_defaults", cp), ("cpersona_adjacency_off", cp.get("adjacency_off") or {})):
        for label, m in (
            ("over_memstream_mcp_stdio", next((r for r in report["memstream_mcp"] if r["n_memories"] == n), None)),
            ("over_memstream_in_process", next((r for r in report["memstream"] if r["n_memories"] == n), None)),
        ):
            if not m or "reconstruct" not in m or "reconstruct" not in cpr:
                continue
            out[f"{cp_label}_{label}"] = {
                tool: {p: round(cpr[tool][f"{p}_ms"] / m[tool][f"{p}_ms"], 1) for p in ("p50", "p99")}
                for tool in ("reconstruct", "traverse")
                if tool in m and tool in cpr
            }
    return {str(n): out} if out else {}


def table(report: dict[str, Any]) -> str:
    lines = [
        "| system | memories | reconstruct p50 / p99 ms | traverse p50 / p99 ms | items / claims per reconstruct |",
        "|---|---|---|---|---|",
    ]
    rows = [("memstream (in-process dispatch)", r) for r in report["memstream"]]
    rows += [("memstream (MCP stdio)", r) for r in report["memstream_mcp"]]
    cp = report.get("cpersona") or {}
    if "reconstruct" in cp:
        rows.append((f"CPersona {cp.get('version')} (MCP stdio, defaults)", cp))
    if "reconstruct" in (cp.get("adjacency_off") or {}):
        rows.append(
            (
                f"CPersona {cp.get('version')} (MCP stdio, adjacency key off)",
                {**cp["adjacency_off"], "n_memories": cp["n_memories"]},
            )
        )
    for name, r in rows:
        if "reconstruct" not in r:
            continue
        rc, tv = r["reconstruct"], r["traverse"]
        lines.append(
            f"| {name} | {r['n_memories']:,} | {rc['p50_ms']:.2f} / {rc['p99_ms']:.2f} | "
            f"{tv['p50_ms']:.2f} / {tv['p99_ms']:.2f} | {rc['mean_returned']} / {rc['mean_claims']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="5000,100000", help="memstream sizes (entities N/10, relations N/2)")
    ap.add_argument("--n", type=int, default=None, help="one memstream size, CPersona skipped (old interface)")
    ap.add_argument("--cpersona-n", type=int, default=5000, help="CPersona size (0 skips CPersona)")
    ap.add_argument(
        "--mcp-sizes", default=None, help="memstream sizes also measured over MCP stdio (default: the CPersona size)"
    )
    ap.add_argument("--cpersona-concurrency", type=int, default=4, help="MCP fill: requests in flight")
    ap.add_argument(
        "--cpersona-fill",
        choices=("mcp", "bulk"),
        default="mcp",
        help="mcp: store/declare_associations over MCP stdio; bulk: the same calls through "
        "bench/cpersona/bulk_fill.py (CPersona's own handlers in process; verified by " + VERIFY_COMMAND + ")",
    )
    ap.add_argument(
        "--no-cpersona-adjacency-off",
        dest="cpersona_adjacency_off",
        action="store_false",
        help="skip the second CPersona pass with CPERSONA_RECONSTRUCT_ADJACENCY_SECONDS=0",
    )
    ap.add_argument("--cpersona", default=DEFAULT_CPERSONA)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    if args.n is not None:
        args.sizes, args.cpersona_n = str(args.n), 0
    sizes = sorted({int(x) for x in args.sizes.split(",") if x})
    cp_n = args.cpersona_n
    mcp_sizes = {int(x) for x in (args.mcp_sizes if args.mcp_sizes is not None else str(cp_n)).split(",") if x}
    mcp_sizes = {n for n in mcp_sizes if n in sizes and n > 0}
    if cp_n and cp_n not in sizes:
        sizes = sorted({*sizes, cp_n})  # the ratio needs memstream at the CPersona size
    count = args.warmup + args.queries

    t_all = time.perf_counter()
    report: dict[str, Any] = {
        "bench": "reconstruct_latency",
        "command": "python bench/reconstruct_latency.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "workload": "N memories, N/10 entities (one mention per memory), N/2 entity-entity relations; "
        f"reconstruct top_k {TOP_K} max_hops {HOPS}; traverse max_hops {HOPS} limit {TRAVERSE_LIMIT}",
        "embedding": f"{HashedEmbedder.model_id} (feature-hashed, dim {HashedEmbedder.dim}) for both systems; "
        "memstream in process calls it directly, CPersona and memstream-over-MCP through one /embed server",
        "queries": args.queries,
        "warmup": args.warmup,
        "seed": args.seed,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "loadavg_start": loadavg()},
        "phase_order": [],
        "memstream": [],
        "memstream_mcp": [],
        "cpersona": None,
        "cpersona_fill": {
            "method": args.cpersona_fill,
            "verification_command": VERIFY_COMMAND,
            "verification_result": VERIFY_RESULT,
        },
    }

    def save() -> None:
        report["machine"]["loadavg_now"] = loadavg()
        report["seconds"] = round(time.perf_counter() - t_all, 1)
        report["ratios_cpersona_over_memstream"] = ratios(report)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=1) + "\n")
        os.replace(tmp, args.out)

    work = Path(tempfile.mkdtemp(prefix="memstream-reconstruct-bench-"))
    embed = EmbedServer(HashedEmbedder(), "127.0.0.1", 0)  # type: ignore[arg-type]
    embed.RequestHandlerClass = _NoDelayHandler
    serve_in_thread(embed)
    try:

        def memstream_size(n: int) -> None:
            wl = workload(n, args.seed, count)
            data_dir = work / f"data-{n}"
            log(f"memstream {n}: in process")
            report["phase_order"].append(f"memstream in-process {n}")
            t = time.perf_counter()
            r = {"n_memories": n, "n_entities": wl.entities, "n_relations": len(wl.relations)}
            r.update(asyncio.run(memstream_in_process(data_dir, wl, args.warmup)))
            r["phase_s"] = round(time.perf_counter() - t, 1)
            report["memstream"].append(r)
            save()
            log(f"memstream {n}: reconstruct {r['reconstruct']} traverse {r['traverse']}")
            if n in mcp_sizes:
                log(f"memstream {n}: MCP stdio")
                report["phase_order"].append(f"memstream mcp {n}")
                m = {"n_memories": n, **memstream_mcp(data_dir, wl, args.warmup, embed.url, work)}
                report["memstream_mcp"].append(m)
                save()
                log(f"memstream mcp {n}: reconstruct {m['reconstruct']} traverse {m['traverse']}")
            shutil.rmtree(data_dir, ignore_errors=True)

        for n in [n for n in sizes if not cp_n or n <= cp_n]:
            memstream_size(n)
        if cp_n:
            log(f"cpersona {cp_n}")
            report["phase_order"].append(f"cpersona {cp_n}")
            wl = workload(cp_n, args.seed, count)
            t = time.perf_counter()
            try:
                cp = cpersona(args, wl, args.warmup, embed.url, work)
            except Exception as exc:
                log(f"cpersona failed: {type(exc).__name__}: {exc}")
                cp = {"error": f"{type(exc).__name__}: {exc}"}
            report["cpersona"] = {
                "n_memories": cp_n,
                "n_entities": wl.entities,
                "n_relations": len(wl.relations),
                **cp,
                "phase_s": round(time.perf_counter() - t, 1),
            }
            save()
        for n in [n for n in sizes if cp_n and n > cp_n]:
            memstream_size(n)
        report["embed_server"] = embed.counters()
    finally:
        embed.shutdown()
        embed.server_close()
        save()
        shutil.rmtree(work, ignore_errors=True)
    print(table(report))
    if report.get("ratios_cpersona_over_memstream"):
        print("\nratios (CPersona / memstream) " + json.dumps(report["ratios_cpersona_over_memstream"]))
    log(f"wrote {args.out} in {report['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
