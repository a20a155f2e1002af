"""Recall latency for ONE agent at 10k, 100k and 1M memories (``--sizes``), with the query
embedding excluded and included, plus store->visible latency, and CPersona 2.6 on the same workload.

What runs, per size N (everything on 127.0.0.1, every server stopped at the end):

1. Fill: N distinct WordNet 3.0 definitions go into a fresh data dir as ``StoreMemory`` commands
   through ``EmbeddedCommandBus`` (no HTTP), each carrying its precomputed MiniLM-L6 int8 vector
   (``Embedding.from_vector(model_id, vec)``, model_id = the default embedder's). Vectors: the
   117,659 real WordNet definition vectors and 2,000 usage-example query vectors that
   ``bench/vector_search.py`` caches (``real_vectors()``, ~/.cache/memstream-bench); at 10k and
   100k every vector is real. Past ~116.5k (1M only) rows are perturbed copies of real rows with
   the text suffixed (``vector_search.py``'s recipe).
2. Fold: ``EmbeddedEngine(settings).start()`` on that dir (restore + catch-up of the whole log, no
   checkpoint yet: the store->visible cost at scale for a cold engine); timed. Then the first
   recall, timed alone.
3. Embedding EXCLUDED (in-process): ``dispatch(engine, Caller(), "recall", {agent_id, query,
   limit: 10})`` with an embedder whose ``embed()`` returns the cached vector of the query text (a
   dict lookup, ~µs). The timed span is the whole dispatch call (validation, read catch-up check,
   vector window scan, lexical search, fusion, gates, answer shaping), not only the pipeline.
   Then ``EmbeddedEngine.close()`` (writes the checkpoint; timed) and a second ``EmbeddedEngine.start()`` on the
   same dir: the restart from that checkpoint (timed, plus its first recall).
4. Embedding INCLUDED (HTTP): ``python -m memstream.api.cli serve`` on the same dir with the
   default (local) embedder (its time to ready is a second restart from the checkpoint, process
   start included); ``POST /v1/tools/recall`` from one client, one request in flight.
5. Store->visible over HTTP: ``POST /v1/tools/store`` of a definition not in the corpus, then
   ``POST /v1/tools/recall`` with that text until a row carries its id; time from the store's
   send to the answer that shows it (100 trials).
6. CPersona 2.6 (``--cpersona-docs``, a comma list; 10k by default): ONE CPersona database is
   filled in increments through MCP stdio ``store`` (bench/eval_recall.py's driver, ``--cpersona-
   concurrency`` requests in flight) up to each size in turn, the same first texts memstream
   stored, and at each size the same queries go through ``recall`` (which includes the query
   embedding: one /embed round trip). CPersona embeds through bench/embed_server.py (same model).
   With ``--cpersona-embed cache`` (default) that server answers the corpus texts from the
   precomputed vectors memstream's fill uses (the same model's, from the same cache) and embeds
   every other text (the queries) live, so the fill measures CPersona and not our embedder;
   ``live`` embeds everything. Ratios (CPersona / memstream) are reported at every size both ran.
   ``--cpersona-fill bulk`` puts each increment in through bench/cpersona/bulk_fill.py instead
   (the same ``store`` calls through CPersona's own handlers in its own interpreter, each with
   the vector the /embed server would answer; no server running), then starts a fresh server
   with ``CPERSONA_CALIBRATE_ON_MODEL_CHANGE=false`` (as uncalibrated as the one that fills over
   MCP) for that size's queries. Over MCP a store with an id costs ~1 ms more per 1k memories
   stored (CPersona's msg_id dedup probe scans the agent's memories); the bulk fill asks the same
   probe through the partial unique index. Same rows: bench/cpersona/verify_bulk_fill.py.

Order: memstream at the sizes up to the largest CPersona size, then CPersona, then the larger
memstream sizes (so the compared phases run close together in time).

Queries: WordNet usage examples (the first ``--queries`` of vector_search.py's shuffled 2,000),
after ``--warmup`` untimed ones. OPENBLAS_NUM_THREADS=1 is set for this process (the in-process
engine) and the CLI sets it for the server. ``os.getloadavg()`` is sampled around every phase:
other jobs share this 2-core machine.

Usage (repo root, project venv)::

    python bench/recall_latency.py                            # 10k + 100k, CPersona at 10k
    python bench/recall_latency.py --cpersona-docs 0          # memstream only
    python bench/recall_latency.py --sizes 10000,100000,1000000 --cpersona-docs 10000,100000
                                                              # the full issue-3 run (~1 h here)
    python bench/recall_latency.py --cpersona-docs 10000,100000 --cpersona-fill bulk
                                                              # CPersona at 100k in minutes

Results: ``bench/results/recall_latency.json`` (``--out``, rewritten after every phase) and a
markdown table on stdout.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads

import argparse
import asyncio
import gc
import itertools
import json
import platform
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from cpersona_bulk import (
    SERVE_AS_MCP_FILLED,
    VERIFY_COMMAND,
    VERIFY_RESULT,
    cpersona_python,
    run_bulk_fill,
    store_line,
    write_ops,
)
from eval_recall import (
    AGENT,
    DEFAULT_CPERSONA,
    McpStdio,
    MemstreamServer,
    _dist_version,
    _pct,
    _readline_with_timeout,
    cpersona_env,
    memstream_recall,
    memstream_store,
    stop_process,
    store_all,
)
from vector_search import load_wordnet, real_vectors

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "bench" / "results" / "recall_latency.json"
K = 10


def log(msg: str) -> None:
    print(f"[recall-latency {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load() -> float:
    return round(os.getloadavg()[0], 2)


def rss_peak_mb() -> int:
    """This process's peak resident set size so far (MB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds a child process has used (Linux /proc), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def proc_rss_mb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def stats(ms: list[float]) -> dict[str, Any]:
    return {
        "n": len(ms),
        "p50_ms": round(_pct(ms, 50), 2),
        "p95_ms": round(_pct(ms, 95), 2),
        "p99_ms": round(_pct(ms, 99), 2),
        "mean_ms": round(float(np.mean(ms)), 2) if ms else None,
        "max_ms": round(max(ms), 2) if ms else None,
    }


