"""The change feed under load (issue 18): store throughput with and without 100 SSE subscribers
connected, and the store -> delivered latency.

    python bench/feed_fanout.py                    # 100 subscribers, 8 writers, 3 rounds
    python bench/feed_fanout.py --quick            # a smoke run

The server is the real ``memstream serve`` (embedded log, ``MEMSTREAM_EMBEDDER=none``: the
feed's cost is what is measured, not the model's). Writers are 8 keep-alive HTTP/1.1 clients
(bench/store_throughput.py's lean client) storing new memories; subscribers are raw asyncio SSE
readers of ``GET /v1/events``. Phases alternate, without and with the subscribers connected,
on the same server, and the ratio is taken per pair. Latency: for each store, the time from the
writer's receipt of its answer (the ack) to a sampled subscriber's receipt of its event (it can
be negative: the event may reach a subscriber before the answer reaches the writer), and from
the moment the store was sent. Every subscriber counts what it receives; a cut-off is counted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from store_throughput import Conn, Server  # noqa: E402

MARK = re.compile(rb'"content":"feedbench (\d+) (\d+) ')


class Subscriber:
    """One SSE connection read with asyncio streams; ``sampled`` ones note when each store's
    event arrived (by the writer and sequence number its content carries)."""

    def __init__(self, port: int, sampled: bool) -> None:
        self.port = port
        self.sampled = sampled
        self.events = 0
        self.cutoffs = 0
        self.seen: dict[tuple[int, int], float] = {}
        self.task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()

    async def run(self) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(
            b"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"
        )
        status = await reader.readline()
        if b" 200 " not in status:
            raise RuntimeError(f"subscribe failed: {status!r}")
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass
        self.connected.set()
        try:
            buf = b""
            tail = b""
            while True:
                chunk = await reader.read(262144)
                if not chunk:
                    return
                now = time.perf_counter()
                if not self.sampled:  # count at C speed: the client must not starve the server
                    # each pattern is counted in the chunk plus the bytes of the last one that could
                    # begin it (one byte fewer than the pattern, so no match is counted twice)
                    self.events += (tail[-4:] + chunk).count(b"\nid: ")
                    self.cutoffs += (tail[-13:] + chunk).count(b"\nevent: cutoff")
                    tail = (tail + chunk)[-13:]
                    continue
                buf += chunk
                # chunked transfer framing lines are harmless here: only whole SSE lines are looked at
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if line.startswith(b"id: "):
                        self.events += 1
                    elif line.startswith(b"event: cutoff"):
                        self.cutoffs += 1
                    elif line.startswith(b"data: "):
                        m = MARK.search(line)
                        if m:
                            self.seen[(int(m.group(1)), int(m.group(2)))] = now
        finally:
            writer.close()

    def start(self) -> None:
        self.task = asyncio.create_task(self.run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


async def write_phase(port: int, writers: int, per_writer: int, phase: int) -> dict[str, Any]:
    """``writers`` clients store ``per_writer`` memories each; the answer times by (writer, seq)."""
    sent: dict[tuple[int, int], float] = {}
    acked: dict[tuple[int, int], float] = {}
    latencies: list[float] = []
    errors = 0

    async def one(w: int) -> None:
        nonlocal errors
        conn = Conn("127.0.0.1", port)
        await conn.open()
        for i in range(per_writer):
            key = (phase * 1000 + w, i)
            body = orjson.dumps(
                {"agent_id": f"agent-{w % 4}", "content": f"feedbench {key[0]} {i} the deploy key rotates weekly"}
            )
            t = time.perf_counter()
            sent[key] = t
            status, raw = await conn.post("/v1/tools/store", body)
            acked[key] = time.perf_counter()
            latencies.append(acked[key] - t)
            if status != 200 or orjson.loads(raw).get("result") != "stored":
                errors += 1
        await conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(one(w) for w in range(writers)))
    elapsed = time.perf_counter() - started
    lat = sorted(latencies)
    return {
        "stores": len(lat),
        "errors": errors,
        "stores_per_s": round(len(lat) / elapsed, 1),
        "store_p50_ms": round(1000 * lat[len(lat) // 2], 2),
        "store_p99_ms": round(1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))], 2),
        "_sent": sent,
        "_acked": acked,
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux /proc): a cost that load on a shared
    machine does not inflate the way it inflates wall time."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return round(1000 * s[min(len(s) - 1, int(len(s) * q))], 2)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="ms-feed-bench-"))
    server = Server(data, "none", args.sync)
    rounds: list[dict[str, Any]] = []
    try:
        await server.ready()
        await write_phase(server.port, 2, 50, 0)  # warm-up
        phase = 1
        for r in range(args.rounds):
            row: dict[str, Any] = {"round": r + 1}
            for with_subs in (False, True):
                phase += 1
                subs: list[Subscriber] = []
                if with_subs:
                    subs = [Subscriber(server.port, i < args.sampled) for i in range(args.subscribers)]
                    for s in subs:
                        s.start()
                    await asyncio.wait_for(asyncio.gather(*(s.connected.wait() for s in subs)), 60)
                server_cpu, client_cpu = cpu_seconds(server.proc.pid), own_cpu_seconds()
                result = await write_phase(server.port, args.writers, args.per_writer, phase)
                result["server_cpu_ms_per_store"] = round(
                    1000 * (cpu_seconds(server.proc.pid) - server_cpu) / result["stores"], 3
                )
                result["client_cpu_ms_per_store"] = round(1000 * (own_cpu_seconds() - client_cpu) / result["stores"], 3)
                sent, acked = result.pop("_sent"), result.pop("_acked")
                if with_subs:
                    # wait (bounded) until the sampled subscribers have every event of the phase
                    deadline = time.monotonic() + 60
                    sampled = [s for s in subs if s.sampled]
                    while time.monotonic() < deadline and any(
                        len(s.seen) < len(acked) and not s.cutoffs for s in sampled
                    ):
                        await asyncio.sleep(0.05)
                    from_ack = [s.seen[k] - acked[k] for s in sampled for k in acked if k in s.seen]
                    from_send = [s.seen[k] - sent[k] for s in sampled for k in acked if k in s.seen]
                    result.update(
                        subscribers=len(subs),
                        delivered_p50_ms_from_ack=pct(from_ack, 0.5),
                        delivered_p99_ms_from_ack=pct(from_ack, 0.99),
                        delivered_p50_ms_from_send=pct(from_send, 0.5),
                        delivered_p99_ms_from_send=pct(from_send, 0.99),
                        sampled_missing=sum(len(acked) - len(s.seen) for s in sampled),
                        cutoffs=sum(s.cutoffs for s in subs),
                        events_received_min=min(s.events for s in subs),
                    )
                    for s in subs:
                        await s.stop()
                row["with" if with_subs else "without"] = result
            row["ratio"] = round(row["with"]["stores_per_s"] / row["without"]["stores_per_s"], 3)
            row["server_cpu_ratio"] = round(
                row["with"]["server_cpu_ms_per_store"] / row["without"]["server_cpu_ms_per_store"], 3
            )
            rounds.append(row)
            print(json.dumps(row), flush=True)
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)
    ratios = [r["ratio"] for r in rounds]
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_1m": os.getloadavg()[0]},
        "config": {},
        "rounds": rounds,
        "ratio_median": statistics.median(ratios),
        "server_cpu_ratio_median": statistics.median(r["server_cpu_ratio"] for r in rounds),
        "delivered_p99_ms_from_ack_max": max(r["with"]["delivered_p99_ms_from_ack"] for r in rounds),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--subscribers", type=int, default=100)
    p.add_argument("--sampled", type=int, default=10, help="subscribers that time each event (all count)")
    p.add_argument("--writers", type=int, default=8)
    p.add_argument("--per-writer", type=int, default=400)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sync", default="FULL", choices=["FULL", "NORMAL"])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "feed_fanout.json")
    args = p.parse_args()
    if args.quick:
        args.subscribers, args.per_writer, args.rounds = 20, 50, 1
    out = asyncio.run(run(args))
    out["config"] = {**vars(args), "out": str(args.out)}
    runs: list[Any] = []
    if args.out.exists() and not args.quick:
        previous = json.loads(args.out.read_text())
        runs = previous.get("runs", [previous])
    runs.append(out)
    if not args.quick:
        args.out.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("ratio_median", "delivered_p99_ms_from_ack_max")}))


if __name__ == "__main__":
    main()
