"""Kafka mode (issue 19): how fast a worker that gains partitions catches up, with and without a
checkpoint to start from, and how replay scales over processes, beside the limits measured in
the same run: a bare consumer's read rate of the same partitions (sealed values opened, no
fold), the in-process fold rate of the same records, and `rebuild --kafka --jobs 1/2`.

    bash infra/kafka-local.sh start
    python bench/kafka_catchup.py --quick        # a smoke run: 8,000 events
    python bench/kafka_catchup.py                # 160,000 events, 4 partitions, 64-d vectors
    python bench/kafka_catchup.py --ab TREE      # a worker's catch-up from 0: this code against TREE's

One run: fill the topic with decided, sealed stores (the decider's step and sealing, appended
through the log adapter: deciding them through a worker would take minutes); start worker A
alone (it folds every partition from 0, checkpointing into its data directory); start worker B
without checkpoints (folds what it gains from 0); stop it (A takes everything back); start B
again on A's data directory (it restores A's checkpoints and folds only the tail). Workers are
real `memstream worker` processes; catch-up is read from their GET /health (polled every
``POLL_S``), from the first poll that shows the partitions assigned to the first that shows
them at the end. Results: bench/results/kafka_catchup.json (or --out).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads (as `memstream` does)

import argparse
import asyncio
import base64
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from kafka_throughput import decided_stores
from store_throughput import free_port

ROOT = Path(__file__).resolve().parents[1]
BOOTSTRAP = os.environ.get("MEMSTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
CLI = [sys.executable, "-m", "memstream.api.cli", "--log-level", "WARNING"]
POLL_S = 0.1


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def digests(port: int) -> dict[str, Any]:
    """A worker's read-model digests per partition (GET /digests), to compare with a replay's."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/digests", timeout=120) as r:
        body: dict[str, Any] = json.loads(r.read())
    return {p: v["digests"] for p, v in body.items()}


