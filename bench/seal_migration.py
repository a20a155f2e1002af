"""How fast `memstream seal` migrates a data directory written before sealing (issue 16).

    python bench/seal_migration.py                   # 20,000 memories with 384-d vectors
    python bench/seal_migration.py --memories 100000
    python bench/seal_migration.py --quick           # a smoke run

A data directory is filled with sealing off (a random-vector embedder of the default model's
size stands in for the model), one record is erased under sealing, then the real CLI
(`python -m memstream.api.cli seal`) runs on it. Reported: its wall time, the records per
second of the copy, the log's size before and after. Results: bench/results/seal_migration.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.erasure import CALLER, open_engine, store_many  # noqa: E402
from memstream.api.tools.dispatch import dispatch  # noqa: E402


def log_bytes(data: Path) -> int:
    return sum(p.stat().st_size for p in data.iterdir() if p.name.startswith("log.sqlite3"))


async def fill(data: Path, memories: int, agents: int, concurrency: int) -> None:
    eng = await open_engine(data, sealing=False)
    try:
        per = memories // agents
        for a in range(agents):
            await store_many(eng, f"agent-{a}", 0, per, concurrency)
    finally:
        await eng.close()
    eng = await open_engine(data, sealing=True)  # sealed from here: the log holds plaintext before
    try:
        listed = await dispatch(eng, CALLER, "list_memories", {"agent_id": "agent-0", "limit": 1})
        mid = listed["memories"][0]["id"]
        out = await dispatch(eng, CALLER, "erase_memory", {"agent_id": "agent-0", "memory_id": mid, "reason": "bench"})
        assert out.get("ok") is True and out["unreachable"], out
    finally:
        await eng.close()
        os.environ.pop("MEMSTREAM_SEALING", None)


async def run(memories: int, agents: int, concurrency: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memstream-seal-bench-") as tmp:
        data = Path(tmp) / "data"
        t0 = time.perf_counter()
        await fill(data, memories, agents, concurrency)
        fill_s = time.perf_counter() - t0
        before = log_bytes(data)
        cmd = [sys.executable, "-m", "memstream.api.cli", "seal", "--data-dir", str(data), "--no-progress"]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, check=True)
        wall = time.perf_counter() - t0
        report = orjson.loads(done.stdout)
        return {
            "memories": memories,
            "agents": agents,
            "fill_s": round(fill_s, 1),
            "seal_wall_s": round(wall, 2),
            "seal_report": report,
            "log_bytes_before": before,
            "log_bytes_after": log_bytes(data),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--memories", type=int, default=20_000)
    ap.add_argument("--agents", type=int, default=10)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "seal_migration.json")
    a = ap.parse_args()
    if a.quick:
        a.memories = 1000
    result = asyncio.run(run(a.memories, a.agents, a.concurrency))
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode(), flush=True)
    report = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "command": " ".join(["python", "bench/seal_migration.py", *sys.argv[1:]]),
        "result": result,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
