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
import shutil
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
    """One agent storing at a fixed rate; latencies tagged with the phase they were issued in,
    and with when they were issued (to cut the "before" phase into windows as long as the erase)."""

    def __init__(self, port: int, agent: str, rate: float) -> None:
        self.port, self.agent, self.interval = port, agent, 1.0 / rate
        self.phase = "before"
        self.lat: dict[str, list[float]] = {"before": [], "during": []}
        self.issued: dict[str, list[float]] = {"before": [], "during": []}
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
            self.issued[phase].append(t)
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

    def windows(self, length_s: float) -> list[float]:
        """The longest store of each window of ``length_s`` the "before" phase holds whole."""
        issued, lat = self.issued["before"], self.lat["before"]
        if not issued or length_s <= 0:
            return []
        start, longest = issued[0], []
        while start + length_s <= issued[-1]:
            inside = [x for t, x in zip(issued, lat, strict=True) if start <= t < start + length_s]
            if inside:
                longest.append(max(inside))
            start += length_s
        return longest


def baseline(steady: list[Steady], erase_s: float) -> dict[str, Any]:
    """The erase's window against windows as long without one (the "before" phase, after the
    worker settled): the longest store in each, all agents pooled."""
    longest = sorted(w for s in steady for w in s.windows(erase_s))
    during = max((x for s in steady for x in s.lat["during"]), default=0.0)
    if not longest:
        return {"windows": 0}
    median = longest[len(longest) // 2]
    return {
        "window_s": round(erase_s, 2),
        "windows": len(longest),
        "longest_ms_median": round(median * 1000, 2),
        "longest_ms_max": round(longest[-1] * 1000, 2),
        "during_longest_ms": round(during * 1000, 2),
        "during_over_median": round(during / median, 2) if median else None,
        "during_over_max": round(during / longest[-1], 2) if longest[-1] else None,
    }


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def newest_change(data: Path) -> float:
    """When a file under the worker's data directory (its checkpoints) last changed; 0 if none."""
    return max((f.stat().st_mtime for f in data.rglob("*") if f.is_file()), default=0.0)


async def settled(pid: int, data: Path, below: float = 0.2, deadline_s: float = 300.0) -> dict[str, float]:
    """Wait until the worker has written its checkpoints after the fill (no file of its data
    directory changed for 3 s) and uses less than ``below`` of a core over two seconds in a
    row, so the "before" phase is not the fill's tail (a 100k partition's checkpoint holds the
    interpreter lock for seconds)."""
    started = time.perf_counter()
    quiet = 0
    while time.perf_counter() - started < deadline_s:
        used = cpu_seconds(pid)
        await asyncio.sleep(1.0)
        quiet = quiet + 1 if cpu_seconds(pid) - used < below else 0
        if quiet >= 2 and time.time() - newest_change(data) > 3.0:
            break
    return {"seconds": round(time.perf_counter() - started, 1), "quiet": float(quiet >= 2)}


async def restart_with_embedder(
    worker: subprocess.Popen[bytes], start: Any, embedder: str, port: int, *agents: str
) -> float:
    """Stop the worker, start it again embedding with ``embedder``, and wait until a store of
    each of ``agents`` through the router succeeds (the router has learnt the new owner)."""
    started = time.perf_counter()
    worker.terminate()
    worker.wait(timeout=120)
    start({"MEMSTREAM_EMBEDDER": embedder})
    deadline = time.monotonic() + 600
    for agent in agents:
        while True:
            try:
                conn = Conn("127.0.0.1", port)
                await conn.open()
                body = orjson.dumps({"agent_id": agent, "content": "the first note after the restart"})
                status, raw = await conn.post("/v1/tools/store", body)
                await conn.close()
                if status == 200 and orjson.loads(raw).get("result") == "stored":
                    break
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("the worker did not come back with its embedder")
            await asyncio.sleep(0.5)
    return round(time.perf_counter() - started, 1)


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
    scratch = Path(tempfile.mkdtemp(prefix="memstream-bench-erase-"))
    log_path, data = scratch / "worker.log", scratch / "data"
    worker_log = open(log_path, "wb")  # noqa: SIM115 (closed once the worker has stopped)
    out: dict[str, Any] = {"memories": args.memories, "partitions": args.partitions, "workers": 1}
    out["label"], out["pythonpath"] = args.label, args.pythonpath
    try:
        # the worker logs each erasure's steps at INFO (api/kafka/worker/erasure.py, ``Steps``)
        cli = [*CLI[:-1], "INFO"]
        worker_env = {**env, "MEMSTREAM_DATA_DIR": str(data)}  # its checkpoints, removed after the run

        def start_worker(extra: dict[str, str]) -> subprocess.Popen[bytes]:
            run = subprocess.Popen([*cli, "worker", *kafka_args], env={**worker_env, **extra}, stdout=worker_log,
                                   stderr=worker_log)  # fmt: skip
            procs.procs.append(run)
            return run

        worker = start_worker({})
        procs.start([*CLI, "serve", *kafka_args, "--port", str(port)], env)
        await wait_ready(port, "/health", lambda b: b.get("partitions_with_owner") == args.partitions)
        out["fill"] = await fill(port, args.clients, args.memories)
        if args.embedder != "none":
            # Filled without embedding (100k embeddings would take most of an hour here), then
            # the worker is started again with the embedder: the other agents' stores embed.
            out["restart_s"] = await restart_with_embedder(worker, start_worker, args.embedder, port, same, elsewhere)
            worker = procs.procs[-1]
        out["settle"] = await settled(worker.pid, data)
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
        out["other_agents"]["against_before"] = baseline(steady, erase_s)
        out["erase"]["worker_steps"] = steps_logged(log_path)
        out["scan"] = await scan_cost(prefix, args.partitions, int(answer.get("offset") or 0))
        return out
    finally:
        procs.stop()
        await drop_topics(prefix)
        worker_log.close()
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--memories", type=int, default=20_000)
    ap.add_argument("--clients", type=int, default=16, help="concurrent stores while filling")
    ap.add_argument("--rate", type=float, default=20.0, help="stores/s of each other agent")
    ap.add_argument("--before-s", type=float, default=20.0, help="seconds of steady stores before the erase")
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--embedder", default="none", help="the worker's embedder for the other agents' stores (the "
                    "fill runs without one; the worker is restarted with it), e.g. default")  # fmt: skip
    ap.add_argument("--pythonpath", default="", help="PYTHONPATH of the worker and router (a before tree)")
    ap.add_argument("--label", default="", help="what this run measures (kept in the results)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "kafka_erasure.json")
    args = ap.parse_args()
    report = {
        "command": "python bench/kafka_erasure.py " + " ".join(sys.argv[1:]),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "embedding": "excluded (MEMSTREAM_EMBEDDER=none)" if args.embedder == "none" else
                     f"the other agents' stores: {args.embedder} (the fill: none)",
        "loadavg_start": list(os.getloadavg()),
        **asyncio.run(run(args)),
        "loadavg_end": list(os.getloadavg()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
