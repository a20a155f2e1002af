"""Restart from checkpoints: N memories with 384-d vectors, a server started on the filled data
directory, timed from process start to ``/health`` answering (wall, and the server's own CPU
seconds), with its RSS then (anonymous and file-backed: the vectors sidecar is mapped), and what
the first recall and store then take (against a second recall: whatever a start left for the
first call shows there); and, in fresh processes, what the configured embedder, the decision
state and each read model's checkpoint cost to load
(seconds; as the server loads them, with the cyclic collector paused when the code has that)
and to hold (bytes, by tracemalloc, which does not see a mapped file's pages), per memory.

    python bench/restart.py                          # 100k memories, 3 restarts per variant
    python bench/restart.py --data /tmp/d100k        # reuse (or keep) a filled directory
    python bench/restart.py --data /tmp/d100k --before-code /tmp/old --after-code /tmp/new

Two variants alternate in one run, so load on the machine falls on both alike. ``before``:
with ``--before-code`` (a directory holding another checkout's ``memstream`` package, e.g.
symlinks ``memstream/{api,projections,streams}`` into a worktree of the previous commit), that
code on a copy of the data directory; without, this code with the lexical checkpoint rewritten
as version 2 (texts only: the load analyses every text again). ``current``: this code (or
``--after-code``) on the checkpoints as the server leaves them. The fill is rebuild_speed.py's
(WordNet definitions with MiniLM vectors, straight through the embedded command bus).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import tracemalloc
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
MEMSTREAM = str(Path(sys.executable).with_name("memstream"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_health(
    proc: subprocess.Popen[bytes], port: int, started: float, deadline_s: float | None = None, poll_s: float = 0.02
) -> None:
    """Until the server's /health answers 200; raises if it exits first or the deadline passes."""
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"memstream serve exited with {proc.returncode}")
        if deadline_s is not None and time.perf_counter() - started > deadline_s:
            raise RuntimeError(f"no /health within {deadline_s} s")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(poll_s)


