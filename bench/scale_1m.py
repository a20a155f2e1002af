"""Issue 19 at scale: a server's restart from checkpoints and its cold start (no checkpoints) on a
filled data directory, to ``/health`` and to a first recall, with its RSS (anonymous and
file-backed) and CPU seconds; the bytes each component holds per memory; and the limits beside
them: SQLite's sequential read of the log, usearch's own add rate on the same vectors.

    python bench/rebuild_speed.py --sizes 1000000 --keep /tmp/scale-1m     # fill once (long)
    python bench/scale_1m.py --data /tmp/scale-1m/n1000000                 # every phase
    python bench/scale_1m.py --data D --phases restart --code before=/tmp/old --code after=/tmp/new
    python bench/scale_1m.py --data D --phases f16        # what float16 vectors would change
    python bench/scale_1m.py --data D --phases checkpoint --code before=B --code after=A  # a periodic checkpoint

``--code NAME=DIR`` (repeatable) runs the server with another checkout's ``memstream`` package
(a directory holding it, as bench/restart.py's ``--before-code``); two or more variants each on
its own copy of the data directory (``D-NAME``: a variant may rewrite the checkpoints in its own
format), the
variants alternating run by run so load on the shared machine falls on all alike. Without it,
one variant: this code on ``D``. A cold start moves ``snapshots/`` aside, starts, stops (the
stop writes fresh checkpoints, which are then dropped) and puts the originals back; cold starts
run first, so ``--keep-cold-checkpoints`` on a directory filled without checkpoints leaves the
ones a restart then starts from.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as `memstream` sets it, before numpy loads

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import restart as restart_bench  # noqa: E402  (bench/ on the path first)

AGENT = "eval"  # the agent recall_latency.fill stores under
QUERY = "a small boat used for fishing near the shore"


def log(msg: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def post_json(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        out: dict[str, Any] = json.loads(r.read())
        return out


def start_server(data: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int, float]:
    """``memstream serve`` on ``data`` at a free port: the process, the port, when it started."""
    port = restart_bench.free_port()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [restart_bench.MEMSTREAM, "serve", "--data-dir", str(data), "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return proc, port, started


def serve_once(data: Path, code: Path | None, deadline_s: float) -> dict[str, Any]:
    """Start ``memstream serve`` on ``data``: seconds to /health 200 and to a first recall's
    answer (its query embedded by the default embedder), CPU seconds and RSS at each; then stop it."""
    proc, port, started = start_server(data, restart_bench.clean_env(code))
    pid = proc.pid
    out: dict[str, Any] = {}
    try:
        restart_bench.wait_for_health(proc, port, started, deadline_s, poll_s=0.05)
        out["health_s"] = round(time.perf_counter() - started, 2)
        out["health_cpu_s"] = round(restart_bench.cpu_s(pid), 2)
        out.update({f"health_{k}": v for k, v in restart_bench.rss(pid).items()})
        ask = {"agent_id": AGENT, "query": QUERY, "limit": 10}
        body = post_json(f"http://127.0.0.1:{port}/v1/tools/recall", ask, 600)
        out["first_recall_s"] = round(time.perf_counter() - started, 2)
        out["first_recall_cpu_s"] = round(restart_bench.cpu_s(pid), 2)
        out["first_recall_hits"] = len(body.get("messages") or [])
        out.update({f"recall_{k}": v for k, v in restart_bench.rss(pid).items()})
        out["peak_rss_mb"] = restart_bench.status_kb(pid, "VmHWM") // 1024
    finally:
        stop = time.perf_counter()
        proc.send_signal(signal.SIGTERM)  # a clean stop writes the checkpoints again
        proc.wait(timeout=1800)
        out["stop_s"] = round(time.perf_counter() - stop, 2)
    return out


def checkpoint_once(data: Path, code: Path | None, deadline_s: float, stores: int) -> dict[str, Any]:
    """A running server's periodic checkpoint: ``memstream serve`` on ``data`` with
    ``MEMSTREAM_SNAPSHOT_EVERY=stores``; after /health and a first recall its peak RSS is reset,
    then ``stores`` new memories (the default embedder's vectors) make it checkpoint every read
    model once, as a server at 1M does every 100k events, in the next read's fold. The peak is
    that checkpoint's, or the stores' (``stores_peak_rss_mb``: also when the decision state's
    snapshot ran). Before 873ff37 that read waited for it; since, the read after it does."""
    marker = data / "snapshots" / "lexical.snap"
    before_mtime = marker.stat().st_mtime_ns
    env = restart_bench.clean_env(code) | {"MEMSTREAM_SNAPSHOT_EVERY": str(stores)}
    proc, port, started = start_server(data, env)
    pid = proc.pid
    out: dict[str, Any] = {}
    try:
        restart_bench.wait_for_health(proc, port, started, deadline_s, poll_s=0.05)
        ask = {"agent_id": AGENT, "query": QUERY, "limit": 10}
        post_json(f"http://127.0.0.1:{port}/v1/tools/recall", ask, 600)
        out.update({f"before_{k}": v for k, v in restart_bench.rss(pid).items()})
        out["start_peak_rss_mb"] = restart_bench.status_kb(pid, "VmHWM") // 1024
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM from here on
        cpu0 = restart_bench.cpu_s(pid)
        latencies = []
        run = time.time_ns()  # new contents every run: a store of a text already held adds no event
        for i in range(stores):
            t0 = time.perf_counter()
            body = {"agent_id": AGENT, "content": f"a new memory {i} of run {run}, about harbours and boats"}
            post_json(f"http://127.0.0.1:{port}/v1/tools/store", body, deadline_s)
            latencies.append(time.perf_counter() - t0)
        # What the stores alone raised it to (the embedder's batches, the writes, the decision
        # state's snapshot due at the last of them), before the read models' checkpoint.
        out["stores_rss_mb"] = restart_bench.rss(pid)["rss_mb"]
        out["stores_peak_rss_mb"] = restart_bench.status_kb(pid, "VmHWM") // 1024
        # Read models fold before a read: this recall folds the stores and, their count reaching
        # the setting, checkpoints every read model before it answers.
        t0 = time.perf_counter()
        post_json(f"http://127.0.0.1:{port}/v1/tools/recall", ask, deadline_s)
        out["recall_that_checkpoints_s"] = round(time.perf_counter() - t0, 2)
        # Since 873ff37 the checkpoint runs after that recall's answer: a store now goes through
        # beside it, and the next read waits for it. Before, both came after it.
        t0 = time.perf_counter()
        body = {"agent_id": AGENT, "content": f"a memory stored just after the checkpointing read, run {run}"}
        post_json(f"http://127.0.0.1:{port}/v1/tools/store", body, deadline_s)
        out["next_store_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        post_json(f"http://127.0.0.1:{port}/v1/tools/recall", ask, deadline_s)
        out["next_recall_s"] = round(time.perf_counter() - t0, 2)
        deadline = time.monotonic() + deadline_s
        while marker.stat().st_mtime_ns == before_mtime:
            if time.monotonic() > deadline:
                raise SystemExit(f"no checkpoint of {data} after {stores} stores")
            time.sleep(0.1)
        cpu = restart_bench.cpu_s(pid)
        while True:  # the other read models' saves: until the process is idle
            time.sleep(0.5)
            cpu, last = restart_bench.cpu_s(pid), cpu
            if cpu - last < 0.05:
                break
        out["checkpoint_cpu_s"] = round(restart_bench.cpu_s(pid) - cpu0, 2)
        out["slowest_store_s"] = round(max(latencies), 2)
        out["median_store_s"] = round(sorted(latencies)[len(latencies) // 2], 3)
        out.update({f"after_{k}": v for k, v in restart_bench.rss(pid).items()})
        out["checkpoint_peak_rss_mb"] = restart_bench.status_kb(pid, "VmHWM") // 1024
        out["peak_over_before_mb"] = out["checkpoint_peak_rss_mb"] - out["before_rss_mb"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=1800)
    return out


def cold_once(data: Path, code: Path | None, deadline_s: float, keep: bool) -> dict[str, Any]:
    """``serve_once`` with the checkpoints (read models' and the decision state's) moved aside;
    afterwards they are put back, or with ``keep`` the ones the stop wrote are kept instead."""
    snaps, aside = data / "snapshots", data / "snapshots.aside"
    if aside.exists():
        raise SystemExit(f"{aside} exists: a previous cold start did not finish; put it back first")
    snaps.rename(aside)
    ok = False
    try:
        out = serve_once(data, code, deadline_s)
        ok = True
        return out
    finally:
        if keep and ok:
            shutil.rmtree(aside)
        else:
            shutil.rmtree(snaps, ignore_errors=True)
            aside.rename(snaps)


def usearch_rate(data: Path, rows: int) -> dict[str, Any]:
    """usearch's own batch add (all cores, the projection's graph settings) of the first ``rows``
    vectors of the checkpoint's sidecar: the limit of a rebuild that builds vector graphs."""
    import numpy as np

    from memstream.api.services.settings import Settings
    from memstream.projections.vectors import VectorProjection
    from memstream.projections.vectors.graph import HnswConfig, new_index
    from memstream.streams.snapshots import SnapshotStore

    store = SnapshotStore(Settings(data_dir=data).snapshot_dir)
    body = store.load("vectors")
    if body is None:
        raise SystemExit(f"no vectors checkpoint in {data}")
    proj = VectorProjection(blobs=store, hnsw=False)
    proj.load_snapshot(body["state"])
    parts, keys, got = [], [], 0
    for ag in proj._agents.values():  # a bench reads the rows directly
        for seg in ag.segs.values():
            take = min(rows - got, seg.n)
            if take <= 0:
                continue
            parts.append(seg.gather(np.arange(take, dtype=np.int64)).astype(np.float32))
            keys.append(seg.keys[:take])
            got += take
    vecs = np.vstack(parts)
    index = new_index(vecs.shape[1], HnswConfig())
    t0, cpu0 = time.perf_counter(), time.process_time()
    index.add(np.concatenate(keys).astype(np.uint64), vecs, threads=0)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"rows": len(vecs), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "per_s": round(len(vecs) / wall)}


