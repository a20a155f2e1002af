"""Kafka mode end to end: store throughput, store→visible latency and rebuild rate, with 1 and 2
workers, against the embedded server on the same machine in the same run (the baseline).

    bash infra/kafka-local.sh start
    python bench/kafka_throughput.py                      # 1 and 2 workers, 8 clients, 4,000 stores
    python bench/kafka_throughput.py --stores 800 --trials 50 --workers 1 --rebuild-events 0   # quick

Everything is real processes on loopback: `memstream worker` ×N, `memstream serve --kafka`
(the router) and clients speaking raw HTTP/1.1 to it. Embedding is excluded by default
(`MEMSTREAM_EMBEDDER=none`: memories carry no vectors), so the figures are memstream's and
Kafka's. ``--embedder default`` embeds on the workers with the default model: each Kafka store
run then sits between two windows of the model's standalone rate on the same texts (as
bench/store_throughput.py does), and reports its ratio to it and what the workers' batchers did;
``--regroup 0,1`` alternates MEMSTREAM_EMBED_BATCH_REGROUP on the workers (``--spin never,call``
MEMSTREAM_EMBEDDING_SPIN), in reverse order every other round. Stores spread over 64
agents, so every partition has work. Results: JSON on stdout and in bench/results/kafka.json.

    python bench/kafka_throughput.py --embedder default --workers 1 --stores 800 --trials 50 \
        --rebuild-events 0 --skip-embedded --regroup 0,1 --rounds 2
"""

from __future__ import annotations

import base64
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads (as `memstream` does: api/cli/commands.py)
# Kafka mode seals its topics and needs the deployment's master key in every process it starts:
# a throwaway one unless the caller gives its own.
os.environ.setdefault("MEMSTREAM_MASTER_KEY", base64.b64encode(os.urandom(32)).decode())

import argparse
import asyncio
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from store_throughput import Conn, ModelRate, batching, free_port

ROOT = Path(__file__).resolve().parents[1]
BOOTSTRAP = os.environ.get("MEMSTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
AGENTS = [f"agent-{i:02d}" for i in range(64)]
CLI = [sys.executable, "-m", "memstream.api.cli", "--log-level", "WARNING"]


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return round(1000 * s[min(len(s) - 1, int(len(s) * q))], 2)


class Procs:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, args: list[str], env: dict[str, str], log: Path | None = None) -> None:
        """``log``: where its stderr goes (else nowhere)."""
        if log is None:
            self.procs.append(subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            return
        with log.open("wb") as err:
            self.procs.append(subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=err))

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


async def wait_ready(port: int, path: str, ok: Any, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            c = Conn("127.0.0.1", port)
            await c.open()
            status, raw = await c.post(path, b"{}") if path.startswith("/v1") else await get(c, path)
            await c.close()
            if status == 200 and ok(orjson.loads(raw)):
                return
        except (OSError, ValueError):
            pass
        await asyncio.sleep(0.25)
    raise TimeoutError(f"not ready: {path} on {port}")


async def get(c: Conn, path: str) -> tuple[int, bytes]:
    assert c.reader is not None and c.writer is not None
    c.writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    status = int((await c.reader.readline()).split()[1])
    length = 0
    while True:
        line = await c.reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    return status, await c.reader.readexactly(length)


def store_text(tag: str, n: int, i: int) -> str:
    return f"{tag} {n} {i}: deploy key {i % 97} rotates weekly"


def embedder_env(args: argparse.Namespace, settings: dict[str, str] | None = None) -> dict[str, str]:
    """The processes' environment: the embedder (``--embedder``) and ``settings`` on top."""
    env = {**os.environ, **(settings or {})}
    if args.embedder == "none":
        env["MEMSTREAM_EMBEDDER"] = "none"
    else:
        env.pop("MEMSTREAM_EMBEDDER", None)
    return env


async def stores(port: int, clients: int, total: int, tag: str) -> dict[str, Any]:
    per = total // clients
    lat: list[float] = []
    errors = 0

    async def one(n: int) -> None:
        nonlocal errors
        conn = Conn("127.0.0.1", port)
        await conn.open()
        for i in range(per):
            agent = AGENTS[(n * per + i) % len(AGENTS)]
            body = orjson.dumps({"agent_id": agent, "content": store_text(tag, n, i)})
            t = time.perf_counter()
            status, raw = await conn.post("/v1/tools/store", body)
            lat.append(time.perf_counter() - t)
            if status != 200 or orjson.loads(raw).get("result") != "stored":
                errors += 1
        await conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(one(n) for n in range(clients)))
    elapsed = time.perf_counter() - started
    return {
        "clients": clients,
        "stores": len(lat),
        "errors": errors,
        "stores_per_s": round(len(lat) / elapsed, 1),
        "p50_ms": pct(lat, 0.5),
        "p99_ms": pct(lat, 0.99),
        "mean_ms": round(1000 * statistics.fmean(lat), 2),
    }


