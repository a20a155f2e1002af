"""A bounded load test: concurrent clients mixing store, recall and reconstruct against one
real ``memstream serve`` process on 127.0.0.1, for a fixed duration, then everything stops.

What runs:

1. A fresh data dir; the server under test is its own process (``python -m memstream.api.cli
   serve`` with the configured embedder, or ``--embedder none`` / any command given by a caller,
   e.g. the tests' hash-embedder server).
2. Seeding (untimed): every client's agent gets ``--seed`` memories, so recall and reconstruct
   have something to find from the first request.
3. The load: ``--clients`` asyncio clients (one keep-alive HTTP connection each), each in a loop
   until the deadline: store (a new memory of its agent, 40%), recall (40%) or reconstruct (20%)
   with queries drawn from the words its agent stored. One request in flight per client.
   Every answer is checked: HTTP 200 and no ``ok: false``; anything else counts as an error.
4. The server's RSS (``/proc/<pid>/status`` VmRSS) is sampled every 0.25 s throughout.

Reported: requests, errors, throughput, latency p50/p95/p99/max per operation and overall (ms,
client-side: from send to the full answer), RSS at start, after seeding, at the end and its max.

Usage (repo root, project venv)::

    python bench/load.py                                  # 32 clients, 120 s, default embedder
    python bench/load.py --duration 600 --clients 32      # the long run
    python bench/load.py --embedder none --duration 30    # no embedding (lexical only)

Results: ``bench/results/load.json`` (``--out``). The tests run the short mode
(``tests/system/test_load.py``: 15 s, the tests' hash embedder).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

_VOCABULARY = """alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar
papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu amber basalt cedar dune ember fjord
garnet harbor iris jasper kelp lagoon meadow nectar onyx pebble quartz reef summit tundra"""
WORDS = _VOCABULARY.split()
MIX = (("store", 0.4), ("recall", 0.4), ("reconstruct", 0.2))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


def summary(ms: Sequence[float]) -> dict[str, float | int]:
    return {
        "count": len(ms),
        "p50_ms": round(percentile(ms, 0.50), 2),
        "p95_ms": round(percentile(ms, 0.95), 2),
        "p99_ms": round(percentile(ms, 0.99), 2),
        "max_ms": round(max(ms), 2) if ms else 0.0,
    }


class Server:
    """The server under test, in a process of its own on 127.0.0.1."""

    def __init__(self, data: Path, command: Sequence[str] | None = None, embedder: str | None = None) -> None:
        self.port = free_port()
        env = {**os.environ, "MEMSTREAM_DATA_DIR": str(data), "OPENBLAS_NUM_THREADS": "1"}
        if embedder:
            env["MEMSTREAM_EMBEDDER"] = embedder
        argv = (
            [*command, str(data), str(self.port)]
            if command
            else [
                sys.executable,
                "-m",
                "memstream.api.cli",
                "--log-level",
                "WARNING",
                "serve",
                "--port",
                str(self.port),
            ]
        )
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.url = f"http://127.0.0.1:{self.port}"

    async def ready(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(base_url=self.url, timeout=5) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError((self.proc.stderr.read() if self.proc.stderr else b"").decode()[-3000:])
                try:
                    if (await client.get("/health")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
        raise TimeoutError("server did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


async def drive(
    url: str, pid: int, *, clients: int = 32, duration_s: float = 15.0, seed: int = 20, rng_seed: int = 6
) -> dict[str, Any]:
    """Run the load against a started server; returns the figures (see the module doc)."""
    rss: list[tuple[float, float]] = []
    stop_sampling = asyncio.Event()

    async def sample() -> None:
        while not stop_sampling.is_set():
            value = rss_mb(pid)
            if value is not None:
                rss.append((time.monotonic(), value))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop_sampling.wait(), 0.25)

    sampler = asyncio.create_task(sample())
    rss_start = rss_mb(pid)
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    conns = [httpx.AsyncClient(base_url=url, timeout=60, limits=limits) for _ in range(clients)]
    latencies: dict[str, list[float]] = {op: [] for op, _ in MIX}
    errors: list[str] = []
    stored = [0] * clients

    def store_body(n: int, i: int, rng: random.Random) -> dict[str, Any]:
        text = " ".join(rng.choice(WORDS) for _ in range(12))
        return {"agent_id": f"load-{n}", "content": f"{text} #{n}-{i}", "id": f"{n}-{i}"}

    async def seeding(n: int) -> None:
        rng = random.Random(rng_seed * 1000 + n)
        for i in range(seed):
            r = await conns[n].post("/v1/tools/store", json=store_body(n, i, rng))
            if r.status_code != 200 or r.json().get("result") != "stored":
                errors.append(f"seed {n}-{i}: {r.status_code} {r.text[:200]}")
        stored[n] = seed

    async def client(n: int, deadline: float) -> None:
        rng = random.Random(rng_seed * 7919 + n)
        http = conns[n]
        ops = [op for op, _ in MIX]
        weights = [w for _, w in MIX]
        while time.monotonic() < deadline:
            op = rng.choices(ops, weights)[0]
            query = " ".join(rng.choice(WORDS) for _ in range(3))
            if op == "store":
                body = store_body(n, stored[n], rng)
                stored[n] += 1
            elif op == "recall":
                body = {"agent_id": f"load-{n}", "query": query, "limit": 10}
            else:
                body = {"agent_id": f"load-{n}", "query": query}
            started = time.perf_counter()
            try:
                r = await http.post(f"/v1/tools/{op}", json=body)
                answer = r.json()
            except (httpx.HTTPError, ValueError) as exc:
                errors.append(f"{op}: {type(exc).__name__}: {exc}")
                continue
            latencies[op].append((time.perf_counter() - started) * 1000)
            if r.status_code != 200 or (isinstance(answer, dict) and answer.get("ok") is False):
                errors.append(f"{op}: HTTP {r.status_code} {r.text[:200]}")

    try:
        await asyncio.gather(*(seeding(n) for n in range(clients)))
        rss_seeded = rss_mb(pid)
        started = time.monotonic()
        await asyncio.gather(*(client(n, started + duration_s) for n in range(clients)))
        elapsed = time.monotonic() - started
    finally:
        stop_sampling.set()
        await sampler
        await asyncio.gather(*(c.aclose() for c in conns))
    everything = [ms for values in latencies.values() for ms in values]
    requests = len(everything)
    values = [v for _, v in rss]
    return {
        "clients": clients,
        "duration_s": round(elapsed, 2),
        "seed_memories_per_client": seed,
        "requests": requests,
        "errors": len(errors),
        "error_samples": errors[:10],
        "throughput_rps": round(requests / elapsed, 1) if elapsed > 0 else 0.0,
        "latency": {"all": summary(everything), **{op: summary(ms) for op, ms in latencies.items()}},
        "stored_during_load": sum(stored) - seed * clients,
        "rss_mb": {
            "start": round(rss_start or 0, 1),
            "after_seeding": round(rss_seeded or 0, 1),
            "end": round(values[-1], 1) if values else None,
            "max": round(max(values), 1) if values else None,
            "samples": len(values),
        },
    }


async def run(
    *,
    clients: int,
    duration_s: float,
    seed: int,
    command: Sequence[str] | None = None,
    embedder: str | None = None,
    data: Path | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memstream-load-") as tmp:
        server = Server(data or Path(tmp) / "data", command=command, embedder=embedder)
        try:
            await server.ready()
            result = await drive(server.url, server.proc.pid, clients=clients, duration_s=duration_s, seed=seed)
        finally:
            server.stop()
    result["server"] = (
        "command: " + " ".join(command) if command else f"memstream serve (embedder {embedder or 'default'})"
    )
    result["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of load (after seeding)")
    parser.add_argument("--seed", type=int, default=20, help="memories stored per client before the load")
    parser.add_argument("--embedder", default=None, help="MEMSTREAM_EMBEDDER for the server (default: configured)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "load.json")
    args = parser.parse_args()
    result = asyncio.run(run(clients=args.clients, duration_s=args.duration, seed=args.seed, embedder=args.embedder))
    result["command"] = "python bench/load.py " + " ".join(sys.argv[1:])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if result["errors"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
