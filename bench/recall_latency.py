"""Recall latency for ONE agent at 10k and 100k memories (1M behind ``--sizes``), with the query
embedding excluded and included, plus store->visible latency, and CPersona 2.6 on the same workload.

What runs, per size N (everything on 127.0.0.1, every server stopped at the end):

1. Fill: N distinct WordNet 3.0 definitions go into a fresh data dir as ``StoreMemory`` commands
   through ``EmbeddedCommandBus`` (no HTTP), each carrying its precomputed MiniLM-L6 int8 vector
   (``Embedding.from_vector(model_id, vec)``, model_id = the default embedder's). Vectors: the
   117,659 real WordNet definition vectors and 2,000 usage-example query vectors that
   ``bench/vector_search.py`` caches (``real_vectors()``, ~/.cache/memstream-bench); at 10k and
   100k every vector is real. Past 117k (1M only) rows are perturbed copies of real rows with the
   text suffixed (``vector_search.py``'s recipe).
2. Fold: ``Engine(settings).start()`` on that dir (restore + catch-up of the whole log: the
   store->visible cost at scale for a cold engine); timed. Then the first recall, timed alone.
3. Embedding EXCLUDED (in-process): ``dispatch(engine, Caller(), "recall", {agent_id, query,
   limit: 10})`` with an embedder whose ``embed()`` returns the cached vector of the query text (a
   dict lookup, ~µs). The timed span is the whole dispatch call (validation, read catch-up check,
   vector window scan, lexical search, fusion, gates, answer shaping), not only the pipeline.
4. Embedding INCLUDED (HTTP): ``python -m memstream.api.cli serve`` on the same dir with the
   default (local) embedder; ``POST /v1/tools/recall`` from one client, one request in flight.
5. Store->visible over HTTP: ``POST /v1/tools/store`` of a definition not in the corpus, then
   ``POST /v1/tools/recall`` with that text until a row carries its id; time from the store's
   send to the answer that shows it (100 trials).
6. CPersona 2.6 (10k by default, ``--cpersona-docs``): the same first documents stored through
   MCP stdio ``store`` (bench/eval_recall.py's driver, same ``/embed`` server as eval_recall), then
   the same queries through ``recall``. Its recall includes the embedding (one /embed round trip).

Queries: WordNet usage examples (the first ``--queries`` of vector_search.py's shuffled 2,000),
after ``--warmup`` untimed ones. OPENBLAS_NUM_THREADS=1 is set for this process (the in-process
engine) and the CLI sets it for the server. ``os.getloadavg()`` is sampled around every phase:
other jobs share this 2-core machine.

Usage (repo root, project venv)::

    python bench/recall_latency.py                            # 10k + 100k, CPersona at 10k
    python bench/recall_latency.py --cpersona-docs 0          # memstream only
    python bench/recall_latency.py --sizes 10000,100000,1000000   # adds 1M (slow: fill + fold)

Results: ``bench/results/recall_latency.json`` (``--out``, rewritten after every phase) and a
markdown table on stdout.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads

import argparse
import asyncio
import json
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from eval_recall import (
    AGENT,
    DEFAULT_CPERSONA,
    EmbedServer,
    McpStdio,
    MemstreamServer,
    _dist_version,
    _pct,
    cpersona_env,
    memstream_recall,
    memstream_store,
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
    from memstream.api.settings import Settings
    from memstream.api.tools.registry import Caller
    from memstream.api.tools.sanitize import normalize_source
    from memstream.streams.commands import StoreMemory
    from memstream.streams.decision import Limits
    from memstream.streams.embedded_bus import EmbeddedCommandBus
    from memstream.streams.events import Actor, Embedding, Scope, new_id, utcnow
    from memstream.streams.snapshots import SnapshotStore
    from memstream.streams.sqlite_log import SqliteLog

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
    from memstream.api.engine import Engine
    from memstream.api.settings import Settings
    from memstream.api.tools.dispatch import dispatch
    from memstream.api.tools.registry import Caller

    table = dict(zip(wl.query_texts, wl.query_vecs, strict=True))
    engine = Engine(Settings(data_dir=data_dir), embedder=PrecomputedEmbedder(wl.model_id, wl.dim, table))
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
        "first_recall_ms": round(first_ms, 1),
        "engine_close_checkpoint_s": round(close_s, 2),
        "memories_visible": visible,
    }
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
            server.wait_ready(client)
            out["server_ready_s"] = round(time.perf_counter() - t0, 2)
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
    finally:
        server.stop()
    return out


# =============================================================================================
# CPersona
# =============================================================================================


def run_cpersona(args: argparse.Namespace, wl: Workload, work: Path) -> dict[str, Any]:
    if not Path(args.cpersona).exists():
        raise FileNotFoundError(f"{args.cpersona} not found")
    texts, _ = wl.corpus(args.cpersona_docs)
    docs = {f"d{i}": t for i, t in enumerate(texts)}
    home = work / "cpersona-home"
    (home / "data").mkdir(parents=True, exist_ok=True)
    embed = EmbedServer(args.python, None, work)
    out: dict[str, Any] = {"docs": len(docs), "embed_model": embed.model}
    try:
        env = cpersona_env(home, embed.url, {})
        client = McpStdio([args.cpersona], env, home, work / "cpersona.stderr")
        try:
            init = client.handshake()
            out["mcp_server_info_version"] = (init.get("serverInfo") or {}).get("version")
            out["cpersona_version"] = _dist_version(args.cpersona, "cpersona")

            def store(did: str, text: str) -> dict[str, Any]:
                return client.call_tool("store", {"agent_id": AGENT, "content": text, "id": did})

            log(f"cpersona: storing {len(docs)} docs (concurrency {args.cpersona_concurrency})")
            st, _ = store_all(store, docs, args.cpersona_concurrency, "cpersona")
            out["store"] = st
            out["loadavg_after_store"] = load()
            log(f"cpersona: store {st}")

            def recall(q: str) -> list[dict[str, Any]]:
                body = client.call_tool("recall", {"agent_id": AGENT, "query": q, "limit": K})
                if body.get("ok") is False:
                    raise RuntimeError(json.dumps(body)[:300])
                return list(body.get("messages") or [])

            for q in wl.query_texts[: args.warmup]:
                recall(q)
            lat: list[float] = []
            rows: list[int] = []
            for q in wl.query_texts:
                t = time.perf_counter()
                rows.append(len(recall(q)))
                lat.append((time.perf_counter() - t) * 1000)
            out["recall_embedding_included"] = stats(lat)
            out["mean_rows"] = round(float(np.mean(rows)), 2)
            out["loadavg_after_recall"] = load()
        finally:
            client.close()
    finally:
        embed.stop()
    return out


# =============================================================================================
# Main
# =============================================================================================


def table(report: dict[str, Any]) -> str:
    lines = [
        "| system | memories | embedding | recall p50 ms | p95 ms | p99 ms | n | fold at start s "
        "| store→visible p50 / p99 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["memstream"]:
        ex, http = r.get("recall_embedding_excluded"), r.get("http", {})
        inc, sv = http.get("recall_embedding_included"), http.get("store_to_visible")
        fold = r.get("fold", {}).get("engine_start_s", "–")
        svs = f"{sv['p50_ms']:.1f} / {sv['p99_ms']:.1f}" if sv else "–"
        if ex:
            lines.append(
                f"| memstream (in-process dispatch) | {r['memories']:,} | excluded | {ex['p50_ms']:.2f} | "
                f"{ex['p95_ms']:.2f} | {ex['p99_ms']:.2f} | {ex['n']} | {fold} | – |"
            )
        if inc:
            lines.append(
                f"| memstream (HTTP serve) | {r['memories']:,} | included | {inc['p50_ms']:.2f} | "
                f"{inc['p95_ms']:.2f} | {inc['p99_ms']:.2f} | {inc['n']} | – | {svs} |"
            )
    c = report.get("cpersona") or {}
    ci = c.get("recall_embedding_included")
    if ci:
        lines.append(
            f"| CPersona {c.get('cpersona_version')} (MCP stdio) | {c['docs']:,} | included | {ci['p50_ms']:.2f} | "
            f"{ci['p95_ms']:.2f} | {ci['p99_ms']:.2f} | {ci['n']} | – | – |"
        )
    return "\n".join(lines)


def ratios(report: dict[str, Any]) -> dict[str, Any]:
    c = (report.get("cpersona") or {}).get("recall_embedding_included")
    if not c:
        return {}
    m = next((r for r in report["memstream"] if r["memories"] == report["cpersona"]["docs"]), None)
    if m is None:
        return {}
    out = {}
    for label, s in (
        ("included", m.get("http", {}).get("recall_embedding_included")),
        ("excluded", m.get("recall_embedding_excluded")),
    ):
        if s:
            out[f"cpersona_over_memstream_{label}"] = {
                p: round(c[f"{p}_ms"] / s[f"{p}_ms"], 1) for p in ("p50", "p95", "p99") if s[f"{p}_ms"]
            }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000", help="comma list of memory counts (1000000 allowed)")
    ap.add_argument("--queries", type=int, default=500, help="timed queries per measurement (>= 300)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--trials", type=int, default=100, help="store->visible trials per size")
    ap.add_argument("--cpersona-docs", type=int, default=10_000, help="0 skips CPersona")
    ap.add_argument("--cpersona-concurrency", type=int, default=4)
    ap.add_argument("--cpersona", default=DEFAULT_CPERSONA)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--keep-workdir", action="store_true")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",") if x]
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
            "loadavg_start": list(os.getloadavg()),
        },
        "memstream": [],
        "cpersona": None,
    }

    def save() -> None:
        report["machine"]["loadavg_now"] = [round(x, 2) for x in os.getloadavg()]
        report["seconds"] = round(time.perf_counter() - t_all, 1)
        report["ratios"] = ratios(report)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")

    try:
        for n in sizes:
            r: dict[str, Any] = {"memories": n, "loadavg_before": load()}
            report["memstream"].append(r)
            data_dir = work / f"data-{n}"
            texts, vecs = wl.corpus(n)
            log(f"{n}: filling through EmbeddedCommandBus")
            r["fill"] = asyncio.run(fill(data_dir, texts, vecs, wl.model_id))
            log(f"{n}: fill {r['fill']}")
            del texts, vecs
            r["fold"], r["recall_embedding_excluded"], r["answers"] = asyncio.run(in_process(data_dir, wl, args.warmup))
            r["loadavg_after_in_process"] = load()
            log(f"{n}: fold {r['fold']} excluded {r['recall_embedding_excluded']}")
            save()
            r["http"] = over_http(args.python, data_dir, work, wl, args.warmup, args.trials, n)
            log(f"{n}: http {r['http']}")
            save()
            shutil.rmtree(data_dir, ignore_errors=True)
        if args.cpersona_docs > 0:
            try:
                report["cpersona"] = run_cpersona(args, wl, work)
            except Exception as exc:
                log(f"cpersona failed: {type(exc).__name__}: {exc}")
                report["cpersona"] = {"docs": args.cpersona_docs, "error": f"{type(exc).__name__}: {exc}"}
            save()
    finally:
        save()
        if args.keep_workdir:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(table(report))
    if report.get("ratios"):
        print("\n" + json.dumps(report["ratios"]))
    log(f"wrote {args.out} in {report['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