# =============================================================================================
# Workload
# =============================================================================================


class Workload:
    """Distinct corpus texts with their real vectors, and query texts with theirs."""

    def __init__(self, n_queries: int) -> None:
        docs_v, queries_v, self.model_id = real_vectors()  # loads the default embedder (onnxruntime first)
        defs, examples = load_wordnet()
        random.Random(7).shuffle(examples)  # vector_search.real_vectors' query order
        assert len(defs) == len(docs_v), (len(defs), len(docs_v))
        self.query_texts = examples[: len(queries_v)][:n_queries]
        self.query_vecs = queries_v[: len(self.query_texts)]
        seen: set[str] = set()
        order = np.random.default_rng(11).permutation(len(defs))
        self.texts: list[str] = []
        self.vec_idx: list[int] = []
        for i in order:  # distinct texts only: content dedup would skip repeats
            t = defs[i]
            if t and t not in seen:
                seen.add(t)
                self.texts.append(t)
                self.vec_idx.append(int(i))
        self.docs_v = docs_v
        self.dim = int(docs_v.shape[1])

    def corpus(self, n: int) -> tuple[list[str], np.ndarray]:
        """The first n texts and vectors (n beyond the real rows: perturbed copies, suffixed text)."""
        real = min(n, len(self.texts) - 200)  # keep 200 unseen texts for store->visible probes
        texts = self.texts[:real]
        vecs = self.docs_v[self.vec_idx[:real]]
        if n > real:
            rng = np.random.default_rng(11)
            extra = n - real
            src = rng.integers(0, real, extra)
            u = rng.standard_normal((extra, self.dim)).astype(np.float32)
            u /= np.linalg.norm(u, axis=1, keepdims=True)
            v = vecs[src] + 0.5 * u
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            texts = texts + [f"{self.texts[j]} (#{k})" for k, j in enumerate(src)]
            vecs = np.vstack([vecs, v.astype(np.float32)])
        return texts, np.ascontiguousarray(vecs, dtype=np.float32)

    def probes(self, n: int) -> list[str]:
        return self.texts[len(self.texts) - 200 :][:n]


class PrecomputedEmbedder:
    """embed() returns the cached vector of each known text: the query embedding costs ~0."""

    def __init__(self, model_id: str, dim: int, table: dict[str, np.ndarray]) -> None:
        self._model_id, self._dim, self._table = model_id, dim, table

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Any) -> np.ndarray:
        if not len(texts):
            return np.zeros((0, self._dim), np.float32)
        return np.stack([self._table[t] for t in texts]).astype(np.float32)


# =============================================================================================
# memstream
# =============================================================================================