def clean_env(code: Path | None = None) -> dict[str, str]:
    """The environment without MEMSTREAM_ settings; with ``code``, memstream imported from there
    (a directory holding a ``memstream`` package: another checkout's, for a before/after)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_")}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    return env


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def rss(pid: int) -> dict[str, int]:
    """RSS in MB, and its parts: anonymous (the process's own) and file-backed (mapped files,
    e.g. the vectors sidecar: page cache the kernel can drop and read again)."""
    return {
        "rss_mb": status_kb(pid, "VmRSS") // 1024,
        "rss_anon_mb": status_kb(pid, "RssAnon") // 1024,
        "rss_file_mb": status_kb(pid, "RssFile") // 1024,
    }


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used: on a loaded machine, the start's own cost."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def as_lexical_v2(data: Path) -> None:
    """Rewrite the lexical checkpoint as version 2 (rows only) and drop its sidecars."""
    from memstream.projections.lexical.rows import rows_of
    from memstream.streams.snapshots import SnapshotStore

    store = SnapshotStore(data / "snapshots")
    body = store.load("lexical")
    if body is None:
        raise SystemExit(f"no lexical checkpoint in {data}")
    lists = {agent: [list(r) for r in rows.rows()] for agent, rows in rows_of(body["state"]).items()}
    store.save("lexical", {"offset": body["offset"], "state": {"version": 2, "agents": lists}})
    for name in store.blob_names("lexical-"):
        store.drop_blob(name)


def restart(data: Path, code: Path | None) -> dict[str, Any]:
    """Start ``memstream serve`` on ``data``: seconds until /health answers 200, RSS then."""
    port = free_port()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [MEMSTREAM, "serve", "--data-dir", str(data), "--port", str(port)],
        env=clean_env(code),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_health(proc, port, started)
        seconds = time.perf_counter() - started
        out: dict[str, Any] = {
            "health_s": round(seconds, 2),
            "cpu_s": round(cpu_s(proc.pid), 2),
            **rss(proc.pid),
            "peak_rss_mb": status_kb(proc.pid, "VmHWM") // 1024,
        }
        # What the first calls pay after /health (a model or index loaded on demand shows here),
        # against the same calls again: a recall, a store (embedded), then a recall again.
        base = f"http://127.0.0.1:{port}/v1/tools"
        query = {"agent_id": "eval", "query": "a unit of money", "limit": 10}
        for name, tool, args in (
            ("first_recall_ms", "recall", query),
            ("first_store_ms", "store", {"agent_id": "restart-probe", "content": f"a restart at {time.time()}"}),
            ("second_recall_ms", "recall", query),
        ):
            t = time.perf_counter()
            body = json.dumps(args).encode()
            call = urllib.request.Request(f"{base}/{tool}", body, {"content-type": "application/json"})
            with urllib.request.urlopen(call, timeout=120) as r:
                r.read()
            out[name] = round((time.perf_counter() - t) * 1000, 1)
        out["cpu_after_calls_s"] = round(cpu_s(proc.pid), 2)
        out.update({f"{k}_after_calls": v for k, v in rss(proc.pid).items()})  # a model loaded on demand counts
        return out
    finally:
        proc.send_signal(signal.SIGTERM)  # a clean stop writes the checkpoints again
        proc.wait(timeout=300)


def components(data: Path, trace: bool) -> dict[str, Any]:
    """In this (fresh) process: each read model's checkpoint load, and the decision state's:
    wall and CPU seconds, or (``trace``) the bytes it holds after loading (tracemalloc: Python
    objects and numpy arrays; tracing slows the loads, so the times come from a run without)."""
    from memstream.api.services.settings import Settings
    from memstream.projections import catalog
    from memstream.streams.buses.embedded import EmbeddedCommandBus
    from memstream.streams.log.sqlite import SqliteLog
    from memstream.streams.snapshots import SnapshotStore

    settings = Settings(data_dir=data)
    store = SnapshotStore(settings.snapshot_dir)
    out: dict[str, Any] = {}
    held: list[Any] = []

    def measure(name: str, load: Any) -> None:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0] if trace else 0
        wall, cpu = time.perf_counter(), time.process_time()
        held.append(load())
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        gc.collect()
        if trace:
            out[name] = {"bytes": tracemalloc.get_traced_memory()[0] - before}
        else:
            out[name] = {"load_s": round(wall, 3), "cpu_s": round(cpu, 3)}

    def read_model(model: Any) -> Any:
        body = store.load(model.name)
        p = model.make(store, settings.read_model_options)
        if body is not None:
            p.load_snapshot(body["state"])
        return p

    def decision() -> Any:
        log = SqliteLog(settings.log_path, num_partitions=settings.partitions, synchronous=settings.sync)
        bus = EmbeddedCommandBus(log, snapshots=store, snapshot_every=settings.snapshot_every)
        asyncio.run(bus.start())
        return bus

    try:  # as the server loads them: with the cyclic collector paused (when the code has it)
        from memstream.streams.folding import collector_paused
    except ImportError:
        collector_paused = contextlib.nullcontext

    def embedder() -> Any:  # the configured model: a start loads it too (the first store needs it)
        from memstream.api.services.embedding import load_embedder

        return load_embedder(url=settings.embedding_url, name=settings.embedder)

    if trace:
        tracemalloc.start()
    measure("embedder", embedder)
    measure("decision", decision)  # the server loads it first
    with collector_paused():
        for model in catalog.CATALOG:
            measure(model.name, lambda m=model: read_model(m))
    if trace:
        tracemalloc.stop()
    out.update(rss(os.getpid()))
    return out


def by_component(times: dict[str, Any], sizes: dict[str, Any], memories: int) -> dict[str, Any]:
    """Each component's load times beside its traced bytes (per memory too), and their total."""
    out: dict[str, Any] = {}
    for name, t in times.items():
        b = sizes[name]["bytes"]
        out[name] = {**t, "bytes": b, "bytes_per_memory": round(b / memories)}
    out["total_bytes_per_memory"] = round(sum(sizes[k]["bytes"] for k in times) / memories)
    return out


