"""erase_agent_data in Kafka mode (issue 16): how long the erase of one agent holding N memories
takes through the router, and the latency of other agents' stores before and during it.

    bash infra/kafka-local.sh start
    python bench/kafka_erasure.py                  # N = 20,000
    python bench/kafka_erasure.py --memories 100000

Real processes on loopback, as bench/kafka_throughput.py starts them: one `memstream worker` and
`memstream serve --kafka` on a throwaway prefix of the broker, embedding excluded
(`MEMSTREAM_EMBEDDER=none`). The erased agent is filled with --memories stores (--clients at a
time); two other agents store at a steady --rate each, one on the erased agent's partition
and one on another, from before the erase until it answers: their p50/p99 before vs during
come from the same run. Results: bench/results/kafka_erasure.json (or --out).

A before/after in one session: ``--pythonpath DIR`` runs the worker and the router with DIR
first on their path, e.g. a directory holding a ``memstream`` package whose ``api``,
``streams`` and ``projections`` are an earlier commit's (``git archive``), alternated with
runs of the tree as it is.
"""

from __future__ import annotations

import base64
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MEMSTREAM_MASTER_KEY", base64.b64encode(os.urandom(32)).decode())

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from kafka_throughput import BOOTSTRAP, CLI, Procs, drop_topics, pct, wait_ready
from store_throughput import Conn, free_port

ROOT = Path(__file__).resolve().parents[1]
ERASED = "erased-agent"


def other_agents(partitions: int) -> tuple[str, str]:
    """An agent on the erased agent's partition and one on another partition."""
    from memstream.streams.log.port import partition_for

    target = partition_for(ERASED, partitions)
    same = next(f"other-{i}" for i in range(10_000) if partition_for(f"other-{i}", partitions) == target)
    elsewhere = next(f"other-{i}" for i in range(10_000) if partition_for(f"other-{i}", partitions) != target)
    return same, elsewhere


async def fill(port: int, clients: int, total: int) -> dict[str, Any]:
    done = 0
    errors = 0

    async def one(n: int) -> None:
        nonlocal done, errors
        conn = Conn("127.0.0.1", port)
        await conn.open()
        for i in range(n, total, clients):
            content = f"note {i}: service {i % 97} deploy key rotates weekly"
            body = orjson.dumps({"agent_id": ERASED, "content": content})
            status, raw = await conn.post("/v1/tools/store", body)
            if status != 200 or orjson.loads(raw).get("result") != "stored":
                errors += 1
            done += 1
        await conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(one(n) for n in range(clients)))
    elapsed = time.perf_counter() - started
    return {"stores": done, "errors": errors, "seconds": round(elapsed, 1), "stores_per_s": round(done / elapsed, 1)}