async def fill(data_dir: Path, texts: list[str], vecs: np.ndarray, model_id: str) -> dict[str, Any]:
    """Append one StoreMemory per text through the embedded command bus (group commit)."""
    from memstream.api.services.settings import Settings
    from memstream.api.tools.registry import Caller
    from memstream.api.tools.sanitize import normalize_source
    from memstream.streams.buses.embedded import EmbeddedCommandBus
    from memstream.streams.commands import StoreMemory
    from memstream.streams.decision.limits import Limits
    from memstream.streams.events import Actor, Embedding, Scope, new_id, utcnow
    from memstream.streams.log.sqlite import SqliteLog
    from memstream.streams.snapshots import SnapshotStore

    s = Settings(data_dir=data_dir)
    log_ = SqliteLog(s.log_path, num_partitions=s.partitions, synchronous=s.sync)
    bus = EmbeddedCommandBus(
        log_,
        limits=Limits(max(s.max_content_chars, s.max_profile_chars), s.max_metadata_chars * 4 + 1024),
        snapshots=SnapshotStore(s.snapshot_dir),
        snapshot_every=s.snapshot_every,
    )
    caller = Caller()
    scope = Scope(agent_id=AGENT)
    actor = Actor(client_id=caller.client_id, agent_id=AGENT, session_id=caller.session_id)
    source = normalize_source(None, AGENT)
    outcomes: dict[str, int] = {}
    t0 = time.perf_counter()
    await bus.start()
    try:
        chunk = 2048
        for a in range(0, len(texts), chunk):
            cmds = [
                StoreMemory(
                    command_id=new_id(),
                    scope=scope,
                    actor=actor,
                    received_at=utcnow(),
                    content=texts[i],
                    msg_id=f"d{i}",
                    source=source,
                    embedding=Embedding.from_vector(model_id, vecs[i]),
                )
                for i in range(a, min(a + chunk, len(texts)))
            ]
            for c in await asyncio.gather(*(bus.submit(c) for c in cmds)):
                outcomes[c.outcome.result] = outcomes.get(c.outcome.result, 0) + 1
            if (a // chunk) % 10 == 9:
                log(f"fill: {a + chunk}/{len(texts)} ({(a + chunk) / (time.perf_counter() - t0):.0f}/s)")
    finally:
        await bus.close()
        log_.close()
    dt = time.perf_counter() - t0
    return {"seconds": round(dt, 2), "per_second": round(len(texts) / dt), "outcomes": outcomes}


async def in_process(
    data_dir: Path, wl: Workload, warmup: int
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(fold timings, embedding-excluded recall latency, answer sizes)."""
    from memstream.api.services.engine import EmbeddedEngine
    from memstream.api.services.settings import Settings
    from memstream.api.tools.dispatch import dispatch
    from memstream.api.tools.registry import Caller

    table = dict(zip(wl.query_texts, wl.query_vecs, strict=True))
    engine = EmbeddedEngine(Settings(data_dir=data_dir), embedder=PrecomputedEmbedder(wl.model_id, wl.dim, table))
    caller = Caller()
    t0 = time.perf_counter()
    await engine.start()
    fold_s = time.perf_counter() - t0
    try:
        visible = len(engine.memories.rows) if hasattr(engine.memories, "rows") else None
        t1 = time.perf_counter()
        first = await dispatch(engine, caller, "recall", {"agent_id": AGENT, "query": wl.query_texts[0], "limit": K})
        first_ms = (time.perf_counter() - t1) * 1000
        if not first.get("ok", True) or not isinstance(first.get("messages"), list):
            raise RuntimeError(f"recall failed: {json.dumps(first)[:300]}")
        for q in wl.query_texts[:warmup]:
            await dispatch(engine, caller, "recall", {"agent_id": AGENT, "query": q, "limit": K})
        lat: list[float] = []
        rows: list[int] = []
        for q in wl.query_texts:
            t = time.perf_counter()
            body = await dispatch(engine, caller, "recall", {"agent_id": AGENT, "query": q, "limit": K})
            lat.append((time.perf_counter() - t) * 1000)
            rows.append(len(body.get("messages") or []))
    finally:
        t2 = time.perf_counter()
        await engine.close()
        close_s = time.perf_counter() - t2
    fold = {
        "engine_start_s": round(fold_s, 2),
        "graph_builds": engine.vectors.stats.get("graph_builds") if hasattr(engine, "vectors") else None,
        "first_recall_ms": round(first_ms, 1),
        "engine_close_checkpoint_s": round(close_s, 2),
        "memories_visible": visible,
        "rss_peak_mb": rss_peak_mb(),
    }
    del engine
    gc.collect()
    # Restart from the checkpoint close() just wrote: a second engine on the same dir.
    engine = EmbeddedEngine(Settings(data_dir=data_dir), embedder=PrecomputedEmbedder(wl.model_id, wl.dim, table))
    t3 = time.perf_counter()
    await engine.start()
    restart_s = time.perf_counter() - t3
    try:
        t4 = time.perf_counter()
        again = await dispatch(engine, caller, "recall", {"agent_id": AGENT, "query": wl.query_texts[0], "limit": K})
        fold["restart_first_recall_ms"] = round((time.perf_counter() - t4) * 1000, 1)
        fold["restart_first_recall_rows"] = len(again.get("messages") or [])
        fold["restart_graph_builds"] = engine.vectors.stats.get("graph_builds") if hasattr(engine, "vectors") else None
    finally:
        t5 = time.perf_counter()
        await engine.close()
        fold["restart_close_s"] = round(time.perf_counter() - t5, 2)
    fold["restart_from_checkpoint_s"] = round(restart_s, 2)
    del engine
    gc.collect()
    return fold, stats(lat), {"mean_rows": round(float(np.mean(rows)), 2), "empty": rows.count(0)}


def over_http(
    python: str, data_dir: Path, work: Path, wl: Workload, warmup: int, trials: int, n: int
) -> dict[str, Any]:
    import httpx

    out: dict[str, Any] = {}
    server = MemstreamServer(python, data_dir, {}, work, f"serve-{n}")
    try:
        with httpx.Client(timeout=60, trust_env=False) as client:
            t0 = time.perf_counter()
            server.wait_ready(client, timeout=1800)
            out["server_ready_s"] = round(time.perf_counter() - t0, 2)  # process start + restore from checkpoint
            recall = memstream_recall(client, server.base)
            t1 = time.perf_counter()
            recall(wl.query_texts[0])
            out["first_recall_ms"] = round((time.perf_counter() - t1) * 1000, 1)
            for q in wl.query_texts[:warmup]:
                recall(q)
            lat: list[float] = []
            for q in wl.query_texts:
                t = time.perf_counter()
                recall(q)
                lat.append((time.perf_counter() - t) * 1000)
            out["recall_embedding_included"] = stats(lat)
            out["loadavg_after_recall"] = load()
            # store -> visible
            store = memstream_store(client, server.base)
            vis: list[float] = []
            store_ms: list[float] = []
            polls: list[int] = []
            misses = 0
            for i, text in enumerate(wl.probes(trials)):
                did = f"probe-{n}-{i}"
                t = time.perf_counter()
                body = store(did, text)
                store_ms.append((time.perf_counter() - t) * 1000)
                if body.get("result") != "stored":
                    raise RuntimeError(f"probe store: {body}")
                seen, k = False, 0
                while time.perf_counter() - t < 10:
                    k += 1
                    msgs = recall(text)
                    if any(m.get("id") == did for m in msgs):
                        seen = True
                        break
                if seen:
                    vis.append((time.perf_counter() - t) * 1000)
                    polls.append(k)
                else:
                    misses += 1
            out["store_to_visible"] = {
                **stats(vis),
                "store_http_p50_ms": round(_pct(store_ms, 50), 2),
                "store_http_p99_ms": round(_pct(store_ms, 99), 2),
                "recalls_until_seen_max": max(polls) if polls else None,
                "not_seen_in_10s": misses,
            }
            out["server_rss_peak_mb"] = proc_rss_mb(server.proc.pid)
    finally:
        server.stop()
    return out


# =============================================================================================
# CPersona
# =============================================================================================


class CpersonaEmbedServer:
    """bench/embed_server.py in a subprocess (loopback, ephemeral port) for CPersona's /embed calls.

    With ``precomputed`` (an .npz of texts, vectors, model) the server answers the corpus texts
    from that table (the same model's vectors the memstream fill uses, computed once by
    vector_search.real_vectors) and embeds every other text, i.e. the queries, live."""

    def __init__(self, python: str, work: Path, precomputed: Path | None) -> None:
        argv = [python, str(REPO / "bench" / "embed_server.py"), "--port", "0", "--host", "127.0.0.1"]
        if precomputed is not None:
            argv += ["--precomputed", str(precomputed)]
        self._err = open(work / "embed_server.stderr", "w")  # noqa: SIM115 (closed in stop)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_")}
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._err, text=True, env=env, cwd=REPO)
        line = _readline_with_timeout(self.proc, 300)
        m = re.search(r"listening on (\S+) model=(\S+) dim=(\d+)", line or "")
        if not m:
            self.stop()
            raise RuntimeError(f"embed server did not start: {line!r} (see {work / 'embed_server.stderr'})")
        self.url, self.model, self.dim = m.group(1), m.group(2), int(m.group(3))

    def health(self) -> dict[str, Any]:
        import httpx

        r = httpx.get(self.url.rsplit("/", 1)[0] + "/health", timeout=10, trust_env=False)
        return dict(r.json())

    def stop(self) -> None:
        stop_process(self.proc)
        if self.proc.stdout:
            self.proc.stdout.close()
        self._err.close()


def cpersona_store_args(i: int, text: str) -> dict[str, Any]:
    """Corpus row i's ``store`` call (its msg_id ``d<i>`` is what recall answers carry as id)."""
    return {"agent_id": AGENT, "content": text, "id": f"d{i}"}


def write_cpersona_ops(texts: list[str], vecs: np.ndarray | None, start: int, stop: int, path: Path) -> int:
    """Rows start..stop as bulk_fill.py store lines; with ``vecs`` each carries the vector the /embed
    server answers for it from its precomputed table (``--cpersona-embed cache``)."""
    return write_ops(
        path,
        (
            store_line(cpersona_store_args(i, texts[i]), vector=None if vecs is None else vecs[i])
            for i in range(start, stop)
        ),
    )


def _mcp_store_range(
    client: McpStdio, embed: CpersonaEmbedServer, texts: list[str], have: int, n: int, concurrency: int
) -> dict[str, Any]:
    """Rows have..n through MCP stdio ``store`` (bench/eval_recall.py's driver)."""

    def store(did: str, text: str) -> dict[str, Any]:
        return client.call_tool("store", cpersona_store_args(int(did[1:]), text))

    docs = {f"d{i}": texts[i] for i in range(have, n)}
    log(f"cpersona: storing docs {have}..{n} over MCP (concurrency {concurrency})")
    c0, e0, h0 = proc_cpu_s(client.proc.pid), proc_cpu_s(embed.proc.pid), embed.health()
    st, _ = store_all(store, docs, concurrency, "cpersona")
    c1, e1, h1 = proc_cpu_s(client.proc.pid), proc_cpu_s(embed.proc.pid), embed.health()
    st["method"] = "mcp"
    if None not in (c0, c1, e0, e1):
        st["cpersona_cpu_s"] = round(c1 - c0, 1)
        st["embed_server_cpu_s"] = round(e1 - e0, 1)
    st["embed_table_hits"] = h1.get("table_hits", 0) - h0.get("table_hits", 0)
    st["embed_live_texts"] = h1.get("live_misses", 0) - h0.get("live_misses", 0)
    return st


def _bulk_store_range(
    args: argparse.Namespace,
    env: dict[str, str],
    work: Path,
    texts: list[str],
    vecs: np.ndarray | None,
    have: int,
    n: int,
) -> dict[str, Any]:
    """Rows have..n through bench/cpersona/bulk_fill.py into the same database (no server running)."""
    ops = work / f"cpersona-ops-{have}-{n}.jsonl"
    t0 = time.perf_counter()
    write_cpersona_ops(texts, vecs, have, n, ops)
    write_s = time.perf_counter() - t0
    log(f"cpersona: bulk fill of docs {have}..{n}")
    body = run_bulk_fill(cpersona_python(args.cpersona), ops, env, work, work / f"cpersona-bulk-{n}.stderr")
    ops.unlink(missing_ok=True)
    if body["exit_status"] != 0:
        raise RuntimeError(f"bulk fill: not every store was accepted: {json.dumps(body['first_failures'])[:600]}")
    return {
        "method": "bulk",
        "docs": n - have,
        "seconds": body["store_s"],
        "per_second": body["stores_per_s"],
        "outcomes": body["store_results"],
        "ops_written_s": round(write_s, 2),
        "bulk_fill_wall_s": body["wall_s"],
        "task_drain_s": body["task_drain_s"],
        "counters": body["counters"],
    }


def run_cpersona(args: argparse.Namespace, wl: Workload, work: Path, sizes: list[int], on_size: Any) -> dict[str, Any]:
    """One CPersona database filled in increments: at each size the same first texts memstream
    stored, then the same queries. ``on_size(result)`` is called after each size.

    ``--cpersona-fill mcp``: one server fills over MCP stdio and answers at every size.
    ``bulk``: each increment goes in through bench/cpersona/bulk_fill.py with no server running,
    then a fresh server (startup calibration off, as uncalibrated as the MCP one) answers."""
    if not Path(args.cpersona).exists():
        raise FileNotFoundError(f"{args.cpersona} not found")
    sizes = sorted(set(sizes))
    bulk = args.cpersona_fill == "bulk"
    texts, vecs = wl.corpus(sizes[-1])
    precomputed = None
    if args.cpersona_embed == "cache":
        precomputed = work / "cpersona-corpus-vectors.npz"
        np.savez(precomputed, texts=np.array(texts), vectors=vecs, model=np.array(wl.model_id))
    bulk_vecs = vecs if bulk and precomputed is not None else None
    del vecs
    home = work / "cpersona-home"
    (home / "data").mkdir(parents=True, exist_ok=True)
    embed = CpersonaEmbedServer(args.python, work, precomputed)
    out: dict[str, Any] = {
        "embed_model": embed.model,
        "embed": args.cpersona_embed,
        "embed_note": (
            "corpus texts answered from the precomputed table (the same model's vectors memstream "
            "stores); query texts embedded live"
            if precomputed is not None
            else "every text embedded live"
        ),
        "fill_method": args.cpersona_fill,
        "concurrency": args.cpersona_concurrency,
        "sizes": [],
    }
    if bulk:
        out["fill_verification"] = {"command": VERIFY_COMMAND, "result": VERIFY_RESULT}
    client: McpStdio | None = None
    try:
        env = cpersona_env(home, embed.url, {})
        serve_env = cpersona_env(home, embed.url, SERVE_AS_MCP_FILLED) if bulk else env
        out["cpersona_version"] = _dist_version(args.cpersona, "cpersona")

        def start_server() -> McpStdio:
            c = McpStdio([args.cpersona], serve_env, home, work / f"cpersona-{len(out['sizes'])}.stderr")
            init = c.handshake()
            out["mcp_server_info_version"] = (init.get("serverInfo") or {}).get("version")
            out["serve_env"] = {
                k: v for k, v in serve_env.items() if k.startswith("CPERSONA_") and k != "CPERSONA_DB_PATH"
            }
            return c

        def recall(q: str) -> list[dict[str, Any]]:
            assert client is not None
            body = client.call_tool("recall", {"agent_id": AGENT, "query": q, "limit": K})
            if body.get("ok") is False:
                raise RuntimeError(json.dumps(body)[:300])
            return list(body.get("messages") or [])

        have = 0
        store_s_total = 0.0
        for n in sizes:
            r: dict[str, Any] = {"docs": n, "loadavg_before": load()}
            if bulk:
                if client is not None:
                    client.close()
                    client = None
                st = _bulk_store_range(args, env, work, texts, bulk_vecs, have, n)
                client = start_server()
            else:
                if client is None:
                    client = start_server()
                st = _mcp_store_range(client, embed, texts, have, n, args.cpersona_concurrency)
            store_s_total += st["seconds"]
            st["from_doc"], st["to_doc"] = have, n
            st["cumulative_fill_seconds"] = round(store_s_total, 1)
            r["store"] = st
            r["loadavg_after_store"] = load()
            log(f"cpersona {n}: store {st}")
            have = n
            for q in wl.query_texts[: args.warmup]:
                recall(q)
            c2 = proc_cpu_s(client.proc.pid)
            lat: list[float] = []
            rows: list[int] = []
            for q in wl.query_texts:
                t = time.perf_counter()
                rows.append(len(recall(q)))
                lat.append((time.perf_counter() - t) * 1000)
            c3 = proc_cpu_s(client.proc.pid)
            r["recall_embedding_included"] = stats(lat)
            if None not in (c2, c3):
                r["recall_cpersona_cpu_ms_per_query"] = round((c3 - c2) * 1000 / len(lat), 1)
            r["mean_rows"] = round(float(np.mean(rows)), 2)
            r["empty"] = rows.count(0)
            r["loadavg_after_recall"] = load()
            r["cpersona_rss_peak_mb"] = proc_rss_mb(client.proc.pid)
            log(f"cpersona {n}: recall {r['recall_embedding_included']}")
            out["sizes"].append(r)
            on_size(out)
        out["embed_server_counters"] = embed.health()
    finally:
        if client is not None:
            client.close()
        embed.stop()
    return out


# =============================================================================================
# Main
# =============================================================================================


def _cp_sizes(report: dict[str, Any]) -> list[dict[str, Any]]:
    c = report.get("cpersona") or {}
    return [r for r in c.get("sizes") or [] if r.get("recall_embedding_included")]


def table(report: dict[str, Any]) -> str:
    lines = [
        "| system | memories | embedding | recall p50 ms | p95 ms | p99 ms | n | fold at start s "
        "| restart from checkpoint s | store→visible p50 / p99 ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(report["memstream"], key=lambda r: r["memories"]):
        ex, http = r.get("recall_embedding_excluded"), r.get("http", {})
        inc, sv = http.get("recall_embedding_included"), http.get("store_to_visible")
        fold = r.get("fold", {})
        svs = f"{sv['p50_ms']:.1f} / {sv['p99_ms']:.1f}" if sv else "–"
        if ex:
            lines.append(
                f"| memstream (in-process dispatch) | {r['memories']:,} | excluded | {ex['p50_ms']:.2f} | "
                f"{ex['p95_ms']:.2f} | {ex['p99_ms']:.2f} | {ex['n']} | {fold.get('engine_start_s', '–')} | "
                f"{fold.get('restart_from_checkpoint_s', '–')} | – |"
            )
        if inc:
            lines.append(
                f"| memstream (HTTP serve) | {r['memories']:,} | included | {inc['p50_ms']:.2f} | "
                f"{inc['p95_ms']:.2f} | {inc['p99_ms']:.2f} | {inc['n']} | – | "
                f"{http.get('server_ready_s', '–')} (server ready) | {svs} |"
            )
    version = (report.get("cpersona") or {}).get("cpersona_version")
    for c in _cp_sizes(report):
        ci = c["recall_embedding_included"]
        lines.append(
            f"| CPersona {version} (MCP stdio) | {c['docs']:,} | included | {ci['p50_ms']:.2f} | "
            f"{ci['p95_ms']:.2f} | {ci['p99_ms']:.2f} | {ci['n']} | – | – | – |"
        )
    return "\n".join(lines)


def ratios(report: dict[str, Any]) -> dict[str, Any]:
    """CPersona's latency over memstream's at each size both ran (by percentile)."""
    out: dict[str, Any] = {}
    for c in _cp_sizes(report):
        ci = c["recall_embedding_included"]
        m = next((r for r in report["memstream"] if r["memories"] == c["docs"]), None)
        if m is None:
            continue
        at: dict[str, Any] = {}
        for label, s in (
            ("included", m.get("http", {}).get("recall_embedding_included")),
            ("excluded", m.get("recall_embedding_excluded")),
        ):
            if s:
                at[f"cpersona_over_memstream_{label}"] = {
                    p: round(ci[f"{p}_ms"] / s[f"{p}_ms"], 1) for p in ("p50", "p95", "p99") if s[f"{p}_ms"]
                }
        out[str(c["docs"])] = at
    return out


def growth(report: dict[str, Any]) -> dict[str, Any]:
    """Latency ratio between consecutive memstream sizes (and the data ratio), per percentile."""
    rows = sorted((r for r in report["memstream"] if r.get("recall_embedding_excluded")), key=lambda r: r["memories"])
    out: dict[str, Any] = {}
    for lo, hi in itertools.pairwise(rows):
        g: dict[str, Any] = {"data_ratio": round(hi["memories"] / lo["memories"], 2)}
        for label, get in (
            ("excluded", lambda r: r.get("recall_embedding_excluded")),
            ("included", lambda r: r.get("http", {}).get("recall_embedding_included")),
        ):
            a, b = get(lo), get(hi)
            if a and b:
                g[label] = {p: round(b[f"{p}_ms"] / a[f"{p}_ms"], 2) for p in ("p50", "p95", "p99") if a[f"{p}_ms"]}
        fa, fb = lo.get("fold", {}).get("engine_start_s"), hi.get("fold", {}).get("engine_start_s")
        if fa and fb:
            g["fold"] = round(fb / fa, 1)
        out[f"{lo['memories']}->{hi['memories']}"] = g
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000", help="comma list of memory counts (1000000 allowed)")
    ap.add_argument("--queries", type=int, default=500, help="timed queries per measurement (>= 300)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--trials", type=int, default=100, help="store->visible trials per size")
    ap.add_argument(
        "--cpersona-docs",
        default="10000",
        help="comma list of CPersona sizes, filled incrementally in one database ('0' or '' skips CPersona)",
    )
    ap.add_argument("--cpersona-concurrency", type=int, default=4, help="MCP fill: requests in flight")
    ap.add_argument(
        "--cpersona-fill",
        choices=("mcp", "bulk"),
        default="mcp",
        help="mcp: store over MCP stdio; bulk: the same calls through bench/cpersona/bulk_fill.py "
        "(CPersona's own handlers in process; verified by " + VERIFY_COMMAND + ")",
    )
    ap.add_argument(
        "--cpersona-embed",
        choices=("cache", "live"),
        default="cache",
        help="cache: the /embed server answers corpus texts from the precomputed vectors of the same "
        "model and embeds queries live; live: it embeds every text",
    )
    ap.add_argument("--cpersona", default=DEFAULT_CPERSONA)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--keep-workdir", action="store_true")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",") if x]
    cp_sizes = sorted({int(x) for x in args.cpersona_docs.split(",") if x and int(x) > 0})
    for k in [k for k in os.environ if k.startswith("MEMSTREAM_")]:
        del os.environ[k]  # the default embedder, the default settings

    t_all = time.perf_counter()
    wl = Workload(args.queries)
    log(f"workload: {len(wl.texts)} distinct definitions, {len(wl.query_texts)} queries, model {wl.model_id}")
    work = Path(tempfile.mkdtemp(prefix="memstream-recall-latency-"))
    report: dict[str, Any] = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": "python bench/recall_latency.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "model_id": wl.model_id,
        "queries": len(wl.query_texts),
        "warmup": args.warmup,
        "limit": K,
        "settings": "memstream defaults (recall_mode rrf, retrievers all, max_memories 10000 window, reach 0)",
        "vectors": "real MiniLM-L6 int8 vectors of WordNet definitions (vector_search.real_vectors cache); "
        "perturbed copies only past 117k",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "mem_total_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "loadavg_start": list(os.getloadavg()),
        },
        "phase_order": [],
        "memstream": [],
        "cpersona": None,
        "cpersona_fill": {
            "method": args.cpersona_fill,
            "verification_command": VERIFY_COMMAND,
            "verification_result": VERIFY_RESULT,
        },
    }

    def save() -> None:
        report["machine"]["loadavg_now"] = [round(x, 2) for x in os.getloadavg()]
        report["seconds"] = round(time.perf_counter() - t_all, 1)
        report["rss_peak_mb"] = rss_peak_mb()
        report["ratios"] = ratios(report)
        report["growth"] = growth(report)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, args.out)

    def memstream_size(n: int) -> None:
        t_phase = time.perf_counter()
        r: dict[str, Any] = {"memories": n, "loadavg_before": load()}
        report["memstream"].append(r)
        report["phase_order"].append(f"memstream {n}")
        data_dir = work / f"data-{n}"
        texts, vecs = wl.corpus(n)
        log(f"{n}: filling through EmbeddedCommandBus")
        r["fill"] = asyncio.run(fill(data_dir, texts, vecs, wl.model_id))
        log(f"{n}: fill {r['fill']}")
        del texts, vecs
        gc.collect()
        r["loadavg_before_fold"] = load()
        r["fold"], r["recall_embedding_excluded"], r["answers"] = asyncio.run(in_process(data_dir, wl, args.warmup))
        r["loadavg_after_in_process"] = load()
        log(f"{n}: fold {r['fold']} excluded {r['recall_embedding_excluded']}")
        save()
        r["http"] = over_http(args.python, data_dir, work, wl, args.warmup, args.trials, n)
        log(f"{n}: http {r['http']}")
        r["data_dir_mb"] = round(sum(f.stat().st_size for f in data_dir.rglob("*") if f.is_file()) / 2**20)
        r["phase_seconds"] = round(time.perf_counter() - t_phase, 1)
        save()
        shutil.rmtree(data_dir, ignore_errors=True)

    def cpersona() -> None:
        report["phase_order"].append("cpersona " + ",".join(map(str, cp_sizes)))
        t_phase = time.perf_counter()

        def on_size(partial: dict[str, Any]) -> None:
            report["cpersona"] = partial
            save()

        try:
            report["cpersona"] = run_cpersona(args, wl, work, cp_sizes, on_size)
        except Exception as exc:
            log(f"cpersona failed: {type(exc).__name__}: {exc}")
            report["cpersona"] = {**(report.get("cpersona") or {}), "error": f"{type(exc).__name__}: {exc}"}
        report["cpersona"]["phase_seconds"] = round(time.perf_counter() - t_phase, 1)
        shutil.rmtree(work / "cpersona-home", ignore_errors=True)
        save()

    # memstream at the sizes CPersona is compared against (and smaller) first, then CPersona,
    # then the larger memstream sizes: the compared phases run close together in time.
    limit = max(cp_sizes) if cp_sizes else -1
    try:
        for n in [n for n in sizes if n <= limit]:
            memstream_size(n)
        if cp_sizes:
            cpersona()
        for n in [n for n in sizes if n > limit]:
            memstream_size(n)
    finally:
        save()
        if args.keep_workdir:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(table(report))
    if report.get("ratios"):
        print("\nratios " + json.dumps(report["ratios"]))
    if report.get("growth"):
        print("growth " + json.dumps(report["growth"]))
    log(f"wrote {args.out} in {report['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
