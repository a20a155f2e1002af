"""The vector projection under load: search latency, rebuild, memory, snapshots.

    python bench/vector_search.py                          # 10k, 100k, 1M rows (~40 min, 6 GB RAM)
    python bench/vector_search.py --sizes 10000,100000     # skip the 1M run
    python bench/vector_search.py --quick                  # 10k only, a smoke run

Vectors are real 384-d sentence embeddings from the default embedder (minilm-l6-v2-int8):
every WordNet 3.0 definition (117,659, from Debian's ``wordnet-base``) is a stored memory and
2,000 WordNet usage examples are the queries; they are embedded once (about 8 minutes here)
and cached under ~/.cache/memstream-bench. Sizes up to 117,659 use real rows only; the 1M set
adds perturbed copies of real rows (``normalize(v + 0.5 u)``, u a random unit vector: cosine
about 0.89 to the source row), so neighbourhoods stay sentence-like instead of uniform noise.

Per size N, one agent holds N memories in three projects ('' / 'p' / 'q', a third each):
- a real embedded log (SqliteLog, the engine's file format) holding N ``memory.stored``
  events with their vectors, folded by the real ProjectionRunner: the rebuild time, against
  usearch's own batch add of the same vectors into a fresh index of the same configuration
  (all at once, all cores) in the same run;
- single-query latency of ``VectorProjection.search`` (k=10; query embedding excluded) for
  the default window (10,000) with no reach and with a reach of 200,000, over the whole agent
  (contiguous window) and over project 'p' (reads 'p' + '': the masked path);
- far-list recall@10 of the graph path against exact search over the same band;
- memory (vectors, row metadata, graphs; the process's RSS) and snapshot save/load time.
Results go to bench/results/vector_search.json and are printed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import resource
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from corpora import wordnet_synsets

ROOT = Path(__file__).resolve().parents[1]


CACHE = Path(os.environ.get("MEMSTREAM_BENCH_CACHE", Path.home() / ".cache" / "memstream-bench"))
WORDNET = Path(os.environ.get("WORDNET_DIR", "/usr/share/wordnet"))


def load_wordnet() -> tuple[list[str], list[str]]:
    """(definitions of every synset, one usage example per synset that has one)."""
    synsets = wordnet_synsets(WORDNET)
    examples = [s.examples[0] for s in synsets if s.examples and len(s.examples[0].split()) >= 4]
    return [s.definition for s in synsets], examples


def real_vectors(n_queries: int = 2_000) -> tuple[np.ndarray, np.ndarray, str]:
    """Real 384-d sentence vectors: every WordNet definition (the corpus) and usage examples
    (the queries), embedded once with the default embedder and cached."""
    from memstream.api.services.embedding import load_embedder

    emb = load_embedder()
    path = CACHE / f"wordnet-{emb.model_id}-{n_queries}.npz"
    if path.is_file():
        z = np.load(path)
        return z["docs"], z["queries"], emb.model_id
    defs, examples = load_wordnet()
    random.Random(7).shuffle(examples)
    queries = examples[:n_queries]
    t0 = time.perf_counter()
    out = []
    batch = 256
    texts = defs + queries
    for i in range(0, len(texts), batch):
        out.append(emb.embed(texts[i : i + batch]))
        if i // batch % 40 == 0:
            rate = (i + batch) / (time.perf_counter() - t0)
            print(f"embedded {i + batch}/{len(texts)} ({rate:.0f}/s)", file=sys.stderr, flush=True)
    allv = np.vstack(out).astype(np.float32)
    docs, qs = allv[: len(defs)], allv[len(defs) :]
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, docs=docs, queries=qs)
    os.replace(tmp, path)
    return docs, qs, emb.model_id


def dataset(n: int, docs: np.ndarray, seed: int = 11) -> np.ndarray:
    """n rows: real rows first (shuffled), then perturbed copies of real rows."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(docs))
    if n <= len(docs):
        return np.ascontiguousarray(docs[order[:n]])
    out = np.empty((n, docs.shape[1]), np.float32)
    out[: len(docs)] = docs[order]
    for a in range(len(docs), n, 100_000):
        b = min(n, a + 100_000)
        base = docs[rng.integers(0, len(docs), b - a)]
        u = rng.standard_normal(base.shape).astype(np.float32)
        u /= np.linalg.norm(u, axis=1, keepdims=True)
        v = base + 0.5 * u
        out[a:b] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def set_blas_threads(n: int) -> bool:
    """Set numpy's OpenBLAS thread count at run time (what threadpoolctl does), if possible."""
    import ctypes
    import glob

    libs = glob.glob(str(Path(np.__file__).parent.parent / "numpy.libs" / "libscipy_openblas*.so"))
    for lib in libs:
        dll = ctypes.CDLL(lib)
        for sym in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads"):
            fn = getattr(dll, sym, None)
            if fn is not None:
                fn(ctypes.c_int(n))
                return True
    return False


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def write_log(path: Path, vecs: np.ndarray, model: str) -> float:
    """N memory.stored events for agent 'bench' (projects '', 'p', 'q' in turn), written in the
    embedded log's format (value = the event JSON, vector = the raw float32 attachment)."""
    from memstream.streams.log.sqlite import SqliteLog

    log_ = SqliteLog(path, synchronous="OFF")
    conn = log_.writer_connection()
    t0 = time.perf_counter()
    header = {"model": model, "dim": int(vecs.shape[1]), "dtype": "f32"}
    rows = []
    for i in range(len(vecs)):
        ev = {
            "id": f"ev{i}",
            "type": "memory.stored",
            "v": 1,
            "scope": {"agent_id": "bench", "project_id": ("", "p", "q")[i % 3], "channel": ""},
            "actor": {"client_id": "bench", "agent_id": "bench", "session_id": ""},
            "occurred_at": "2026-11-30T00:00:00+00:00",
            "command_id": f"c{i}",
            "payload": {
                "id": i + 1,
                "content": f"memory {i}",
                "msg_id": None,
                "source": None,
                "metadata": None,
                "timestamp": None,
                "locked": False,
                "embedding": header,
            },
        }
        rows.append((i, 0, "bench", "memory.stored", orjson.dumps(ev), vecs[i].astype("<f4").tobytes()))
        if len(rows) == 20_000:
            conn.executemany(
                'INSERT INTO events("offset", partition, agent, type, value, vector) VALUES (?,?,?,?,?,?)', rows
            )
            conn.commit()
            rows = []
    if rows:
        conn.executemany(
            'INSERT INTO events("offset", partition, agent, type, value, vector) VALUES (?,?,?,?,?,?)', rows
        )
        conn.commit()
    conn.close()
    log_.close()
    return time.perf_counter() - t0


