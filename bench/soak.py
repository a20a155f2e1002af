"""A soak run: mixed load at a fixed offered rate for many minutes, with one rebuild and one
checkpoint in the middle; per minute, latency per operation and the servers' memory beside the
data they hold. Not a CI test: docs/reliability.md, "Soak", says how to run and read it.

Open loop: operation ``i`` is due at ``start + i / rate`` whatever the server does, and handed
to one of ``--clients`` connections (round robin; one request in flight per connection, the
rest wait their turn in that client's queue). Its latency is measured from the time it was due,
so a stall shows up as the latency of everything due during it (no coordinated omission).

Modes:

* ``embedded``: one ``memstream serve`` process (the configured embedder, MiniLM by default).
* ``kafka``: ``memstream serve --kafka`` in front of two ``memstream worker`` processes on the
  broker at ``--bootstrap`` (default the local one, 127.0.0.1:9092), under a topic prefix of
  the run's own, whose topics are deleted at the end.

The mix (``MIX``): store, recall, reconstruct, update_memory, delete_memory, get_contents,
list_memories, each for one of ``--agents`` agents (client ``n`` speaks for agent
``n % agents``). Updates, deletes and get_contents name memories the run stored and has not
deleted. In the middle: ``memstream rebuild`` at 40% of the run, as a user runs it on a live
store (``--kafka`` for the Kafka mode: it folds the events topic from offset 0), and one
checkpoint of every read model near 60%, by setting the checkpoint interval
(``MEMSTREAM_SNAPSHOT_EVERY``, ``MEMSTREAM_KAFKA_CHECKPOINT_EVERY``) to the number of events
the log is expected to hold by then.

``--rate auto`` (the default) measures first: a throwaway deployment of the same mode is
seeded and driven closed-loop (every client sends its next request when the last is answered)
for ``--calibrate-seconds``, and the offered rate is ``--headroom`` (0.6) times the throughput
it reached.

Every minute: RSS of every server process (``/proc/<pid>/status`` VmRSS), the memories the
run holds (stored minus deleted, as acknowledged), the events in the log (``/health``'s end
offset, or the events topic's end offsets), the bytes of the log (the SQLite files, or the
topics' segment files under the broker's log dir) and when each checkpoint file was written.
Output: ``bench/results/soak_<mode>.json`` (``--out``) and a table on stdout.

Usage (repo root, project venv)::

    python bench/soak.py --mode embedded                     # 30 minutes, rate measured first
    python bench/soak.py --mode kafka --minutes 30 --rate 20
    python bench/soak.py --mode embedded --minutes 3 --out bench/results/soak_embedded_smoke.json
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

MIX: tuple[tuple[str, float], ...] = (
    ("store", 0.30),
    ("recall", 0.25),
    ("reconstruct", 0.15),
    ("update_memory", 0.10),
    ("delete_memory", 0.05),
    ("get_contents", 0.10),
    ("list_memories", 0.05),
)
WRITES = {"store", "update_memory", "delete_memory"}  # one event each when applied
REBUILD_AT = 0.4  # of the run
CHECKPOINT_AT = 0.6
GOAL_P99_RATIO = 2.0
# The in-memory cost of one memory with its vector, text and indexes, from bench/load.py's
# 300 s run (docs/reliability.md, "Load"): about 8 KB. RSS growth within twice that per event
# appended counts as explained by the data.
BUDGET_KB_PER_EVENT = 16.0
_VOCABULARY = """alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar
papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu amber basalt cedar dune ember fjord
garnet harbor iris jasper kelp lagoon meadow nectar onyx pebble quartz reef summit tundra"""
WORDS = _VOCABULARY.split()

RUN_MASTER_KEY = base64.b64encode(os.urandom(32)).decode()  # a throwaway deployment's (Kafka mode)


# -- the pure part: aggregation, percentiles, verdict (tests/unit/test_soak_stats.py) --------


@dataclass(frozen=True, slots=True)
class Sample:
    """One operation: its kind, when it was due (seconds since the load started), how long
    after that it was answered, and whether the answer was a success."""

    op: str
    due_s: float
    latency_ms: float
    ok: bool


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile (``q`` in 0..1) of ``values``; 0.0 for none."""
    if not values:
        return 0.0
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"percentile rank {q} is outside 0..1")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 1))  # ceil(n * q), at least the first
    return ordered[int(rank) - 1]


