"""The change feed under load (issue 18): store throughput with and without 100 SSE subscribers
connected, the store -> delivered latency, and what the fan-out costs in CPU.

    python bench/feed_fanout.py                          # embedders none and default, 5 rounds
    python bench/feed_fanout.py --embedder default       # one embedder
    python bench/feed_fanout.py --before-code /tmp/old   # and another checkout's server, alternating
    python bench/feed_fanout.py --before-rev 65707da     # the same, that commit's code (git archive)
    python bench/feed_fanout.py --quick                  # a smoke run (not saved)

The server is the real ``memstream serve`` (embedded log), once per embedder: ``none`` (the
feed's cost is not hidden behind the model's) and ``default`` (what users run; the issue's goal
is "embedded" with it). Writers are 8 keep-alive HTTP/1.1 clients (bench/store_throughput.py's
lean client) storing new memories. Subscribers are ``GET /v1/events`` connections read by raw
asyncio protocols on uvloop (``data_received``, counting at C speed; 10 of them also time every event) in
a process of their own, started for each phase with subscribers, so their CPU (load generation
on the same cores, not the server's cost) is measured apart from the server's and the writers'.

Phases alternate on the same server, without and with the subscribers connected, and the ratio
is taken per pair. With ``--before-code DIR`` (a directory holding another checkout's
``memstream`` package, as bench/restart.py takes it) that code's server runs too, its pairs
interleaved with this code's, so a before/after is measured under the same load; ``--before-rev
REV`` lays out that commit's code so (in a temporary directory).

Latency: for each store, from the writer's receipt of its answer (the ack) to a sampled
subscriber's receipt of its event (it can be negative: the event may reach a subscriber before
the answer reaches the writer), and from the moment the store was sent. CPU (/proc, user +
system): the server's per store, over the writes and, with subscribers, until the sampled
subscribers have every event, and that split into its main thread (the event loop: HTTP, the
decisions, the fan-out) and its other threads (the model's, and the feed's reads off the loop);
the readers' process per store over the same span; the writers'.
Every subscriber counts what it receives; a cut-off is counted. Each also counts its socket
reads: per second of writing (the median subscriber), about the fan-outs a second, so
``fanout_interval_ms`` shows the read interval the server's rule chose (docs/feed.md, "Cost").
The JSON (one entry per run in ``--out``) holds the load average, the config, each phase's
figures and a summary per variant.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import orjson
import uvloop

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from store_throughput import Conn, Server, free_port  # noqa: E402

MARK = re.compile(rb'"content":"feedbench (\d+) (\d+) ')
GOAL_RATIO = 0.90  # store throughput with subscribers / without (issue 18)
GOAL_P99_MS = 100.0  # store -> delivered p99 (issue 18)
# Stores per writer and phase by embedder, so each phase lasts seconds (idle machine: ~2,000
# stores/s without a model, ~200 with the default one), not a blink.
PER_WRITER = {"none": 600, "default": 300}


# -- the readers' process -----------------------------------------------------------------------


class Subscriber(asyncio.Protocol):
    """One SSE connection as a raw protocol: each chunk is counted where it lands, with no task
    wake-up; a ``sampled`` one also notes when each store's event arrived (by the writer and
    sequence number its content carries)."""

    def __init__(self, sampled: bool, connected: asyncio.Future[None]) -> None:
        self.sampled = sampled
        self.connected = connected
        self.events = 0
        self.cutoffs = 0
        self.chunks = 0  # socket reads of the body: about one per fan-out
        self.seen: dict[tuple[int, int], float] = {}
        self.head = b""  # the response head until it is complete
        self.tail = b""  # the last bytes of the previous chunk (a pattern may straddle chunks)
        self.carry = b""  # sampled: the unfinished line of the previous chunk

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's does not subclass asyncio's
        self.transport.write(b"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if not self.connected.done():
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            if b" 200 " not in self.head.split(b"\r\n", 1)[0]:
                self.connected.set_exception(RuntimeError(f"subscribe failed: {self.head[:200]!r}"))
                return
            self.connected.set_result(None)
            data = self.head[end + 2 :]  # from the CRLF before the body: a first "\nid: " counts
        self.chunks += 1
        # each pattern is counted in the chunk plus the bytes of the last one that could begin it
        # (one byte fewer than the pattern, so no match is counted twice)
        joined = self.tail + data
        self.events += joined.count(b"\nid: ") - self.tail.count(b"\nid: ")
        self.cutoffs += joined.count(b"\nevent: cutoff") - self.tail.count(b"\nevent: cutoff")
        self.tail = joined[-13:]
        if self.sampled:
            text = self.carry + data
            cut = text.rfind(b"\n") + 1
            self.carry = text[cut:]
            for m in MARK.finditer(text, 0, cut):
                self.seen[(int(m.group(1)), int(m.group(2)))] = now

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.connected.done():
            self.connected.set_exception(ConnectionError("closed before the response head"))


async def readers_main(port: int, count: int, sampled: int) -> None:
    """Connect ``count`` subscribers, say "ready"; on "drain PHASE N" wait (60 s at most) until
    each sampled one has N events of that phase (or was cut off), then print the report."""
    loop = asyncio.get_running_loop()
    subs: list[Subscriber] = []
    for i in range(count):
        sub = Subscriber(i < sampled, loop.create_future())
        await loop.create_connection(lambda s=sub: s, "127.0.0.1", port)  # type: ignore[misc]
        subs.append(sub)
    await asyncio.wait_for(asyncio.gather(*(s.connected for s in subs)), 60)
    print("ready", flush=True)
    line = await loop.run_in_executor(None, sys.stdin.readline)
    _, phase_text, n_text = line.split()
    phase, expected = int(phase_text), int(n_text)
    deadline = time.monotonic() + 60
    sampled_subs = [s for s in subs if s.sampled]

    def pending() -> bool:
        return any(sum(1 for k in s.seen if k[0] // 1000 == phase) < expected and not s.cutoffs for s in sampled_subs)

    while time.monotonic() < deadline and pending():
        await asyncio.sleep(0.02)
    t = os.times()
    report = {
        "cpu_s": t.user + t.system,
        "events_min": min(s.events for s in subs),
        "chunks_median": statistics.median(s.chunks for s in subs),
        "cutoffs": sum(s.cutoffs for s in subs),
        "seen": [[[k[0], k[1], v] for k, v in s.seen.items() if k[0] // 1000 == phase] for s in sampled_subs],
    }
    print(json.dumps(report), flush=True)


# -- the driver ---------------------------------------------------------------------------------


class FeedServer(Server):
    """``memstream serve`` on a fresh data directory; with ``code``, that checkout's memstream."""

    def __init__(self, data: Path, embedder: str, sync: str, code: Path | None, interval: float | None) -> None:
        self.port = free_port()
        self.embedder = embedder
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_")}
        env.update(MEMSTREAM_DATA_DIR=str(data), MEMSTREAM_SYNC=sync)
        if embedder == "none":
            env["MEMSTREAM_EMBEDDER"] = "none"
        if code is not None:
            env["PYTHONPATH"] = str(code)
        if interval is not None:  # the fan-out's read interval (docs/feed.md); code without it ignores it
            env["MEMSTREAM_FEED_INTERVAL_SECONDS"] = str(interval)
        cmd = [sys.executable, "-m", "memstream.api.cli", "--log-level", "WARNING", "serve", "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Readers:
    """The subscribers' process for one phase."""

    def __init__(self, port: int, count: int, sampled: int) -> None:
        self.args = [str(port), str(count), str(sampled)]
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *(sys.executable, __file__, "--readers", *self.args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            limit=1 << 28,  # the report is one line with every sampled arrival time
        )
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 120)
        if line.strip() != b"ready":
            raise RuntimeError(f"the readers did not connect: {line!r}")

    async def drain(self, phase: int, expected: int) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"drain {phase} {expected}\n".encode())
        await self.proc.stdin.drain()
        report: dict[str, Any] = json.loads(await asyncio.wait_for(self.proc.stdout.readline(), 120))
        await self.proc.wait()
        return report


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
        "seconds": round(elapsed, 3),
        "stores_per_s": round(len(lat) / elapsed, 1),
        "store_p50_ms": pct(lat, 0.5),
        "store_p99_ms": pct(lat, 0.99),
        "_sent": sent,
        "_acked": acked,
    }


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """User + system CPU of a process (or of its thread ``tid``) so far (Linux /proc): a cost
    that load on a shared machine does not inflate the way it inflates wall time."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return round(1000 * s[min(len(s) - 1, int(len(s) * q))], 2)


def per_store(seconds: float, stores: int) -> float:
    return round(1000 * seconds / stores, 3)


async def phase_run(server: FeedServer, args: argparse.Namespace, phase: int, with_subs: bool) -> dict[str, Any]:
    readers = Readers(server.port, args.subscribers, args.sampled) if with_subs else None
    if readers is not None:
        await readers.start()
        assert readers.proc is not None
        readers_cpu = cpu_seconds(readers.proc.pid)
    # the server's main thread runs the event loop (HTTP, the decisions, the fan-out); its other
    # threads are the model's (the batcher's and the runtime's own) and the to_thread work
    loop_cpu = cpu_seconds(server.proc.pid, server.proc.pid)
    server_cpu, writers_cpu = cpu_seconds(server.proc.pid), own_cpu_seconds()
    result = await write_phase(server.port, args.writers, args.per_writer or PER_WRITER[server.embedder], phase)
    result["writers_cpu_ms_per_store"] = per_store(own_cpu_seconds() - writers_cpu, result["stores"])
    sent, acked = result.pop("_sent"), result.pop("_acked")
    if readers is not None:
        report = await readers.drain(phase, len(acked))
        seen = [{(k0, k1): t for k0, k1, t in sub} for sub in report["seen"]]
        from_ack = [s[k] - acked[k] for s in seen for k in acked if k in s]
        from_send = [s[k] - sent[k] for s in seen for k in acked if k in s]
        result.update(
            subscribers=args.subscribers,
            readers_cpu_ms_per_store=per_store(report["cpu_s"] - readers_cpu, result["stores"]),
            delivered_p50_ms_from_ack=pct(from_ack, 0.5) if from_ack else None,
            delivered_p99_ms_from_ack=pct(from_ack, 0.99) if from_ack else None,
            delivered_max_ms_from_ack=pct(from_ack, 1.0) if from_ack else None,
            delivered_p50_ms_from_send=pct(from_send, 0.5) if from_send else None,
            delivered_p99_ms_from_send=pct(from_send, 0.99) if from_send else None,
            sampled_missing=sum(len(acked) - len(s) for s in seen),
            fanout_interval_ms=round(1000 * result["seconds"] / report["chunks_median"], 1)
            if report["chunks_median"]
            else None,
            cutoffs=report["cutoffs"],
            events_received_min=report["events_min"],
        )
    # with subscribers: until the sampled ones have every event (the fan-out's tail included)
    result["server_cpu_ms_per_store"] = per_store(cpu_seconds(server.proc.pid) - server_cpu, result["stores"])
    loop_ms = per_store(cpu_seconds(server.proc.pid, server.proc.pid) - loop_cpu, result["stores"])
    result["server_loop_cpu_ms_per_store"] = loop_ms
    result["server_threads_cpu_ms_per_store"] = round(result["server_cpu_ms_per_store"] - loop_ms, 3)
    return result


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str, side: str) -> float:
        return round(statistics.median(r[side][key] for r in rows), 3)

    p99s = [r["with"]["delivered_p99_ms_from_ack"] for r in rows if r["with"]["delivered_p99_ms_from_ack"] is not None]
    ratio = statistics.median(r["ratio"] for r in rows)
    return {
        "ratio_median": round(ratio, 3),
        "ratios": [r["ratio"] for r in rows],
        "stores_per_s_without_median": med("stores_per_s", "without"),
        "stores_per_s_with_median": med("stores_per_s", "with"),
        "delivered_p99_ms_from_ack_median": round(statistics.median(p99s), 2) if p99s else None,
        "delivered_p99_ms_from_ack_max": max(p99s) if p99s else None,
        "server_cpu_ms_per_store_without_median": med("server_cpu_ms_per_store", "without"),
        "server_cpu_ms_per_store_with_median": med("server_cpu_ms_per_store", "with"),
        "server_loop_cpu_ms_per_store_without_median": med("server_loop_cpu_ms_per_store", "without"),
        "server_loop_cpu_ms_per_store_with_median": med("server_loop_cpu_ms_per_store", "with"),
        "server_threads_cpu_ms_per_store_without_median": med("server_threads_cpu_ms_per_store", "without"),
        "server_threads_cpu_ms_per_store_with_median": med("server_threads_cpu_ms_per_store", "with"),
        "readers_cpu_ms_per_store_median": med("readers_cpu_ms_per_store", "with"),
        "fanout_interval_ms_median": round(statistics.median(r["with"]["fanout_interval_ms"] or 0 for r in rows), 1),
        "load_avg_1m_median": round(statistics.median(r["load_avg_1m"] for r in rows), 2),
        "cutoffs": sum(r["with"]["cutoffs"] for r in rows),
        "sampled_missing": sum(r["with"]["sampled_missing"] for r in rows),
        "goal_ratio_met": ratio >= GOAL_RATIO,
        "goal_p99_met": bool(p99s) and max(p99s) <= GOAL_P99_MS,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    variants: list[tuple[str, Path | None]] = [("current", None)]
    if args.before_code is not None:
        variants.insert(0, ("before", args.before_code))
    out: dict[str, Any] = {"variants": {}}
    phase = 1
    for embedder in args.embedder:
        servers: dict[str, FeedServer] = {}
        dirs: list[Path] = []
        rows: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in variants}
        try:
            for name, code in variants:
                data = Path(tempfile.mkdtemp(prefix=f"ms-feed-bench-{name}-"))
                dirs.append(data)
                servers[name] = FeedServer(data, embedder, args.sync, code, args.interval)
            for server in servers.values():
                await server.ready()
                await write_phase(server.port, args.writers, 50, 0)  # warm-up (the model, the caches)
            for r in range(args.rounds):
                for name, server in servers.items():
                    row: dict[str, Any] = {"round": r + 1, "load_avg_1m": round(os.getloadavg()[0], 2)}
                    # the order flips every round, so a drift in the machine's load falls on both
                    for with_subs in (False, True) if r % 2 == 0 else (True, False):
                        phase += 1
                        row["with" if with_subs else "without"] = await phase_run(server, args, phase, with_subs)
                    row["ratio"] = round(row["with"]["stores_per_s"] / row["without"]["stores_per_s"], 3)
                    rows[name].append(row)
                    print(json.dumps({"embedder": embedder, "variant": name, **row}), flush=True)
        finally:
            for server in servers.values():
                server.stop()
            for data in dirs:
                shutil.rmtree(data, ignore_errors=True)
        for name, _ in variants:
            out["variants"][f"{embedder}/{name}"] = {"summary": summary(rows[name]), "rounds": rows[name]}
    return out


def checkout(rev: str) -> Path:
    """``rev``'s code as an importable ``memstream`` package in a temporary directory (the
    folders setup.py maps, from ``git archive``), for ``--before-code``."""
    root = Path(tempfile.mkdtemp(prefix="ms-feed-before-"))
    tree = root / "tree"
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, "streams", "projections", "api"],
        capture_output=True,
        check=True,
    ).stdout
    tree.mkdir()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tree, filter="data")
    package = root / "memstream"
    package.mkdir()
    folders = {"streams": "streams", "projections": "projections", "api": "api"}
    folders.update(client="api/client", integrations="api/integrations")  # as setup.py installs them
    for name, folder in folders.items():
        if (tree / folder).is_dir():
            (package / name).symlink_to(tree / folder, target_is_directory=True)
    return root


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--readers":
        # uvloop (a dependency, as the server's loop): its reads reach data_received from C
        uvloop.run(readers_main(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--embedder", default="none,default", help="comma-separated: none, default (default: both)")
    p.add_argument("--subscribers", type=int, default=100)
    p.add_argument("--sampled", type=int, default=10, help="subscribers that time each event (all count)")
    p.add_argument("--writers", type=int, default=8)
    p.add_argument("--per-writer", type=int, default=None, help="stores per writer and phase (default: by embedder)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sync", default="FULL", choices=["FULL", "NORMAL"])
    p.add_argument("--before-code", type=Path, default=None, help="another checkout's memstream, run alternately")
    p.add_argument("--before-rev", default=None, help="a commit whose code runs alternately (as --before-code)")
    p.add_argument("--interval", type=float, default=None, help="MEMSTREAM_FEED_INTERVAL_SECONDS for the servers")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "feed_fanout.json")
    args = p.parse_args()
    args.embedder = [e.strip() for e in args.embedder.split(",") if e.strip()]
    if not args.embedder or any(e not in ("none", "default") for e in args.embedder):
        p.error("--embedder: none, default or both (comma-separated)")
    if args.quick:
        args.subscribers, args.rounds = 20, 1
        args.per_writer = args.per_writer or 50
    if args.before_rev is not None:
        if args.before_code is not None:
            p.error("--before-code or --before-rev, not both")
        args.before_code = checkout(args.before_rev)
    started = time.monotonic()
    load_before = os.getloadavg()
    try:
        result = asyncio.run(run(args))
    finally:
        if args.before_rev is not None:
            shutil.rmtree(args.before_code, ignore_errors=True)
    out = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_avg_before": [round(x, 2) for x in load_before],
            "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        },
        "config": {**vars(args), "before_code": args.before_code and str(args.before_code), "out": str(args.out)},
        "wall_s": round(time.monotonic() - started, 1),
        **result,
    }
    runs: list[Any] = []
    if args.out.exists() and not args.quick:
        previous = json.loads(args.out.read_text())
        runs = previous.get("runs", [previous])
    runs.append(out)
    if not args.quick:
        args.out.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    print(json.dumps({k: v["summary"] for k, v in out["variants"].items()}, indent=1))


if __name__ == "__main__":
    main()