def f16_storage(rows: int, queries: int) -> dict[str, Any]:
    """What storing the vectors as float16 would change, on the real vectors (WordNet
    definitions, vector_search.py's cache): how often the exact top 10 of ``rows`` rows by
    float16-rounded vectors is the float32 one (recall@10), how far a score moves, and the CPU
    time of a 10k-row window's matrix-vector product from float32 rows against float16 rows
    (numpy has no float16 BLAS: they are widened first, or multiplied in float16)."""
    import numpy as np
    from vector_search import real_vectors

    docs, qs, _ = real_vectors()
    docs = docs[:rows].astype(np.float32)
    qs = qs[:queries].astype(np.float32)
    d32 = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    d16 = d32.astype(np.float16)
    w32, w16 = d32.astype(np.float64), d16.astype(np.float64)
    hits, moved = 0, 0.0
    for q in qs:
        q = (q / np.linalg.norm(q)).astype(np.float64)
        s32, s16 = w32 @ q, w16 @ q
        top32 = set(np.argpartition(-s32, 10)[:10].tolist())
        top16 = set(np.argpartition(-s16, 10)[:10].tolist())
        hits += len(top32 & top16)
        moved = max(moved, float(np.abs(s32 - s16).max()))
    win32, win16, q = d32[:10_000].copy(), d16[:10_000].copy(), qs[0]

    def cpu_ms(fn: Any, reps: int = 200) -> float:
        t = time.process_time()
        for _ in range(reps):
            fn()
        return round((time.process_time() - t) / reps * 1e3, 3)

    return {
        "rows": len(docs),
        "queries": len(qs),
        "recall_at_10": round(hits / (10 * len(qs)), 4),
        "max_score_change": float(f"{moved:.3g}"),
        "window_10k_cpu_ms_f32": cpu_ms(lambda: win32 @ q),
        "window_10k_cpu_ms_f16_widened": cpu_ms(lambda: win16.astype(np.float32) @ q),
        "window_10k_cpu_ms_f16_native": cpu_ms(lambda: win16 @ q.astype(np.float16)),
        "bytes_per_row_f32_f16": [docs.shape[1] * 4, docs.shape[1] * 2],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="a filled, checkpointed data directory")
    ap.add_argument(
        "--phases",
        default="cold,restart,components,limits",
        help="and checkpoint (a running server's periodic one), f16; limits = logread + usearch",
    )
    ap.add_argument("--runs", type=int, default=2, help="restarts per variant (cold starts: one each)")
    ap.add_argument("--code", action="append", default=[], help="NAME=DIR: a variant's memstream package")
    ap.add_argument(
        "--warmup",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a first, untimed restart of each variant (--no-warmup: the checkpoints are the variant's own)",
    )
    ap.add_argument(
        "--keep-cold-checkpoints",
        action="store_true",
        help="keep the checkpoints a cold start's stop writes (a directory filled without any)",
    )
    ap.add_argument("--checkpoint-stores", type=int, default=64, help="the checkpoint phase's stores")
    ap.add_argument("--usearch-rows", type=int, default=200_000)
    ap.add_argument("--deadline", type=float, default=1800, help="seconds a start may take")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "scale_1m.json")
    args = ap.parse_args(argv)
    for k in [k for k in os.environ if k.startswith("MEMSTREAM_")]:
        del os.environ[k]
    phases = {p for p in args.phases.split(",") if p}
    data: Path = args.data
    if not (data / "log.sqlite3").exists():
        raise SystemExit(f"{data} holds no log: fill it with bench/rebuild_speed.py --keep")
    variants: list[tuple[str, Path, Path | None]] = []
    for spec in args.code:
        name, _, code = spec.partition("=")
        vdata = data.with_name(f"{data.name}-{name}") if len(args.code) > 1 else data
        if not vdata.exists():
            log(f"copying {data} to {vdata}")
            shutil.copytree(data, vdata)
        variants.append((name, vdata, Path(code)))
    if not variants:
        variants = [("current", data, None)]
    from memstream.streams.log.sqlite import SqliteLog

    lg = SqliteLog(data / "log.sqlite3")
    try:
        memories = lg.end_offset()
    finally:
        lg.close()
    report: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python bench/scale_1m.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "load_start": os.getloadavg()},
        "events": memories,
        "data_dir_mb": round(sum(p.stat().st_size for p in data.rglob("*") if p.is_file()) / 2**20),
        "variants": {name: str(code) if code else "this code" for name, _, code in variants},
    }

    def save() -> None:
        report["machine"]["load_end"] = os.getloadavg()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")

    if "cold" in phases:
        colds = report["cold_starts"] = []
        for name, vdata, code in variants:
            got = {"variant": name, "load": round(os.getloadavg()[0], 2)}
            got.update(cold_once(vdata, code, args.deadline, args.keep_cold_checkpoints))
            log(json.dumps(got))
            colds.append(got)
            save()
    if "restart" in phases:
        for name, vdata, code in variants if args.warmup else []:
            # a first start leaves checkpoints in the variant's own format
            log(f"warm-up restart of {name}: {json.dumps(serve_once(vdata, code, args.deadline))}")
        runs = report["restarts"] = []
        for i in range(args.runs):
            for name, vdata, code in variants:
                got = {"variant": name, "run": i, "load": round(os.getloadavg()[0], 2)}
                got.update(serve_once(vdata, code, args.deadline))
                log(json.dumps(got))
                runs.append(got)
                save()
    if "checkpoint" in phases:
        runs = report["checkpoints"] = []
        for i in range(args.runs):
            for name, vdata, code in variants if i % 2 == 0 else variants[::-1]:
                got = {"variant": name, "run": i, "load": round(os.getloadavg()[0], 2)}
                got.update(checkpoint_once(vdata, code, args.deadline, args.checkpoint_stores))
                log(json.dumps(got))
                runs.append(got)
                save()
    if "components" in phases:
        for name, vdata, code in variants:
            times = restart_bench.child(vdata, "--times", code)
            sizes = restart_bench.child(vdata, "--bytes", code)
            comp: dict[str, Any] = {k: times.pop(k) for k in ("rss_mb", "rss_anon_mb", "rss_file_mb")}
            for key in ("rss_mb", "rss_anon_mb", "rss_file_mb"):
                sizes.pop(key)
            comp.update(restart_bench.by_component(times, sizes, memories))
            report[f"components_{name}"] = comp
            log(f"components of {name}: {json.dumps(comp)}")
            save()
    if phases & {"limits", "logread"}:
        import rebuild_speed

        from memstream.api.services.settings import Settings

        report["log_read"] = rebuild_speed.log_read_rate(Settings(data_dir=data))
        log(f"log read: {report['log_read']}")
        save()
    if phases & {"limits", "usearch"}:
        report["usearch_add"] = usearch_rate(data, args.usearch_rows)
        log(f"usearch add: {report['usearch_add']}")
        save()
    if "f16" in phases:
        report["f16_storage"] = f16_storage(117_000, 500)
        log(f"float16 storage: {report['f16_storage']}")
    save()
    print(json.dumps({k: v for k, v in report.items() if k not in ("restarts",)}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