def health(port: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            body: dict[str, Any] = json.loads(r.read())
            return body
    except (OSError, ValueError):
        return None


class Worker:
    """One `memstream worker` process and its health port."""

    def __init__(
        self, name: str, kafka_args: list[str], data_dir: Path, checkpoint_every: int, code: Path | None = None
    ) -> None:
        self.name = name
        self.port = free_port()
        env = {**os.environ, "MEMSTREAM_EMBEDDER": "none", "MEMSTREAM_DATA_DIR": str(data_dir)}
        env["MEMSTREAM_KAFKA_CHECKPOINT_EVERY"] = str(checkpoint_every)
        if code is not None:  # another checkout's code (``--ab``): its packages ahead of this one's
            env["PYTHONPATH"] = str(code)
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [*CLI, "worker", *kafka_args, "--port", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def cpu_s(self) -> float:
        """The worker process's CPU seconds so far (user and system, every thread)."""
        return sum(self.cpu_split_s())

    def cpu_split_s(self) -> tuple[float, float]:
        """The worker process's (user, system) CPU seconds so far, every thread."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tick, int(fields[12]) / tick

    def switches(self) -> int:
        """Voluntary context switches of the worker's live threads so far (/proc/PID/status
        counts the main thread's only). A thread that gave the interpreter lock up to another
        and waited for it back counts one each time: the hand-offs wave 9 found."""
        n = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                status = (task / "status").read_text()
            except OSError:  # ended meanwhile
                continue
            for line in status.splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    n += int(line.split()[1])
        return n

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def watch(self, ends: dict[int, int], want: int, timeout_s: float = 600) -> dict[str, Any]:
        """Poll /health until the worker holds ``want`` partitions, each folded to its end."""
        deadline = time.monotonic() + timeout_s
        assigned_at: float | None = None
        # The last answer that did not show the partitions held. A worker whose loop folds a large
        # batch answers /health late (no answer within the poll's timeout), so the first answer
        # that shows them may show them caught up too (run 4 at load 20 timed that as 0 s and
        # divided by it): the catch-up is then timed from here, an upper bound.
        not_yet = time.perf_counter()
        held: list[int] = []
        body: dict[str, Any] = {}
        # /health while the partitions are held and not caught up: how many polls it answered
        # (within the poll's 2 s timeout) and the longest time between two answers.
        answered = 0
        longest = 0.0
        last_answer = 0.0
        cpu_at = 0.0
        switches_at, split_at = 0, (0.0, 0.0)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited ({self.proc.returncode})")
            asked = time.perf_counter()
            body = health(self.port) or {}
            parts = {int(p): int(o) for p, o in body.get("partitions", {}).items()}
            now = time.perf_counter()
            if body:
                if held and last_answer:
                    longest = max(longest, now - last_answer)
                last_answer = now
            elif held and last_answer:
                longest = max(longest, asked - last_answer)
            if len(parts) == want:
                if assigned_at is None or sorted(parts) != held:
                    assigned_at, held = now, sorted(parts)
                    answered, longest, last_answer, cpu_at = 0, 0.0, now, self.cpu_s()
                    switches_at, split_at = self.switches(), self.cpu_split_s()
                    if all(o == ends[p] - 1 for p, o in parts.items()):
                        assigned_at, longest = not_yet, now - not_yet
                elif any(o < ends[p] - 1 for p, o in parts.items()):
                    answered += 1
                if all(o == ends[p] - 1 for p, o in parts.items()):
                    restored = {int(p): c["restored_from"] for p, c in body.get("checkpoints", {}).items()}
                    folded = sum(ends[p] - (restored.get(p) if restored.get(p) is not None else -1) - 1 for p in held)
                    seconds, cpu = now - assigned_at, self.cpu_s() - cpu_at
                    switches, (user, system) = self.switches(), self.cpu_split_s()
                    return {
                        "partitions": held,
                        "events_in_partitions": sum(ends[p] for p in held),
                        "restored_from": {str(p): restored.get(p) for p in held},
                        "events_folded": folded,
                        "seconds_assigned_to_caught_up": round(seconds, 3),
                        "seconds_process_start_to_assigned": round(assigned_at - self.started, 3),
                        "seconds_process_start_to_caught_up": round(now - self.started, 3),
                        "events_folded_per_s": round(folded / seconds) if seconds > 0 else None,
                        # CPU from the first answer showing the partitions (fewer than the
                        # whole catch-up's when that answer came late): per event, load-independent.
                        "cpu_seconds": round(cpu, 2),
                        "cpu_ms_per_event": round(cpu * 1000 / folded, 4) if folded else None,
                        "cpu_seconds_process_start_to_caught_up": round(self.cpu_s(), 2),
                        # From the first answer showing the partitions, as cpu_seconds.
                        "cpu_user_seconds": round(user - split_at[0], 2),
                        "cpu_system_seconds": round(system - split_at[1], 2),
                        "voluntary_switches": switches - switches_at,
                        "voluntary_switches_process_start_to_caught_up": switches,
                        "health_answers_during_catch_up": answered,
                        "health_longest_silence_s": round(longest, 3),
                        "partition_events_per_s": round(sum(ends[p] for p in held) / seconds) if seconds > 0 else None,
                        "fold": body.get("fold"),
                        "checkpoints": body.get("checkpoints"),
                        "loadavg": load(),
                    }
            else:
                assigned_at = None
                if body:  # an answer without them (not a poll that got none)
                    not_yet = now
            time.sleep(POLL_S)
        raise TimeoutError(f"worker {self.name} not caught up: {body}")


async def fill(cfg: Any, events: int, dim: int) -> dict[int, int]:
    """``events`` decided, sealed stores of 64 agents, appended to the events topic."""
    import numpy as np

    from memstream.streams.deciders.sealing import KafkaSealing
    from memstream.streams.decision.state import DecisionState
    from memstream.streams.log.kafka import KafkaLog, ensure_topics, events_end_offsets

    await ensure_topics(cfg)
    sealing = await asyncio.to_thread(KafkaSealing.from_env, cfg)
    kafka = KafkaLog(cfg)
    await kafka.start()
    try:
        state = DecisionState(cfg.partitions)
        rng = np.random.default_rng(7)
        written = 0
        while written < events:
            out = decided_stores(state, written, min(events, written + 2000), rng, dim)
            sealed = sealing.seal_events(out)
            rows = [(e.agent, e.type, v, vec) for e, (v, vec) in zip(out, sealed, strict=True)]
            await kafka.append(rows)
            written += len(out)
    finally:
        await kafka.close()
        await asyncio.to_thread(sealing.close)
    return await events_end_offsets(cfg)


async def raw_read(cfg: Any, parts: list[int], ends: dict[int, int], keep: bool) -> tuple[dict[str, Any], list[Any]]:
    """A bare consumer (the replay's settings) reading ``parts`` to their ends, opening each
    sealed value: the read side's ceiling without a fold. ``keep``: return the opened records."""
    from aiokafka import TopicPartition

    from memstream.api.kafka.worker.partition_log import fold_consumer
    from memstream.streams.deciders.sealing import KafkaSealing
    from memstream.streams.log.kafka import opened

    sealing = await asyncio.to_thread(KafkaSealing.from_env, cfg)
    consumer = fold_consumer(cfg)
    await consumer.start()
    kept: list[Any] = []
    try:
        tps = [TopicPartition(cfg.events_topic, p) for p in parts]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        left = {p: ends[p] for p in parts}
        n = 0
        started = time.perf_counter()
        while any(v > 0 for v in left.values()):
            batch = await consumer.getmany(timeout_ms=200, max_records=5000)
            for tp, records in batch.items():
                for rec in records:
                    rec = opened(rec, sealing)
                    if keep:
                        kept.append(rec)
                n += len(records)
                left[tp.partition] -= len(records)
        seconds = time.perf_counter() - started
    finally:
        await consumer.stop()
        await asyncio.to_thread(sealing.close)
    return {"events": n, "seconds": round(seconds, 3), "events_per_s": round(n / seconds)}, kept


def fold_in_process(records: list[Any], options: Any) -> dict[str, Any]:
    """The records (opened, in memory) folded into fresh read models: the fold alone."""
    from memstream.api.kafka.worker.models import PartitionModels

    models: dict[int, PartitionModels] = {}
    started, cpu = time.perf_counter(), time.process_time()
    for rec in records:
        m = models.get(rec.partition)
        if m is None:
            m = models[rec.partition] = PartitionModels(rec.partition, 0, None, options)
        m.apply(rec.offset, rec.value or b"", dict(rec.headers).get("vector"))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {
        "events": len(records),
        "seconds": round(seconds, 3),
        "events_per_s": round(len(records) / seconds),
        "cpu_ms_per_event": round(cpu * 1000 / len(records), 4),
    }


async def rebuild(cfg: Any, parts: list[int], jobs: int) -> dict[str, Any]:
    from memstream.api.kafka.worker.replay import rebuild_partitions

    r = await rebuild_partitions(cfg, parts, jobs=jobs)
    keys = ("events", "seconds", "events_per_second", "setup_seconds", "wall_seconds", "cpu_seconds", "cores_used")
    out = {k: r.get(k) for k in keys}
    out["partitions"] = parts
    out["jobs"] = jobs
    out["loadavg"] = load()
    out["digests"] = {str(p): v["digests"] for p, v in r["partitions"].items()}
    return out


def sidecars(data_dir: Path) -> dict[str, list[str]]:
    """Files in each partition's checkpoint directory (to check stale sidecars are dropped)."""
    root = data_dir / "kafka-checkpoints"
    if not root.exists():
        return {}
    return {str(d.relative_to(root)): sorted(f.name for f in d.iterdir()) for d in sorted(root.glob("*/p*"))}


def run_header(args: argparse.Namespace, **config: Any) -> dict[str, Any]:
    """The start of a run's report: its exact command (with the code it ran, when not this
    checkout's), the topic's shape, and the load."""
    code = f"PYTHONPATH={os.environ['PYTHONPATH']} " if os.environ.get("PYTHONPATH") else ""
    return {
        "command": f"{code}python bench/kafka_catchup.py " + " ".join(sys.argv[1:]),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": {
            "events": args.events,
            "partitions": args.partitions,
            "vector_dim": args.dim,
            "sealed": True,
            "embedding": "excluded in the workers (MEMSTREAM_EMBEDDER=none); stores carry random vectors",
            "health_poll_s": POLL_S,
            "cpus": os.cpu_count(),
            **config,
        },
        "loadavg_start": load(),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from memstream.api.services.settings import load_settings
    from memstream.streams.log.kafka import KafkaConfig, delete_topics_with_prefix

    prefix = f"memstream-bench-catchup-{uuid.uuid4().hex[:8]}"
    cfg = KafkaConfig(bootstrap=BOOTSTRAP, prefix=prefix, partitions=args.partitions)
    kafka_args = ["--kafka", BOOTSTRAP, "--prefix", prefix, "--partitions", str(args.partitions)]
    data_a = Path(tempfile.mkdtemp(prefix="memstream-catchup-a-"))
    data_b = Path(tempfile.mkdtemp(prefix="memstream-catchup-b-"))
    per_partition = args.events // args.partitions
    every = args.checkpoint_every or max(1000, per_partition // 4)
    report = run_header(args, worker_checkpoint_every=every)
    workers: list[Worker] = []
    try:
        t = time.perf_counter()
        ends = await fill(cfg, args.events, args.dim)
        report["fill"] = {"seconds": round(time.perf_counter() - t, 2), "ends": {str(p): e for p, e in ends.items()}}
        everything = sorted(ends)

        a = Worker("A", kafka_args, data_a, every)
        workers.append(a)
        report["a_alone"] = a.watch(ends, len(everything))

        b = Worker("B-no-checkpoint", kafka_args, data_b, 0)
        workers.append(b)
        report["b_without_checkpoint"] = b.watch(ends, args.partitions // 2)
        report["a_after_b_joined"] = a.watch(ends, args.partitions - args.partitions // 2)
        b.stop()
        report["a_regains"] = a.watch(ends, len(everything))

        b2 = Worker("B-from-checkpoint", kafka_args, data_a, every)
        workers.append(b2)
        report["b_from_checkpoint"] = b2.watch(ends, args.partitions // 2)
        gained = report["b_from_checkpoint"]["partitions"]
        for w in workers:
            w.stop()
        report["checkpoint_files_at_rest"] = sidecars(data_a)  # A's and B's, once both stopped

        # The limits, on B's partitions, in the same run (the workers are stopped).
        options = load_settings().read_model_options
        report["worker_read_model_options"] = {"vector_graphs": options.vector_graphs}
        raw, records = await raw_read(cfg, gained, ends, keep=True)
        report["raw_read_gained"] = raw | {"partitions": gained, "loadavg": load()}
        report["fold_in_process_gained"] = fold_in_process(records, options) | {"loadavg": load()}
        del records
        report["rebuild_jobs1_gained"] = await rebuild(cfg, gained, 1)
        report["raw_read_all"] = (await raw_read(cfg, everything, ends, keep=False))[0] | {"loadavg": load()}

        # Replay split over processes: --jobs 1 and 2 alternated, same topic.
        rounds = []
        for r in range(args.rounds):
            order = (1, 2) if r % 2 == 0 else (2, 1)
            row = {f"jobs_{j}": await rebuild(cfg, everything, j) for j in order}
            rounds.append(row)
        digests = [x.pop("digests") for row in rounds for x in row.values()]
        report["rebuild_rounds"] = rounds
        report["rebuild_digests_equal"] = all(d == digests[0] for d in digests)
        report["rebuild_jobs1_gained"].pop("digests")

        a_rate = report["a_alone"]["events_folded_per_s"]
        b0 = report["b_without_checkpoint"]
        b1 = report["b_from_checkpoint"]
        rate = lambda k: report[k]["events_per_s"]  # noqa: E731
        jobs1 = [row["jobs_1"]["events_per_second"] for row in rounds]
        jobs2 = [row["jobs_2"]["events_per_second"] for row in rounds]
        report["ratios"] = {
            "a_fold_over_raw_read_all": round(a_rate / rate("raw_read_all"), 2),
            "b_no_ckpt_over_raw_read_gained": round(b0["events_folded_per_s"] / rate("raw_read_gained"), 2),
            "b_no_ckpt_over_fold_in_process": round(b0["events_folded_per_s"] / rate("fold_in_process_gained"), 2),
            "b_no_ckpt_over_rebuild_jobs1_gained": round(
                b0["events_folded_per_s"] / report["rebuild_jobs1_gained"]["events_per_second"], 2
            ),
            "b_catch_up_seconds_ckpt_over_no_ckpt": round(
                b1["seconds_assigned_to_caught_up"] / b0["seconds_assigned_to_caught_up"], 2
            ),
            "rebuild_jobs2_over_jobs1": [round(y / x, 2) for x, y in zip(jobs1, jobs2, strict=True)],
        }
    finally:
        for w in workers:
            w.stop()
        await delete_topics_with_prefix(BOOTSTRAP, prefix)
        shutil.rmtree(data_a, ignore_errors=True)
        shutil.rmtree(data_b, ignore_errors=True)
    report["loadavg_end"] = load()
    return report


async def ab_async(args: argparse.Namespace) -> dict[str, Any]:
    """``--ab TREE``: one worker gaining every partition and folding it from 0, this checkout's
    code against TREE's (another checkout, e.g. a `git worktree` of the commit before a change),
    alternating the order by round on one topic, `rebuild --kafka --jobs 1` (its CPU too) between
    the two and `--jobs 2` after them in each round; then, on the same partitions, the in-process
    fold."""
    from memstream.api.services.settings import load_settings
    from memstream.streams.log.kafka import KafkaConfig, delete_topics_with_prefix

    prefix = f"memstream-bench-catchup-{uuid.uuid4().hex[:8]}"
    cfg = KafkaConfig(bootstrap=BOOTSTRAP, prefix=prefix, partitions=args.partitions)
    kafka_args = ["--kafka", BOOTSTRAP, "--prefix", prefix, "--partitions", str(args.partitions)]
    code = Path(tempfile.mkdtemp(prefix="memstream-ab-code-"))
    (code / "memstream").mkdir()
    for package in ("api", "projections", "streams"):  # as the editable install maps them
        (code / "memstream" / package).symlink_to(args.ab.resolve() / package)
    for package in ("client", "integrations"):  # installed as memstream.<name> from api/ (setup.py)
        if (args.ab / "api" / package).is_dir():
            (code / "memstream" / package).symlink_to(args.ab.resolve() / "api" / package)
    report = run_header(args, before=str(args.ab), worker_checkpoints="off")
    try:
        ends = await fill(cfg, args.events, args.dim)
        everything = sorted(ends)
        rounds = []
        jobs: list[dict[str, Any]] = []
        worker_digests: list[dict[str, Any]] = []
        for r in range(args.rounds):
            # `--jobs 1` runs between the two workers, so "÷ --jobs 1" pairs figures taken
            # seconds apart: on a shared host the same replay's rate moved ±30% over minutes
            # (docs/benchmarks.md, "The fold keeps the lock (wave 11)").
            row: dict[str, Any] = {}
            replays: dict[str, Any] = {}
            for step in ("before", "jobs_1", "after") if r % 2 == 0 else ("after", "jobs_1", "before"):
                if step == "jobs_1":
                    replays[step] = await rebuild(cfg, everything, 1)
                    continue
                data = Path(tempfile.mkdtemp(prefix=f"memstream-ab-{step}-"))
                w = Worker(step, kafka_args, data, 0, code if step == "before" else None)
                try:
                    row[step] = w.watch(ends, len(everything))
                    worker_digests.append(digests(w.port))  # after the catch-up's timing
                finally:
                    w.stop()
                    shutil.rmtree(data, ignore_errors=True)
            replays["jobs_2"] = await rebuild(cfg, everything, 2)
            rounds.append(row)
            jobs.append(replays)
            print(json.dumps({k: {f: v.get(f) for f in AB_FIELDS} for k, v in row.items()}), flush=True)
        report["catch_up_rounds"] = rounds
        options = load_settings().read_model_options
        raw, records = await raw_read(cfg, everything, ends, keep=True)
        report["raw_read"] = raw | {"loadavg": load()}
        report["fold_in_process"] = fold_in_process(records, options) | {"loadavg": load()}
        del records
        replayed = [x.pop("digests") for row in jobs for x in row.values()]
        # Every worker's read models (both codes, every round) against every replay's.
        report["digests_equal_to_rebuild"] = all(d == replayed[0] for d in replayed + worker_digests)
        report["rebuild_rounds"] = jobs
        fold = report["fold_in_process"]["events_per_s"]
        report["ratios"] = {
            "after_over_before": [
                round(x["after"]["events_folded_per_s"] / x["before"]["events_folded_per_s"], 2) for x in rounds
            ],
            "after_over_fold_in_process": [round(x["after"]["events_folded_per_s"] / fold, 2) for x in rounds],
            "before_over_fold_in_process": [round(x["before"]["events_folded_per_s"] / fold, 2) for x in rounds],
            "after_over_rebuild_jobs1": [
                round(x["after"]["events_folded_per_s"] / j["jobs_1"]["events_per_second"], 2)
                for x, j in zip(rounds, jobs, strict=True)
            ],
            "before_over_rebuild_jobs1": [
                round(x["before"]["events_folded_per_s"] / j["jobs_1"]["events_per_second"], 2)
                for x, j in zip(rounds, jobs, strict=True)
            ],
            "rebuild_jobs2_over_jobs1": [
                round(j["jobs_2"]["events_per_second"] / j["jobs_1"]["events_per_second"], 2) for j in jobs
            ],
            # CPU per event, the worker's (its process, from assignment) over `--jobs 1`'s (its
            # fold): what the cores granted on a shared machine do not move, as the rates above.
            "after_cpu_per_event_over_rebuild_jobs1": [
                round(x["after"]["cpu_ms_per_event"] / rebuild_cpu_ms(j["jobs_1"]), 2)
                for x, j in zip(rounds, jobs, strict=True)
            ],
            "before_cpu_per_event_over_rebuild_jobs1": [
                round(x["before"]["cpu_ms_per_event"] / rebuild_cpu_ms(j["jobs_1"]), 2)
                for x, j in zip(rounds, jobs, strict=True)
            ],
        }
    finally:
        await delete_topics_with_prefix(BOOTSTRAP, prefix)
        shutil.rmtree(code, ignore_errors=True)
    report["loadavg_end"] = load()
    return report


def rebuild_cpu_ms(r: dict[str, Any]) -> float:
    """A rebuild's CPU milliseconds per event folded."""
    return float(r["cpu_seconds"]) * 1000 / int(r["events"])


AB_FIELDS = (
    "events_folded_per_s",
    "cpu_ms_per_event",
    "cpu_system_seconds",
    "voluntary_switches",
    "cpu_seconds_process_start_to_caught_up",
    "seconds_assigned_to_caught_up",
    "health_answers_during_catch_up",
    "health_longest_silence_s",
    "loadavg",
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=160_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--dim", type=int, default=64, help="vector dimensions of each store (0: no vectors)")
    ap.add_argument("--checkpoint-every", type=int, default=0, help="worker checkpoints (0: a quarter partition)")
    ap.add_argument("--rounds", type=int, default=2, help="rebuild --jobs 1/2 rounds, alternating the order")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 8,000 events, one rebuild round")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "kafka_catchup.json")
    ap.add_argument("--ab", type=Path, help="a checkout whose worker to run against this one's (see ab_async)")
    args = ap.parse_args()
    if args.ab is not None and args.out == ap.get_default("out"):
        args.out = ROOT / "bench" / "results" / "kafka_catchup_ab.json"
    if args.quick:
        args.events, args.rounds = 8000, 1
    # Kafka mode seals its events: every process needs the same master key (one per run here).
    if not (os.environ.get("MEMSTREAM_MASTER_KEY") or os.environ.get("MEMSTREAM_MASTER_KEY_FILE")):
        os.environ["MEMSTREAM_MASTER_KEY"] = base64.b64encode(os.urandom(32)).decode()
    report = asyncio.run(ab_async(args) if args.ab is not None else main_async(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in report.items() if k != "rebuild_rounds"}, indent=2))


if __name__ == "__main__":
    main()