def _figures(samples: Sequence[Sample]) -> dict[str, Any]:
    answered = [s.latency_ms for s in samples if s.ok]
    return {
        "count": len(samples),
        "errors": sum(not s.ok for s in samples),
        "p50_ms": round(percentile(answered, 0.50), 1),
        "p99_ms": round(percentile(answered, 0.99), 1),
    }


def per_minute(samples: Iterable[Sample], minutes: int) -> list[dict[str, Any]]:
    """Per minute of the run (by due time), per operation and for all: count, errors, p50, p99
    of the successful ones. Samples due past the last minute (the drain) count in the last."""
    if minutes < 1:
        raise ValueError("a run has at least one minute")
    buckets: list[list[Sample]] = [[] for _ in range(minutes)]
    for s in samples:
        buckets[min(max(int(s.due_s // 60), 0), minutes - 1)].append(s)
    table = []
    for minute, bucket in enumerate(buckets):
        ops = sorted({s.op for s in bucket})
        row: dict[str, Any] = {"minute": minute + 1, "all": _figures(bucket)}
        row["ops"] = {op: _figures([s for s in bucket if s.op == op]) for op in ops}
        table.append(row)
    return table


def _ratio(last: float, first: float) -> float | None:
    return round(last / first, 2) if first > 0 else None


def verdict(table: Sequence[Mapping[str, Any]], resources: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The two goals of the soak: the last minute's p99 within ``GOAL_P99_RATIO`` of the first
    minute's (overall and per operation), and RSS growth explained by the data appended (at
    most ``BUDGET_KB_PER_EVENT`` per event, summed over the server processes)."""
    if not table:
        raise ValueError("no minutes to judge")
    first, last = table[0], table[-1]
    ratio = _ratio(last["all"]["p99_ms"], first["all"]["p99_ms"])
    per_op = {
        op: _ratio(last["ops"][op]["p99_ms"], first["ops"][op]["p99_ms"])
        for op in sorted(set(first["ops"]) & set(last["ops"]))
    }
    out: dict[str, Any] = {
        "p99_first_minute_ms": first["all"]["p99_ms"],
        "p99_last_minute_ms": last["all"]["p99_ms"],
        "p99_last_over_first": ratio,
        "p99_last_over_first_per_op": per_op,
        "p99_goal_met": ratio is not None and ratio <= GOAL_P99_RATIO,
        "errors": sum(row["all"]["errors"] for row in table),
    }
    if len(resources) >= 2:
        a, b = resources[0], resources[-1]
        rss_growth = sum(b["rss_mb"].get(name, 0.0) - mb for name, mb in a["rss_mb"].items())
        events = b["events"] - a["events"]
        log_growth_mb = (b["log_bytes"] - a["log_bytes"]) / 2**20
        kb_per_event = rss_growth * 1024 / events if events > 0 else None
        out.update(
            {
                "rss_growth_mb": round(rss_growth, 1),
                "events_appended": events,
                "memories_growth": b["memories"] - a["memories"],
                "log_growth_mb": round(log_growth_mb, 1),
                "rss_growth_kb_per_event": round(kb_per_event, 2) if kb_per_event is not None else None,
                "rss_budget_kb_per_event": BUDGET_KB_PER_EVENT,
                "rss_growth_explained": rss_growth <= 0
                or (kb_per_event is not None and kb_per_event <= BUDGET_KB_PER_EVENT),
            }
        )
    return out


def schedule(rate: float, seconds: float, seed: int) -> list[tuple[float, str]]:
    """When each operation is due (seconds from the start) and its kind: a fixed rate, the
    kinds drawn from ``MIX`` by a seeded generator, so two runs offer the same load."""
    if rate <= 0 or seconds <= 0:
        raise ValueError("rate and duration must be positive")
    rng = random.Random(seed)
    kinds = [op for op, _ in MIX]
    weights = [w for _, w in MIX]
    n = int(rate * seconds)
    return [(i / rate, rng.choices(kinds, weights)[0]) for i in range(n)]


def events_by(fraction: float, rate: float, seconds: float) -> int:
    """The write events expected ``fraction`` of the way through a run at ``rate``."""
    share = sum(w for op, w in MIX if op in WRITES)
    return max(1, round(rate * share * seconds * fraction))


def agent_names(count: int) -> list[str]:
    return [f"soak-agent-{n}" for n in range(count)]


def per_partition(events: int, agents: Sequence[str], partitions: int) -> int:
    """The share of ``events`` the busiest partition gets (the agents' events are equal), so
    that partition checkpoints when the whole log holds ``events``; the others a little later."""
    from memstream.streams.log.port import partition_for

    busiest = max(Counter(partition_for(a, partitions) for a in agents).values())
    return max(1, events * busiest // len(agents))


def format_table(table: Sequence[Mapping[str, Any]], resources: Sequence[Mapping[str, Any]]) -> str:
    """The per-minute figures as text: all operations, then each kind's p99."""
    ops = [op for op, _ in MIX]
    head = f"{'min':>3} {'count':>6} {'err':>4} {'p50':>7} {'p99':>7}  " + " ".join(f"{op[:9]:>9}" for op in ops)
    lines = [head + "   (p99 ms per kind)"]
    for row in table:
        a = row["all"]
        cells = " ".join(f"{row['ops'][op]['p99_ms'] if op in row['ops'] else '-':>9}" for op in ops)
        lines.append(f"{row['minute']:>3} {a['count']:>6} {a['errors']:>4} {a['p50_ms']:>7} {a['p99_ms']:>7}  {cells}")
    lines.append("")
    lines.append(f"{'t(s)':>6} {'memories':>9} {'events':>8} {'log MB':>7}  RSS MB per process")
    for r in resources:
        rss = " ".join(f"{k}={v:.0f}" for k, v in r["rss_mb"].items())
        lines.append(f"{r['t_s']:>6.0f} {r['memories']:>9} {r['events']:>8} {r['log_bytes'] / 2**20:>7.1f}  {rss}")
    return "\n".join(lines)


# -- the deployments -----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return 0.0
    return 0.0


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "memstream.api.cli", "--log-level", "WARNING", *args]


@dataclass
class Deployment:
    """The servers of one mode, started in ``root``; everything here stops in ``stop``."""

    mode: str
    root: Path
    checkpoint_every: int
    bootstrap: str = "127.0.0.1:9092"
    partitions: int = 4
    embedder: str | None = None
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    prefix: str = field(default_factory=lambda: f"soak-{uuid.uuid4().hex[:8]}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def kafka_args(self) -> list[str]:
        return ["--kafka", self.bootstrap, "--prefix", self.prefix, "--partitions", str(self.partitions)]

    def _env(self, data: Path) -> dict[str, str]:
        env = {**os.environ, "MEMSTREAM_DATA_DIR": str(data), "OPENBLAS_NUM_THREADS": "1"}
        env["MEMSTREAM_SNAPSHOT_EVERY"] = str(self.checkpoint_every)
        env["MEMSTREAM_KAFKA_CHECKPOINT_EVERY"] = str(self.checkpoint_every)
        if self.mode == "kafka":  # the topics are sealed: every process needs the same master key
            env.setdefault("MEMSTREAM_MASTER_KEY", RUN_MASTER_KEY)
        if self.embedder:
            env["MEMSTREAM_EMBEDDER"] = self.embedder
        return env

    def _spawn(self, name: str, argv: list[str], data: Path) -> None:
        err = (self.root / f"{name}.stderr").open("wb")
        self.procs[name] = subprocess.Popen(argv, env=self._env(data), stdout=subprocess.DEVNULL, stderr=err)

    def start(self) -> None:
        if self.mode == "embedded":
            self._spawn("server", _cli("serve", "--port", str(self.port)), self.root / "data")
            return
        for n in (1, 2):
            self._spawn(f"worker{n}", _cli("worker", *self.kafka_args, "--replication", "1"), self.root / f"w{n}")
        router = _cli("serve", *self.kafka_args, "--replication", "1", "--port", str(self.port))
        self._spawn("router", router, self.root)

    async def ready(self, timeout_s: float = 300) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=10) as client:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                self.check_alive()
                with contextlib.suppress(httpx.TransportError, ValueError):
                    r = await client.get("/health")
                    if r.status_code == 200:
                        if self.mode == "embedded":
                            return
                        stats = r.json().get("stats", {})
                        if r.json().get("partitions_with_owner") == self.partitions and (
                            stats.get("workers_answering", 0) >= 2
                        ):
                            return
                await asyncio.sleep(0.5)
        raise TimeoutError(f"the {self.mode} deployment did not become ready in {timeout_s:.0f} s")

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                tail = (self.root / f"{name}.stderr").read_bytes()[-3000:].decode(errors="replace")
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{tail}")

    def rss(self) -> dict[str, float]:
        return {name: round(rss_mb(p.pid), 1) for name, p in self.procs.items()}

    def log_bytes(self) -> int:
        if self.mode == "embedded":
            data = self.root / "data"
            return sum(f.stat().st_size for f in data.glob("log.sqlite3*") if f.is_file())
        logs = Path(os.environ.get("MEMSTREAM_KAFKA_DATA", f"/tmp/memstream-kafka-{self.bootstrap.rsplit(':', 1)[1]}"))
        total = 0
        for topic_dir in (logs / "kraft-logs").glob(f"{self.prefix}.*"):
            # segments only: the broker preallocates its index files (10 MB each, sparse)
            total += sum(f.stat().st_size for f in topic_dir.glob("*.log"))
        return total

    async def events(self) -> int:
        """Events in the log: the embedded log's end offset, or the events topic's."""
        if self.mode == "embedded":
            with contextlib.suppress(httpx.HTTPError, ValueError):
                async with httpx.AsyncClient(base_url=self.url, timeout=30) as client:
                    return int((await client.get("/health")).json()["stats"]["log_end_offset"])
            return 0
        from memstream.streams.log.kafka import KafkaConfig, events_end_offsets

        cfg = KafkaConfig(self.bootstrap, self.prefix, self.partitions)
        return sum((await events_end_offsets(cfg)).values())

    def checkpoint_times(self, t0_wall: float) -> dict[str, float]:
        """When each checkpoint file was last written, in seconds since the load started
        (negative: before it). Embedded: ``snapshots/``, which ``memstream rebuild`` refreshes
        too; Kafka: the workers' ``kafka-checkpoints/``."""
        where = ["data/snapshots"] if self.mode == "embedded" else ["w1/kafka-checkpoints", "w2/kafka-checkpoints"]
        out = {}
        for sub in where:
            for f in sorted((self.root / sub).rglob("*")):
                if f.is_file() and not f.name.startswith("."):
                    with contextlib.suppress(OSError):
                        out[str(f.relative_to(self.root))] = round(f.stat().st_mtime - t0_wall, 1)
        return out

    def rebuild_argv(self) -> list[str]:
        if self.mode == "embedded":
            return _cli("rebuild", "--data-dir", str(self.root / "data"))
        return _cli("rebuild", *self.kafka_args, "--replication", "1", "--jobs", "1")

    def rebuild_env(self) -> dict[str, str]:
        return self._env(self.root / ("data" if self.mode == "embedded" else "rebuild"))

    def _stop_processes(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)

    async def stop(self) -> None:
        await asyncio.to_thread(self._stop_processes)
        if self.mode == "kafka":
            from memstream.streams.log.kafka import delete_topics_with_prefix

            await delete_topics_with_prefix(self.bootstrap, self.prefix)


# -- the load ------------------------------------------------------------------------------


class Agents:
    """What the run knows each agent holds: the memories it stored and has not deleted, and
    which of them an update is in flight on (a delete never picks those)."""

    def __init__(self, count: int) -> None:
        self.names = agent_names(count)
        self.live: list[list[int]] = [[] for _ in range(count)]
        self.busy: list[set[int]] = [set() for _ in range(count)]
        self.stored = [0] * count

    def pick(self, agent: int, rng: random.Random, *, free: bool) -> int | None:
        live = self.live[agent]
        for _ in range(8):
            if not live:
                return None
            mid = live[rng.randrange(len(live))]
            if not free or mid not in self.busy[agent]:
                return mid
        return None


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


class Load:
    """The clients: one connection each, each speaking for one agent."""

    def __init__(self, url: str, clients: int, agents: int, seed: int) -> None:
        self.url = url
        self.clients = clients
        self.agents = Agents(agents)
        self.rng = random.Random(seed)
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        self.conns = [httpx.AsyncClient(base_url=url, timeout=120, limits=limits) for _ in range(clients)]
        self.error_samples: list[str] = []

    async def close(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self.conns))

    async def call(self, client: int, op: str) -> bool:
        """One operation of kind ``op`` for the client's agent; whether it succeeded."""
        a = client % len(self.agents.names)
        agent = self.agents.names[a]
        rng = self.rng
        held: int | None = None
        if op == "store":
            self.agents.stored[a] += 1
            body: dict[str, Any] = {"agent_id": agent, "content": f"{_text(rng, 12)} #{a}-{self.agents.stored[a]}"}
        elif op == "recall":
            body = {"agent_id": agent, "query": _text(rng, 3), "limit": 10}
        elif op == "reconstruct":
            body = {"agent_id": agent, "query": _text(rng, 3)}
        elif op == "list_memories":
            body = {"agent_id": agent, "limit": 20}
        else:
            held = self.agents.pick(a, rng, free=op == "delete_memory")
            if held is None:  # nothing to edit yet: store instead
                return await self.call(client, "store")
            if op == "get_contents":
                body = {"agent_id": agent, "refs": [f"mem:{held}"]}
                held = None
            elif op == "update_memory":
                body = {"agent_id": agent, "memory_id": held, "content": f"{_text(rng, 12)} (edited)"}
                self.agents.busy[a].add(held)
            else:
                body = {"agent_id": agent, "memory_id": held}
                self.agents.live[a].remove(held)
        try:
            r = await self.conns[client].post(f"/v1/tools/{op}", json=body)
            answer = r.json()
        except (httpx.HTTPError, ValueError) as exc:
            self._error(f"{op}: {type(exc).__name__}: {exc}")
            return False
        finally:
            if held is not None:
                self.agents.busy[a].discard(held)
        ok = r.status_code == 200 and isinstance(answer, dict) and answer.get("ok") is not False
        if not ok:
            self._error(f"{op}: HTTP {r.status_code} {r.text[:200]}")
        elif op == "store" and answer.get("result") == "stored":
            self.agents.live[a].append(int(answer["id"]))
        return ok

    def _error(self, text: str) -> None:
        if len(self.error_samples) < 20:
            self.error_samples.append(text)

    async def seed(self, per_agent: int) -> None:
        """``per_agent`` memories for every agent, through the agent's first client, untimed."""
        agents = len(self.agents.names)

        async def one(a: int) -> None:
            for _ in range(per_agent):
                if not await self.call(a, "store"):
                    raise RuntimeError(f"seeding failed: {self.error_samples[-1:]}")

        await asyncio.gather(*(one(a) for a in range(min(agents, self.clients))))

    async def closed_loop(self, seconds: float) -> float:
        """Every client sends its next request when the last is answered; answers per second."""
        kinds = [op for op, _ in MIX]
        weights = [w for _, w in MIX]
        done = [0]
        deadline = time.monotonic() + seconds

        async def client(n: int) -> None:
            rng = random.Random(n)
            while time.monotonic() < deadline:
                await self.call(n, rng.choices(kinds, weights)[0])
                done[0] += 1

        started = time.monotonic()
        await asyncio.gather(*(client(n) for n in range(self.clients)))
        return done[0] / (time.monotonic() - started)

    async def open_loop(self, plan: Sequence[tuple[float, str]], t0: float, drain_s: float) -> tuple[list[Sample], int]:
        """Offer ``plan`` on the clock from monotonic time ``t0``; returns the samples and how
        many were never sent (the drain ran out)."""
        queues: list[asyncio.Queue[tuple[float, str] | None]] = [asyncio.Queue() for _ in range(self.clients)]
        samples: list[Sample] = []

        async def client(n: int) -> None:
            while (item := await queues[n].get()) is not None:
                due, op = item
                ok = await self.call(n, op)
                samples.append(Sample(op, due, (time.monotonic() - t0 - due) * 1000, ok))

        workers = [asyncio.create_task(client(n)) for n in range(self.clients)]
        for i, (due, op) in enumerate(plan):
            delay = t0 + due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            queues[i % self.clients].put_nowait((due, op))
        for q in queues:
            q.put_nowait(None)
        _, pending = await asyncio.wait(workers, timeout=drain_s)
        for task in pending:
            task.cancel()
        unsent = sum(q.qsize() for q in queues) - len(pending)
        return samples, max(unsent, 0)


async def resources(dep: Deployment, load: Load, t0_wall: float, t_s: float) -> dict[str, Any]:
    """One sample of what the deployment holds and what its processes use. Memories: what
    the run stored and deleted (acknowledged), counted by the clients."""
    return {
        "t_s": round(t_s, 1),
        "rss_mb": dep.rss(),
        "memories": sum(len(live) for live in load.agents.live),
        "events": await dep.events(),
        "log_bytes": dep.log_bytes(),
        "checkpoints_written_at_s": dep.checkpoint_times(t0_wall),
    }


async def middle_rebuild(dep: Deployment, at_s: float, t0: float) -> dict[str, Any]:
    """``memstream rebuild`` on the live deployment at ``at_s`` into the load."""
    await asyncio.sleep(max(0.0, t0 + at_s - time.monotonic()))
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *dep.rebuild_argv(), env=dep.rebuild_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    return {
        "at_s": round(started - t0, 1),
        "seconds": round(time.monotonic() - started, 1),
        "exit_code": proc.returncode,
        "output_tail": (out + err).decode(errors="replace")[-1500:],
    }


async def soak(args: argparse.Namespace, rate: float, root: Path) -> dict[str, Any]:
    seconds = args.minutes * 60
    checkpoint_every = args.agents * args.seed_memories + events_by(CHECKPOINT_AT, rate, seconds)
    if args.mode == "kafka":  # a worker counts per partition
        checkpoint_every = per_partition(checkpoint_every, agent_names(args.agents), args.partitions)
    dep = Deployment(args.mode, root, checkpoint_every, args.bootstrap, args.partitions, args.embedder)
    dep.start()
    load: Load | None = None
    try:
        await dep.ready()
        load = Load(dep.url, args.clients, args.agents, args.seed)
        await load.seed(args.seed_memories)
        plan = schedule(rate, seconds, args.seed)
        watch: list[dict[str, Any]] = []
        t0 = time.monotonic() + 1.0
        t0_wall = time.time() + 1.0
        run = asyncio.create_task(load.open_loop(plan, t0, drain_s=args.drain_seconds))
        rebuild = asyncio.create_task(middle_rebuild(dep, REBUILD_AT * seconds, t0))
        watch.append(await resources(dep, load, t0_wall, 0.0))
        while not run.done():
            with contextlib.suppress(TimeoutError):
                next_sample = t0 + 60 * len(watch) - time.monotonic()
                await asyncio.wait_for(asyncio.shield(run), timeout=max(0.1, next_sample))
            if not run.done():
                dep.check_alive()
                watch.append(await resources(dep, load, t0_wall, time.monotonic() - t0))
        samples, unsent = run.result()
        rebuilt = await rebuild
        watch.append(await resources(dep, load, t0_wall, time.monotonic() - t0))
        dep.check_alive()
        table = per_minute(samples, args.minutes)
        return {
            "rate_per_s": round(rate, 2),
            "operations_offered": len(plan),
            "operations_answered": len(samples),
            "never_sent": unsent,
            "checkpoint_every_events": checkpoint_every,
            "rebuild": rebuilt,
            "per_minute": table,
            "resources": watch,
            "verdict": verdict(table, watch),
            "error_samples": load.error_samples,
            "table": format_table(table, watch),
        }
    finally:
        if load is not None:
            await load.close()
        await dep.stop()


async def calibrate(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Closed-loop throughput of a throwaway deployment of the same mode (seeded the same way)."""
    dep = Deployment(args.mode, root, 10**9, args.bootstrap, args.partitions, args.embedder)
    dep.start()
    load: Load | None = None
    try:
        await dep.ready()
        load = Load(dep.url, args.clients, args.agents, args.seed)
        await load.seed(args.seed_memories)
        throughput = await load.closed_loop(args.calibrate_seconds)
        return {"seconds": args.calibrate_seconds, "throughput_per_s": round(throughput, 1)}
    finally:
        if load is not None:
            await load.close()
        await dep.stop()


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memstream-soak-") as tmp:
        result: dict[str, Any] = {"mode": args.mode, "minutes": args.minutes, "clients": args.clients}
        result["agents"] = args.agents
        if args.rate == "auto":
            (Path(tmp) / "calibration").mkdir()
            cal = await calibrate(args, Path(tmp) / "calibration")
            rate = cal["throughput_per_s"] * args.headroom
            result["calibration"] = {**cal, "headroom": args.headroom}
        else:
            rate = float(args.rate)
        (Path(tmp) / "run").mkdir()
        result.update(await soak(args, rate, Path(tmp) / "run"))
    result["mix"] = dict(MIX)
    result["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    result["command"] = "python bench/soak.py " + " ".join(sys.argv[1:])
    return result


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("embedded", "kafka"), default="embedded")
    parser.add_argument("--minutes", type=int, default=30)
    parser.add_argument("--rate", default="auto", help="operations per second offered, or 'auto' (measure first)")
    parser.add_argument("--headroom", type=float, default=0.6, help="with --rate auto: this share of the capacity")
    parser.add_argument("--calibrate-seconds", type=float, default=30.0)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--seed-memories", type=int, default=50, help="per agent, stored before the load")
    parser.add_argument("--seed", type=int, default=17, help="of the operation mix and the texts")
    parser.add_argument("--drain-seconds", type=float, default=120.0, help="after the last minute, for the backlog")
    parser.add_argument("--partitions", type=int, default=4, help="kafka mode")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="kafka mode")
    parser.add_argument("--embedder", default=None, help="MEMSTREAM_EMBEDDER for the servers (default: configured)")
    parser.add_argument("--out", type=Path, default=None, help="default bench/results/soak_<mode>.json")
    args = parser.parse_args(argv)
    if args.rate != "auto":
        try:
            if float(args.rate) <= 0:
                raise ValueError
        except ValueError:
            parser.error(f"--rate must be a positive number or 'auto', not {args.rate!r}")
    if args.minutes < 1 or args.clients < 1 or args.agents < 1 or args.agents > args.clients:
        parser.error("--minutes, --clients and --agents must be at least 1, with no more agents than clients")
    return args


def main() -> None:
    args = parse_args()
    result = asyncio.run(main_async(args))
    out = args.out or Path(__file__).parent / "results" / f"soak_{args.mode}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    table = result.pop("table")
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(table)
    print(json.dumps(result["verdict"], indent=2))
    print(f"-> {out}")


if __name__ == "__main__":
    main()
