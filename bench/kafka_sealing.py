"""What sealing costs a Kafka deployment's CPU (issue 16), per event, in process: the decider
seals what it appends (``KafkaSealing.seal_events``) and every reader opens what it folds
(``KafkaSealing.open``), against the same events appended and read clear. The key store is a
real one on the broker (keys are made 256 at a time, acknowledged by all in-sync replicas, so
their round trips are in the figures). Sealed and clear rounds alternate in one run.

    python bench/kafka_sealing.py                    # 20,000 events x 6 rounds
    python bench/kafka_sealing.py --events 2000 --rounds 2   # a smoke run

Results: bench/results/kafka_sealing.json (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import platform
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memstream.streams import commands as c  # noqa: E402
from memstream.streams.deciders.sealing import KafkaSealing  # noqa: E402
from memstream.streams.deciders.step import NewAudit, NewEvent, decide_and_fold  # noqa: E402
from memstream.streams.decision.limits import Limits  # noqa: E402
from memstream.streams.decision.state import DecisionState  # noqa: E402
from memstream.streams.events import Actor, Embedding, Scope, new_id  # noqa: E402
from memstream.streams.log.kafka import KafkaConfig, delete_topics_with_prefix  # noqa: E402

DIM = 384
PARTITIONS = 4


def events_of(count: int, seed: int) -> list[NewEvent]:
    """``count`` memory.stored events of 40 agents, as the decider makes them."""
    rng = np.random.default_rng(seed)
    state = DecisionState(PARTITIONS)
    events: list[NewEvent] = []
    audits: list[NewAudit] = []
    for i in range(count):
        vec = Embedding.from_vector("bench", rng.standard_normal(DIM).astype(np.float32))
        cmd = c.StoreMemory(
            content=f"note {i}: the quarterly review moved the billing migration to week {i % 52} again",
            embedding=vec,
            command_id=new_id(),
            scope=Scope(agent_id=f"agent-{i % 40}"),
            actor=Actor(client_id="bench"),
            received_at=datetime.now(UTC),
        )
        decide_and_fold(state, cmd, Limits(), events, audits)
    return events


def clear_round(events: list[NewEvent]) -> tuple[float, float]:
    started = time.perf_counter()
    stored = [(e.value, e.vector) for e in events]
    appended = time.perf_counter() - started
    started = time.perf_counter()
    for value, _vector in stored:
        orjson.loads(value)
    return appended, time.perf_counter() - started


def sealed_round(sealing: KafkaSealing, events: list[NewEvent]) -> tuple[float, float]:
    started = time.perf_counter()
    stored = sealing.seal_events(events)
    appended = time.perf_counter() - started
    started = time.perf_counter()
    for e, (value, vector) in zip(events, stored, strict=True):
        opened, _ = sealing.open(e.partition, value, vector)
        orjson.loads(opened)
    return appended, time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "kafka_sealing.json")
    args = ap.parse_args()
    os.environ.setdefault("MEMSTREAM_MASTER_KEY", base64.b64encode(os.urandom(32)).decode())
    cfg = KafkaConfig(bootstrap=args.bootstrap, prefix=f"memstream-bench-seal-{uuid.uuid4().hex[:8]}",
                      partitions=PARTITIONS)  # fmt: skip
    sealing = KafkaSealing.from_env(cfg)
    rows: list[dict[str, Any]] = []
    try:
        for r in range(args.rounds):
            events = events_of(args.events, r)  # fresh records: sealing makes keys for each
            order = ["clear", "sealed"] if r % 2 == 0 else ["sealed", "clear"]
            for mode in order:
                append_s, read_s = sealed_round(sealing, events) if mode == "sealed" else clear_round(events)
                rows.append({"round": r, "mode": mode, "append_us": append_s / len(events) * 1e6,
                             "read_us": read_s / len(events) * 1e6})  # fmt: skip
                print(f"round {r} {mode:6}: append {rows[-1]['append_us']:7.2f} us/event, "
                      f"read {rows[-1]['read_us']:7.2f} us/event", file=sys.stderr)  # fmt: skip
    finally:
        sealing.close()
        asyncio.run(delete_topics_with_prefix(cfg.bootstrap, cfg.prefix))

    def median(mode: str, field: str) -> float:
        return statistics.median(row[field] for row in rows if row["mode"] == mode)

    summary = {
        mode: {"append_us": round(median(mode, "append_us"), 2), "read_us": round(median(mode, "read_us"), 2)}
        for mode in ("clear", "sealed")
    }
    report = {
        "what": "per-event CPU of the Kafka decider's sealing and of a reader's opening, vs clear",
        "events": args.events,
        "rounds": args.rounds,
        "dim": DIM,
        "summary_median": summary,
        "sealing_adds_us_per_event": {
            "append": round(summary["sealed"]["append_us"] - summary["clear"]["append_us"], 2),
            "read": round(summary["sealed"]["read_us"] - summary["clear"]["read_us"], 2),
        },
        "rows": rows,
        "load_average": os.getloadavg(),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "at": datetime.now(UTC).isoformat(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    print(orjson.dumps(report["summary_median"]).decode())
    print(orjson.dumps(report["sealing_adds_us_per_event"]).decode())


if __name__ == "__main__":
    main()
