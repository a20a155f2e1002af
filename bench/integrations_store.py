"""What the LangGraph store costs per call, in process (Client.local) and over HTTP (a real
``memstream serve``), with the default embedder: puts of new keys, gets, replacing puts, a
filter search, a query search, and a cold store's first call (the fold of the agent's history).

    python bench/integrations_store.py                 # 500 items, both places
    python bench/integrations_store.py --items 100 --places local

Writes bench/results/integrations_store.json; docs/integrations.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memstream.client import Client
from memstream.integrations.langgraph import MemstreamStore

ROOT = Path(__file__).resolve().parents[1]
NS = ("bench-agent", "notes")
TOPICS = ["tomatoes", "goats", "printers", "invoices", "rust", "kafka", "tennis", "jasmine tea"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def client_at(place: str, data: Path) -> Iterator[Client]:
    if place == "local":
        with Client.local(data) as client:
            yield client
        return
    port = free_port()
    env = {**os.environ, "MEMSTREAM_DATA_DIR": str(data)}
    args = [sys.executable, "-m", "memstream.api.cli", "--log-level", "WARNING", "serve", "--port", str(port)]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with Client(f"http://127.0.0.1:{port}") as client:
            for _ in range(600):  # up to 60 s for the server (and its model) to start
                try:
                    client.get_profile(agent_id="probe")
                    break
                except Exception:
                    time.sleep(0.1)
            yield client
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def timed(fn: Callable[[int], Any], n: int) -> dict[str, float]:
    laps = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        laps.append((time.perf_counter() - t0) * 1000)
    laps.sort()
    return {
        "n": n,
        "mean_ms": round(statistics.fmean(laps), 3),
        "p50_ms": round(laps[len(laps) // 2], 3),
        "p95_ms": round(laps[int(len(laps) * 0.95) - 1], 3),
    }


def run(place: str, items: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, client_at(place, Path(tmp) / "data") as client:
        store = MemstreamStore(client)
        text = lambda i: f"note {i}: the team discussed {TOPICS[i % len(TOPICS)]} on day {i // 8}"  # noqa: E731
        out: dict[str, Any] = {}
        out["put_new"] = timed(lambda i: store.put(NS, f"k{i}", {"text": text(i), "i": i}), items)
        out["get"] = timed(lambda i: store.get(NS, f"k{i}"), items)
        out["put_replace"] = timed(lambda i: store.put(NS, f"k{i}", {"text": text(i) + " again", "i": i}), items // 5)
        out["search_filter"] = timed(lambda i: store.search(NS, filter={"i": {"$lt": 50}}, limit=10), 50)
        out["search_query"] = timed(lambda i: store.search(NS, query=f"what about {TOPICS[i % 8]}?", limit=5), 50)
        out["cold_first_get"] = timed(lambda i: MemstreamStore(client).get(NS, "k0"), 5)
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--places", nargs="+", default=["local", "server"], choices=["local", "server"])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "integrations_store.json")
    args = parser.parse_args()
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load_1m": os.getloadavg()[0]},
        "items": args.items,
        "places": {place: run(place, args.items) for place in args.places},
    }
    result["machine"]["load_1m_after"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