def percentiles(samples: list[float]) -> dict[str, float]:
    a = np.asarray(samples) * 1000
    return {
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p95_ms": round(float(np.percentile(a, 95)), 3),
        "p99_ms": round(float(np.percentile(a, 99)), 3),
        "max_ms": round(float(a.max()), 3),
    }


def latency(proj: Any, scope: Any, queries: np.ndarray, n: int, **kw: Any) -> dict[str, float]:
    for q in queries[:20]:
        proj.search(scope, q, 10, **kw)  # warm
    times = []
    for i in range(n):
        q = queries[i % len(queries)]
        t = time.perf_counter()
        proj.search(scope, q, 10, **kw)
        times.append(time.perf_counter() - t)
    return percentiles(times)


def far_recall(proj: Any, scope: Any, queries: np.ndarray, n: int, reach: int) -> dict[str, float]:
    got = total = 0
    saved = proj.exact_far_limit
    before = dict(proj.stats)
    for q in queries[:n]:
        proj.exact_far_limit = saved
        _, approx = proj.search(scope, q, 10, reach=reach)
        proj.exact_far_limit = 1 << 62
        _, exact = proj.search(scope, q, 10, reach=reach)
        got += len({r for r, _ in approx} & {r for r, _ in exact})
        total += len(exact)
    proj.exact_far_limit = saved
    used = {k: proj.stats[k] - before.get(k, 0) for k in ("hnsw_far", "hnsw_fallback")}
    return {"recall_at_10": round(got / max(1, total), 4), "queries": n, **used}


