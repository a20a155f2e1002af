"""Load (issue 6, item 4): 32 concurrent clients mixing store, recall and reconstruct against a
real server process on 127.0.0.1 for a fixed time: no errors, p99 reported, RSS bounded.

CI runs 15 s (MEMSTREAM_LOAD_SECONDS sets another duration; MEMSTREAM_LONG_TESTS=1 runs 120 s).
The benchmark mode with the real embedder is ``python bench/load.py`` (bench/results/load.json).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_load", REPO / "bench" / "load.py")
assert _spec is not None and _spec.loader is not None
bench_load = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_load)

pytestmark = pytest.mark.slow  # trials that take tens of seconds (more with MEMSTREAM_LONG_TESTS=1)
SECONDS = float(os.environ.get("MEMSTREAM_LOAD_SECONDS") or (120 if os.environ.get("MEMSTREAM_LONG_TESTS") else 15))
CLIENTS = 32
RSS_LIMIT_MB = 1_024  # the server's resident memory, whatever the load stored


def test_32_clients_mixed_load_no_errors_bounded_memory(tmp_path: Path) -> None:
    serve = [sys.executable, str(REPO / "tests" / "procs" / "serve.py")]
    result = asyncio.run(
        bench_load.run(clients=CLIENTS, duration_s=SECONDS, seed=10, command=serve, data=tmp_path / "data")
    )
    lat = result["latency"]
    print(
        f"load: {CLIENTS} clients, {result['duration_s']} s, {result['requests']} requests "
        f"({result['throughput_rps']}/s), errors {result['errors']}, p50 {lat['all']['p50_ms']} ms, "
        f"p99 {lat['all']['p99_ms']} ms (store {lat['store']['p99_ms']}, recall {lat['recall']['p99_ms']}, "
        f"reconstruct {lat['reconstruct']['p99_ms']}), RSS {result['rss_mb']}"
    )
    assert result["errors"] == 0, result["error_samples"]
    assert result["requests"] >= CLIENTS * 5, "the load ran too few requests to say anything"
    for op in ("store", "recall", "reconstruct"):
        assert lat[op]["count"] > 0, op
    rss = result["rss_mb"]
    assert rss["samples"] > 0 and rss["max"] is not None
    assert rss["max"] < RSS_LIMIT_MB, rss
    assert result["duration_s"] < SECONDS + 60, "the clients did not stop by themselves"
