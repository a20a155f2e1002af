"""What memstream.client costs over a bare HTTP call, and what in-process mode saves: per-call
latency of one cheap read (``list_memories`` of an agent with 20 memories) and one write
(``store``), sequential, through a bare ``httpx.Client`` POST, the typed ``Client`` over HTTP
(same server, same pool behaviour), and ``Client.local`` (no server). A real ``memstream serve``
app on loopback (embedded, no embedding model, so the model's time does not hide the client's).

Rounds alternate the ways so load on the machine falls on each alike.

    python bench/client_overhead.py                      # 3 rounds of 300 calls per way and tool
    python bench/client_overhead.py --calls 50 --out -   # quick, print only
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from memstream.api.faces.http import create_app
from memstream.api.services.settings import load_settings
from memstream.client import Client

READER = "bench-reader"  # 20 memories, read back whole each call
WRITER = "bench-writer"  # every store goes here, so the read stays the same size


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _summary(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 3),
        "p90_ms": round(ms[int(len(ms) * 0.9)], 3),
        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 3),
    }


def _timed(call: Callable[[int], Any], n: int, offset: int) -> list[float]:
    out = []
    for i in range(n):
        started = time.perf_counter()
        call(offset + i)
        out.append((time.perf_counter() - started) * 1000)
    return out


def run(calls: int, rounds: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="memstream-bench-client-"))
    settings = load_settings(env={}, data_dir=root / "served", sync="NORMAL", embedder="none")
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    bare = httpx.Client(base_url=url, timeout=60)
    typed = Client(url)
    local = Client.local(root / "local", settings={"sync": "NORMAL", "embedder": "none"})
    try:
        for i in range(20):
            typed.store(READER, f"seed note {i}")
            local.store(READER, f"seed note {i}")

        def bare_read(i: int) -> None:
            r = bare.post("/v1/tools/list_memories", json={"agent_id": READER})
            assert r.status_code == 200 and r.json()["count"] == 20

        def bare_store(i: int) -> None:
            r = bare.post("/v1/tools/store", json={"agent_id": WRITER, "content": f"bare note {i}"})
            assert r.status_code == 200 and r.json()["result"] == "stored"

        def ways(client: Client, tag: str) -> tuple[Callable[[int], Any], Callable[[int], Any]]:
            def read(i: int) -> None:
                assert client.list_memories(READER).count == 20

            def store(i: int) -> None:
                assert client.store(WRITER, f"{tag} note {i}").stored

            return read, store

        typed_read, typed_store = ways(typed, "typed")
        local_read, local_store = ways(local, "local")
        plan = {
            "http_bare": (bare_read, bare_store),
            "http_client": (typed_read, typed_store),
            "local_client": (local_read, local_store),
        }
        samples: dict[str, dict[str, list[float]]] = {w: {"list_memories": [], "store": []} for w in plan}
        names = list(plan)
        for r in range(rounds):
            for way in names[r % len(names) :] + names[: r % len(names)]:
                read, store = plan[way]
                samples[way]["list_memories"] += _timed(read, calls, r * calls)
                samples[way]["store"] += _timed(store, calls, r * calls)
    finally:
        bare.close()
        typed.close()
        local.close()
        server.should_exit = True
        thread.join(timeout=30)
    return {
        "calls_per_round": calls,
        "rounds": rounds,
        "cpus": os.cpu_count(),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "latency": {way: {tool: _summary(ms) for tool, ms in by_tool.items()} for way, by_tool in samples.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="bench/results/client_overhead.json", help="'-' prints only")
    args = parser.parse_args()
    result = run(args.calls, args.rounds)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out != "-":
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