async def visibility(port: int, trials: int) -> dict[str, Any]:
    """Store a memory with a unique word, then recall that word until the memory shows."""
    conn = Conn("127.0.0.1", port)
    await conn.open()
    lat: list[float] = []
    recalls: list[int] = []
    for i in range(trials):
        word = f"probe{uuid.uuid4().hex[:10]}"
        agent = AGENTS[i % len(AGENTS)]
        t = time.perf_counter()
        await conn.post("/v1/tools/store", orjson.dumps({"agent_id": agent, "content": f"marker {word} set"}))
        n = 0
        while True:
            n += 1
            _, raw = await conn.post("/v1/tools/recall", orjson.dumps({"agent_id": agent, "query": word, "limit": 3}))
            if any(word in m.get("content", "") for m in orjson.loads(raw).get("messages", [])):
                break
            if time.perf_counter() - t > 10:
                raise TimeoutError(f"{word} not visible after 10 s")
        lat.append(time.perf_counter() - t)
        recalls.append(n)
    await conn.close()
    return {"trials": trials, "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99), "recalls_max": max(recalls)}


async def kafka_run(
    workers: int, args: argparse.Namespace, model: ModelRate | None = None, settings: dict[str, str] | None = None
) -> dict[str, Any]:
    """With ``model`` (an embedder on the workers), the store run sits between two windows of
    the model's standalone rate: ``ratio_to_model_batch_rate`` is stores/s over their mean best."""
    from memstream.api.kafka.worker.replay import rebuild_partitions
    from memstream.streams.log.kafka import KafkaConfig

    prefix = f"memstream-bench-{uuid.uuid4().hex[:8]}"
    cfg = KafkaConfig(bootstrap=BOOTSTRAP, prefix=prefix, partitions=args.partitions)
    kafka_args = ["--kafka", BOOTSTRAP, "--prefix", prefix, "--partitions", str(args.partitions)]
    env = embedder_env(args, settings)
    logs = Path(tempfile.mkdtemp(prefix="memstream-bench-logs-"))
    worker_logs = [logs / f"worker-{i}.log" for i in range(workers)]
    procs = Procs()
    port = free_port()
    out: dict[str, Any] = {"workers": workers, "partitions": args.partitions, "settings": settings or {}}
    try:
        for log in worker_logs:  # INFO: a worker logs what its batcher did when it stops
            procs.start([*CLI[:-1], "INFO", "worker", *kafka_args], env, log)
        procs.start([*CLI, "serve", *kafka_args, "--port", str(port)], env)
        await wait_ready(port, "/health", lambda b: b.get("partitions_with_owner") == args.partitions)
        await stores(port, args.clients, 200, "warmup")
        before = model.measure() if model is not None else None
        out["store"] = await stores(port, args.clients, args.stores, "kafka")
        out["load"] = round(os.getloadavg()[0], 2)
        if before is not None and model is not None:
            after = model.measure()
            out["model_before"], out["model_after"] = before, after
            ceiling = (ModelRate.best(before) + ModelRate.best(after)) / 2
            out["ratio_to_model_batch_rate"] = round(out["store"]["stores_per_s"] / ceiling, 3)
        out["store_to_visible"] = await visibility(port, args.trials)
        if args.rebuild_after:
            rebuilt = await rebuild_partitions(cfg, jobs=os.cpu_count() or 1)
            out["rebuild"] = {k: rebuilt.get(k) for k in ("events", "seconds", "events_per_second", "jobs")}
        return out
    finally:
        procs.stop()
        if args.embedder != "none":
            out["batching"] = batching(worker_logs)  # the warm-up's and the visibility probes' calls too
        shutil.rmtree(logs, ignore_errors=True)
        await drop_topics(prefix)


async def drop_topics(prefix: str) -> None:
    from memstream.streams.log.kafka import delete_topics_with_prefix

    await delete_topics_with_prefix(BOOTSTRAP, prefix)


def decided_stores(state: Any, first: int, stop: int, rng: Any, dim: int) -> list[Any]:
    """The events of stores ``first`` to ``stop`` (exclusive) as the decider makes them, spread over
    the 64 agents, each with a random ``dim``-d vector (0: none)."""
    import numpy as np

    from memstream.streams import commands as c
    from memstream.streams.deciders.step import NewAudit, NewEvent, decide_and_fold
    from memstream.streams.decision.limits import Limits
    from memstream.streams.events import Actor, Embedding, Scope, utcnow

    out: list[NewEvent] = []
    audits: list[NewAudit] = []
    for i in range(first, stop):
        vec = Embedding.from_vector(f"bench-{dim}", rng.standard_normal(dim).astype(np.float32)) if dim else None
        cmd = c.StoreMemory(
            command_id=f"r{i}",
            scope=Scope(agent_id=AGENTS[i % len(AGENTS)]),
            actor=Actor(client_id="bench"),
            received_at=utcnow(),
            content=f"note {i}: the deploy key for service {i % 97} rotates weekly",
            embedding=vec,
        )
        decide_and_fold(state, cmd, Limits(), out, audits)
    return out


async def rebuild_run(events: int, partitions: int) -> dict[str, Any]:
    """Replay rate on a topic of ``events`` decided stores (64 agents, 64-dim vectors), written
    straight through the log adapter (deciding them through workers would take minutes)."""
    import numpy as np

    from memstream.api.kafka.worker.replay import rebuild_partitions
    from memstream.streams.decision.state import DecisionState
    from memstream.streams.log.kafka import KafkaConfig, KafkaLog, ensure_topics

    prefix = f"memstream-bench-{uuid.uuid4().hex[:8]}"
    cfg = KafkaConfig(bootstrap=BOOTSTRAP, prefix=prefix, partitions=partitions)
    await ensure_topics(cfg)
    kafka = KafkaLog(cfg)
    await kafka.start()
    try:
        state = DecisionState(partitions)
        rng = np.random.default_rng(7)
        written = 0
        while written < events:
            out = decided_stores(state, written, min(events, written + 2000), rng, 64)
            await kafka.append([(e.agent, e.type, e.value, e.vector) for e in out])
            written += len(out)
        out: dict[str, Any] = {}
        digests = []
        for jobs in sorted({1, os.cpu_count() or 1}):
            rebuilt = await rebuild_partitions(cfg, jobs=jobs)
            digests.append(rebuilt["partitions"])
            keys = ("events", "seconds", "events_per_second", "setup_seconds", "wall_seconds")
            out[f"jobs_{jobs}"] = {k: rebuilt.get(k) for k in keys}
        out["digests_equal_across_jobs"] = all(d == digests[0] for d in digests)
        return out
    finally:
        await kafka.close()
        await drop_topics(prefix)


async def embedded_run(args: argparse.Namespace) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="memstream-bench-embedded-"))
    # The bench takes its broker from MEMSTREAM_KAFKA_BOOTSTRAP, which `serve` reads too: left in,
    # the embedded baseline would start as a Kafka router.
    env = {k: v for k, v in embedder_env(args).items() if k != "MEMSTREAM_KAFKA_BOOTSTRAP"}
    env["MEMSTREAM_DATA_DIR"] = str(data)
    procs = Procs()
    port = free_port()
    try:
        procs.start([*CLI, "serve", "--port", str(port)], env)
        await wait_ready(port, "/v1/tools/check_health", lambda b: "status" in b)
        await stores(port, args.clients, 200, "warmup")
        return {
            "store": await stores(port, args.clients, args.stores, "embedded"),
            "store_to_visible": await visibility(port, args.trials),
        }
    finally:
        procs.stop()
        shutil.rmtree(data, ignore_errors=True)  # the baseline's log: nothing reads it after


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "command": "python bench/kafka_throughput.py " + " ".join(sys.argv[1:]),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "bootstrap": BOOTSTRAP,
        "loadavg_start": list(os.getloadavg()),
        "embedding": "excluded (MEMSTREAM_EMBEDDER=none)" if args.embedder == "none" else args.embedder,
        "kafka": [],
    }
    report["ratios"] = {}
    model = None
    if args.embedder != "none":
        model = ModelRate(texts=[store_text("kafka", n % args.clients, n // args.clients) for n in range(4_096)])
    regroups = [{"MEMSTREAM_EMBED_BATCH_REGROUP": v} for v in args.regroup.split(",") if v] or [{}]
    spins = [{"MEMSTREAM_EMBEDDING_SPIN": v} for v in args.spin.split(",") if v] or [{}]
    variants = [regroup | spin for regroup in regroups for spin in spins]
    if not args.only_rebuild:
        if not args.skip_embedded:
            report["embedded_baseline"] = await embedded_run(args)
        for rnd in range(args.rounds):
            for w in [int(x) for x in args.workers.split(",")]:
                for variant in variants if rnd % 2 == 0 else variants[::-1]:  # A/B, then B/A
                    run = await kafka_run(w, args, model, variant)
                    run["round"] = rnd
                    print(json.dumps(run), flush=True)
                    report["kafka"].append(run)
        runs = {r["workers"]: r for r in report["kafka"] if r["round"] == 0 and r["settings"] == variants[0]}
        if "embedded_baseline" in report:
            base = report["embedded_baseline"]["store"]["stores_per_s"]
            report["ratios"] = {
                f"kafka_{w}w_over_embedded_stores": round(r["store"]["stores_per_s"] / base, 2) for w, r in runs.items()
            }
        if 1 in runs and 2 in runs:
            report["ratios"]["stores_2w_over_1w"] = round(
                runs[2]["store"]["stores_per_s"] / runs[1]["store"]["stores_per_s"], 2
            )
    if args.rebuild_events:
        report["loadavg_before_rebuild"] = list(os.getloadavg())
        rebuilt = report["rebuild_large_topic"] = await rebuild_run(args.rebuild_events, args.partitions)
        rates = {k: v["events_per_second"] for k, v in rebuilt.items() if k.startswith("jobs_")}
        if len(rates) > 1:
            report["ratios"]["rebuild_parallel_over_one_process"] = round(max(rates.values()) / rates["jobs_1"], 2)
    report["loadavg_end"] = list(os.getloadavg())
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stores", type=int, default=4000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--rebuild-events", type=int, default=200_000, help="replay rate on a topic this large (0: skip)")
    ap.add_argument("--only-rebuild", action="store_true", help="only the replay-rate measurement")
    ap.add_argument("--embedder", default="none", choices=["none", "default"], help="embed on the workers")
    ap.add_argument("--regroup", default="", help="MEMSTREAM_EMBED_BATCH_REGROUP values to alternate (e.g. 0,1)")
    ap.add_argument(
        "--spin", default="", help="MEMSTREAM_EMBEDDING_SPIN values on the workers, alternating with --regroup's"
    )
    ap.add_argument("--rounds", type=int, default=1, help="repeat the Kafka runs (with --regroup: A/B, then B/A)")
    ap.add_argument("--skip-embedded", action="store_true", help="no embedded-server baseline")
    ap.add_argument(
        "--no-rebuild-after", dest="rebuild_after", action="store_false", help="no replay after each Kafka run"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "kafka.json")
    args = ap.parse_args()
    report = asyncio.run(main_async(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