def child(data: Path, mode: str, code: Path | None) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, mode, str(data)], check=True, capture_output=True, text=True, env=clean_env(code)
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--memories", type=int, default=100_000)
    ap.add_argument("--data", type=Path, default=None, help="a filled data directory (filled here if empty)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--before-code",
        type=Path,
        default=None,
        help="a directory holding the previous release's `memstream` package: the before variant runs"
        " it on a copy of the data directory (default: this code, with the lexical checkpoint as version 2)",
    )
    ap.add_argument(
        "--after-code", type=Path, default=None, help="the same for the current variant (default: this code)"
    )
    ap.add_argument("--times", type=Path, default=None, help=argparse.SUPPRESS)  # the children's modes
    ap.add_argument("--bytes", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "restart.json")
    args = ap.parse_args(argv)
    for k in [k for k in os.environ if k.startswith("MEMSTREAM_")]:
        del os.environ[k]
    if args.times is not None or args.bytes is not None:
        print(json.dumps(components(args.times or args.bytes, trace=args.bytes is not None)))
        return 0
    import rebuild_speed
    from rebuild_speed import recall_latency

    data = args.data or Path(f"/tmp/ms-restart-{args.memories}")
    report: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python bench/restart.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "load_start": os.getloadavg()},
        "memories": args.memories,
    }
    if not (data / "log.sqlite3").exists():
        from memstream.api.services.settings import Settings

        workload = recall_latency.Workload(1)
        texts, vecs = workload.corpus(args.memories)
        report["fill"] = asyncio.run(recall_latency.fill(data, texts, vecs, workload.model_id))
        report["checkpoint_s"] = round(asyncio.run(rebuild_speed.checkpoint(Settings(data_dir=data))), 2)
    report["data_dir_mb"] = round(sum(p.stat().st_size for p in data.rglob("*") if p.is_file()) / 2**20)
    # (name, data directory, code): the previous code on a copy of the data, or this code with
    # the lexical checkpoint rewritten as version 2 before each start.
    before_data = data.with_name(data.name + "-before") if args.before_code else data
    if args.before_code and not before_data.exists():
        shutil.copytree(data, before_data)
    variants = [("before", before_data, args.before_code), ("current", data, args.after_code)]
    for variant, vdata, code in variants:  # a first start leaves checkpoints in the variant's own format
        recall_latency.log(f"warm-up start of {variant}: {json.dumps(restart(vdata, code))}")
    runs: list[dict[str, Any]] = []
    for i in range(args.runs):
        for variant, vdata, code in variants:
            if variant == "before" and args.before_code is None:
                as_lexical_v2(vdata)
            got = {"variant": variant, "run": i, "load": round(os.getloadavg()[0], 2), **restart(vdata, code)}
            recall_latency.log(json.dumps(got))
            runs.append(got)
    report["restarts"] = runs
    report["before"] = str(args.before_code) if args.before_code else "this code, lexical checkpoint as version 2"
    n = args.memories
    for variant, vdata, code in variants:
        times, sizes = child(vdata, "--times", code), child(vdata, "--bytes", code)
        comp: dict[str, Any] = {
            "rss_mb_after_loading": times.pop("rss_mb"),
            "rss_anon_mb_after_loading": times.pop("rss_anon_mb"),
            "rss_file_mb_after_loading": times.pop("rss_file_mb"),
            "rss_mb_traced": sizes.pop("rss_mb"),
        }
        for key in ("rss_anon_mb", "rss_file_mb"):
            sizes.pop(key)
        comp.update(by_component(times, sizes, n))
        report[f"components_{variant}"] = comp
        mine = [r for r in runs if r["variant"] == variant]
        keys = ("health_s", "cpu_s", "rss_mb", "rss_anon_mb", "rss_file_mb", "first_recall_ms", "first_store_ms")
        for key in (*keys, "second_recall_ms", "cpu_after_calls_s", "rss_anon_mb_after_calls"):
            report[f"median_{key}_{variant}"] = sorted(r[key] for r in mine)[len(mine) // 2]
    report["machine"]["load_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "restarts"}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