def run_size(n: int, docs: np.ndarray, queries: np.ndarray, model: str, work: Path, args: Any) -> dict[str, Any]:
    from usearch.index import Index

    from memstream.projections.runner import ProjectionRunner, digest_of
    from memstream.projections.scope import ScopeFilter
    from memstream.projections.vectors import HnswConfig, VectorProjection
    from memstream.streams.log.sqlite import SqliteLog
    from memstream.streams.snapshots import SnapshotStore

    out: dict[str, Any] = {"rows": n}
    vecs = dataset(n, docs)
    logpath = work / f"log-{n}.sqlite"
    out["log_write_s"] = round(write_log(logpath, vecs, model), 2)
    out["log_bytes"] = logpath.stat().st_size
    cfg = HnswConfig()

    # usearch's own batch add of the same vectors, same configuration, all cores
    gc.collect()
    ref = Index(
        ndim=vecs.shape[1],
        metric="cos",
        dtype=cfg.dtype,
        connectivity=cfg.connectivity,
        expansion_add=cfg.expansion_add,
        expansion_search=cfg.expansion_search,
    )
    t = time.perf_counter()
    ref.add(np.arange(n, dtype=np.uint64), vecs, threads=0)
    usearch_s = time.perf_counter() - t
    out["usearch_batch_add"] = {"seconds": round(usearch_s, 2), "vectors_per_s": round(n / usearch_s)}
    del ref
    gc.collect()

    # the projection rebuilt from the log by the real runner, without and with graphs
    log_ = SqliteLog(logpath)
    rss0 = rss_mb()
    bare = VectorProjection(hnsw=False)
    t = time.perf_counter()
    ProjectionRunner.over(log_, [bare]).catch_up()
    fold_s = time.perf_counter() - t
    out["rebuild_without_graph_s"] = round(fold_s, 2)
    del bare
    gc.collect()
    proj = VectorProjection()
    t = time.perf_counter()
    ProjectionRunner.over(log_, [proj]).catch_up()
    proj.flush()
    rebuild_s = time.perf_counter() - t
    out["rebuild_s"] = round(rebuild_s, 2)
    out["rebuild_rows_per_s"] = round(n / rebuild_s)
    out["rebuild_over_usearch_batch_add"] = round(rebuild_s / usearch_s, 3)
    out["graph_builds"] = proj.stats["graph_builds"]
    mem = proj.memory_bytes()
    out["memory_mb"] = {k: round(v / 2**20, 1) for k, v in mem.items()}
    out["memory_mb"]["rss_growth"] = round(rss_mb() - rss0, 1)
    out["memory_mb"]["process_rss"] = round(rss_mb(), 1)

    agent = ScopeFilter("bench")
    project = ScopeFilter("bench", "p")
    reps = args.searches
    lat: dict[str, Any] = {}
    lat["window_10k_agent"] = latency(proj, agent, queries, reps)
    if args.blas_threads != 2 and set_blas_threads(2):  # the numpy default on this machine, for comparison
        lat["window_10k_agent_blas_2_threads"] = latency(proj, agent, queries, reps)
        set_blas_threads(args.blas_threads)
    lat["window_10k_project"] = latency(proj, project, queries, reps)
    if n > 10_000:
        lat["window_10k_reach_200k_agent"] = latency(proj, agent, queries, reps, reach=200_000)
        lat["window_10k_reach_200k_project"] = latency(proj, project, queries, reps, reach=200_000)
    out["search_k10"] = lat
    if n > 10_000:
        out["far_list_reach_200k_vs_exact"] = far_recall(proj, agent, queries, args.recall_queries, 200_000)
        # exact far list for reference (no graph)
        saved = proj.exact_far_limit
        proj.exact_far_limit = 1 << 62
        out["search_k10"]["window_10k_reach_200k_agent_exact_far"] = latency(
            proj, agent, queries, max(50, reps // 10), reach=200_000
        )
        proj.exact_far_limit = saved

    # snapshots: save (JSON + sidecars) and load (verify + views + graphs)
    snapdir = work / f"snap-{n}"
    store = SnapshotStore(snapdir)
    proj.blobs = store
    digest = digest_of(proj)  # writes the sidecars (state changed since none was written)
    for b in store.blob_names():
        store.drop_blob(b)
    proj._blob_hash = None
    t = time.perf_counter()
    store.save(proj.name, {"offset": proj.offset, "state": proj.to_snapshot()})
    save_s = time.perf_counter() - t
    sizes = {p.name: p.stat().st_size for p in snapdir.iterdir()}
    del proj
    gc.collect()
    t = time.perf_counter()
    body = store.load("vectors")
    fresh = VectorProjection(store)
    fresh.load_snapshot(body["state"])
    load_s = time.perf_counter() - t
    assert digest_of(fresh) == digest  # (load_snapshot raises SnapshotRejected on a bad sidecar)
    out["snapshot"] = {
        "save_s": round(save_s, 2),
        "load_s": round(load_s, 2),
        "files_mb": {k: round(v / 2**20, 1) for k, v in sorted(sizes.items())},
        "graph_rebuilt_on_load": fresh.stats["graph_builds"],
    }
    t0 = time.perf_counter()
    fresh.search(agent, queries[0], 10)
    out["snapshot"]["first_search_after_load_ms"] = round((time.perf_counter() - t0) * 1000, 2)
    del fresh
    log_.close()
    gc.collect()
    shutil.rmtree(snapdir, ignore_errors=True)
    logpath.unlink(missing_ok=True)
    for extra in ("-wal", "-shm"):
        Path(str(logpath) + extra).unlink(missing_ok=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--searches", type=int, default=1000)
    ap.add_argument("--recall-queries", type=int, default=200)
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "vector_search.json"))
    ap.add_argument("--workdir", default=None)
    ap.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        help="OpenBLAS threads for the searches (1: the recommended server setting, see docs/vectors.md)",
    )
    args = ap.parse_args()
    sizes = [10_000] if args.quick else [int(x) for x in args.sizes.split(",")]
    docs, queries, model = real_vectors()
    blas_set = set_blas_threads(args.blas_threads)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="memstream-vbench-"))
    work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": list(os.getloadavg())},
        "vectors": {
            "model": model,
            "dim": int(docs.shape[1]),
            "real_rows": len(docs),
            "queries": len(queries),
        },
        "sizes": [],
        "blas_threads": args.blas_threads if blas_set else "default",
    }
    try:
        for n in sizes:
            print(f"-- {n} rows", file=sys.stderr, flush=True)
            r = run_size(n, docs, queries, model, work, args)
            result["sizes"].append(r)
            print(json.dumps(r, indent=1), flush=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    result["machine"]["load_after"] = list(os.getloadavg())
    result["max_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--embed-only":
        d, q, m = real_vectors()
        print(d.shape, q.shape, m)
    else:
        main()