class Steady:
    """One agent storing at a fixed rate; latencies tagged with the phase they were issued in."""

    def __init__(self, port: int, agent: str, rate: float) -> None:
        self.port, self.agent, self.interval = port, agent, 1.0 / rate
        self.phase = "before"
        self.lat: dict[str, list[float]] = {"before": [], "during": []}
        self.errors = 0
        self.stop = asyncio.Event()

    async def run(self) -> None:
        conn = Conn("127.0.0.1", self.port)
        await conn.open()
        i = 0
        next_at = time.perf_counter()
        while not self.stop.is_set():
            phase = self.phase
            body = orjson.dumps({"agent_id": self.agent, "content": f"steady {i}: the build cache is warm"})
            t = time.perf_counter()
            status, raw = await conn.post("/v1/tools/store", body)
            self.lat[phase].append(time.perf_counter() - t)
            if status != 200 or orjson.loads(raw).get("result") != "stored":
                self.errors += 1
            i += 1
            next_at += self.interval
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
        await conn.close()

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {"agent": self.agent, "errors": self.errors}
        for phase, lat in self.lat.items():
            if lat:
                out[phase] = {"stores": len(lat), "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99)}
                out[phase]["max_ms"] = pct(lat, 1)
        return out


def steps_logged(path: Path) -> dict[str, float]:
    """The seconds of each step of the erasure, from the worker's log line."""
    for line in reversed(path.read_text(encoding="utf-8", errors="replace").splitlines()):
        if "erasure at offset" in line and " steps " in line:
            pairs = line.split(" steps ", 1)[1].split()
            return {k: float(v.rstrip("s")) for k, _, v in (p.partition("=") for p in pairs)}
    return {}


async def scan_cost(prefix: str, partitions: int, offset: int) -> dict[str, Any]:
    """What the erasure's scan costs alone: ``sealed_before`` + ``keys_named`` of the erased
    agent at the erasure's offset, timed in this process after the erase (same topics)."""
    from memstream.api.kafka.worker.erasure import sealed_before
    from memstream.streams.log.kafka import KafkaConfig, KafkaLog
    from memstream.streams.log.port import partition_for
    from memstream.streams.log.sealed_keys import keys_named

    cfg = KafkaConfig(bootstrap=BOOTSTRAP, prefix=prefix, partitions=partitions)
    kafka = KafkaLog(cfg)
    await kafka.start()
    try:
        t = time.perf_counter()
        records = await sealed_before(kafka, cfg, partition_for(ERASED, partitions), ERASED, offset)
        read_s = time.perf_counter() - t
        keys = keys_named(((o, v) for _, o, v in records), ERASED, None, offset)
        total_s = time.perf_counter() - t
    finally:
        await kafka.close()
    return {"records": len(records), "keys": len(keys), "read_seconds": round(read_s, 2), "seconds": round(total_s, 2)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    prefix = f"memstream-bench-erase-{uuid.uuid4().hex[:8]}"
    kafka_args = ["--kafka", BOOTSTRAP, "--prefix", prefix, "--partitions", str(args.partitions)]
    env = {**os.environ, "MEMSTREAM_EMBEDDER": "none"}
    if args.pythonpath:
        env["PYTHONPATH"] = args.pythonpath
    procs = Procs()
    port = free_port()
    same, elsewhere = other_agents(args.partitions)
    log_path = Path(tempfile.mkdtemp(prefix="memstream-bench-erase-")) / "worker.log"
    worker_log = open(log_path, "wb")  # noqa: SIM115 (closed once the worker has stopped)
    out: dict[str, Any] = {"memories": args.memories, "partitions": args.partitions, "workers": 1}
    out["label"], out["pythonpath"] = args.label, args.pythonpath
    try:
        # the worker logs each erasure's steps at INFO (api/kafka/worker/erasure.py, ``Steps``)
        cli = [*CLI[:-1], "INFO"]
        worker = subprocess.Popen([*cli, "worker", *kafka_args], env=env, stdout=worker_log, stderr=worker_log)
        procs.procs.append(worker)
        procs.start([*CLI, "serve", *kafka_args, "--port", str(port)], env)
        await wait_ready(port, "/health", lambda b: b.get("partitions_with_owner") == args.partitions)
        out["fill"] = await fill(port, args.clients, args.memories)
        steady = [Steady(port, same, args.rate), Steady(port, elsewhere, args.rate)]
        tasks = [asyncio.create_task(s.run()) for s in steady]
        await asyncio.sleep(args.before_s)
        out["loadavg_before_erase"] = list(os.getloadavg())
        for s in steady:
            s.phase = "during"
        conn = Conn("127.0.0.1", port)
        await conn.open()
        t = time.perf_counter()
        body = orjson.dumps({"agent_id": ERASED, "reason": "bench"})
        status, raw = await conn.post("/v1/tools/erase_agent_data", body)
        erase_s = time.perf_counter() - t
        await conn.close()
        for s in steady:
            s.stop.set()
        await asyncio.gather(*tasks)
        answer = orjson.loads(raw)
        out["erase"] = {
            "status": status,
            "seconds": round(erase_s, 2),
            "ok": answer.get("ok"),
            "erased_memories": answer.get("erased_memories"),
            "keys_destroyed": answer.get("keys_destroyed"),
            "unreachable": answer.get("unreachable"),
            "error": answer.get("error"),
        }
        out["other_agents"] = {"same_partition": steady[0].report(), "other_partition": steady[1].report()}
        out["erase"]["worker_steps"] = steps_logged(log_path)
        out["scan"] = await scan_cost(prefix, args.partitions, int(answer.get("offset") or 0))
        return out
    finally:
        procs.stop()
        await drop_topics(prefix)
        worker_log.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--memories", type=int, default=20_000)
    ap.add_argument("--clients", type=int, default=16, help="concurrent stores while filling")
    ap.add_argument("--rate", type=float, default=20.0, help="stores/s of each other agent")
    ap.add_argument("--before-s", type=float, default=5.0, help="seconds of steady stores before the erase")
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--pythonpath", default="", help="PYTHONPATH of the worker and router (a before tree)")
    ap.add_argument("--label", default="", help="what this run measures (kept in the results)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "kafka_erasure.json")
    args = ap.parse_args()
    report = {
        "command": "python bench/kafka_erasure.py " + " ".join(sys.argv[1:]),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "embedding": "excluded (MEMSTREAM_EMBEDDER=none)",
        "loadavg_start": list(os.getloadavg()),
        **asyncio.run(run(args)),
        "loadavg_end": list(os.getloadavg()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
