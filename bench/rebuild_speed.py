"""`memstream rebuild` at scale: N memories with real 384-d vectors, checkpointed as a server
leaves them, then a full rebuild (every read model, digests compared) timed by phase, beside
the limits it runs against: SQLite's sequential read of the log.

    python bench/rebuild_speed.py                      # 100k memories
    python bench/rebuild_speed.py --sizes 100000,1000000 --keep /tmp/rebuild-data
    python bench/rebuild_speed.py --sizes 1000000 --keep /tmp/rebuild-data --reaches 0   # reuse it
    python bench/rebuild_speed.py --data /tmp/copy-of-1m --reaches 0    # rebuild a filled directory

Before and after in one session: run it with ``PYTHONPATH=DIR`` (DIR holding another tree's
``memstream/{api,projections,streams}``, as bench/restart.py's ``--before-code``) on one copy of
the data and without on another, alternating.

The corpus and its vectors are recall_latency.py's (WordNet definitions, MiniLM-L6 int8 vectors
from vector_search.py's cache; needs `apt-get install wordnet-base`). The fill goes straight
through the embedded command bus; the checkpoint is written by starting and closing an engine
on the filled directory, as a server's shutdown does. Each size is rebuilt four times,
alternating the default settings (no vector graphs) with a reach past the window (graphs)
(``--reaches``). A size already filled in the ``--keep`` directory is reused as it is.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as `memstream` sets it, before numpy loads

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import recall_latency  # noqa: E402  (bench/ on the path first)


def log_read_rate(settings: Any) -> dict[str, float]:
    """Records/s of reading the whole log in offset order, with and without vectors: per second
    of wall and per second of this process's CPU (what it costs, on a shared machine). ``raw``:
    SQLite's rows alone, sealed records left sealed; the others open them as a fold does, each
    pass with a sealer of its own (``SqliteLog.read_decoded``: a read's keys in one query of
    keys.db, AES-GCM, each record opened into its decoded event; ``read`` on code without it)."""
    from memstream.streams.log.sealing import Sealer
    from memstream.streams.log.sqlite import SqliteLog

    log = SqliteLog(settings.log_path, num_partitions=settings.partitions, synchronous=settings.sync)
    out: dict[str, float] = {}
    try:
        end = log.end_offset()
        opener = log.sealer
        for vectors, raw in ((True, True), (False, False), (True, False)):
            log.sealer = None if raw or opener is None else Sealer(opener.keys, seal_new=False)
            started, cpu, pos = time.perf_counter(), time.process_time(), 0
            decoded = None if raw else getattr(log, "read_decoded", None)
            while pos < end:
                if decoded is not None:
                    opened = decoded(pos, end, limit=5_000, vectors=vectors)
                    if not opened:
                        break
                    pos = opened[-1][0] + 1
                    continue
                records = log.read(pos, end, limit=5_000, vectors=vectors)
                if not records:
                    break
                pos = records[-1].offset + 1
            which = ("raw_" if raw else "") + ("with_vectors" if vectors else "without_vectors")
            out[f"records_per_s_{which}"] = round(end / (time.perf_counter() - started))
            out[f"records_per_cpu_s_{which}"] = round(end / max(1e-9, time.process_time() - cpu))
    finally:
        log.sealer = opener
        log.close()
    return out


def aes_gcm_rate(settings: Any) -> dict[str, float]:
    """Records/s of AES-GCM alone on the log's sealed records (thread CPU): each record's content
    and vector decrypted with its data key in hand (looked up beforehand, untimed), nothing
    parsed. The floor under opening, beside SQLite's raw read in ``log_read_rate``."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from memstream.streams.keys.port import KEY_ID_BYTES
    from memstream.streams.log.sealing import _HEAD, _LEN, MAGIC, NONCE, Sealer, _aad
    from memstream.streams.log.sqlite import SqliteLog

    log = SqliteLog(settings.log_path, num_partitions=settings.partitions, synchronous=settings.sync)
    opener, log.sealer = log.sealer, None
    spent, n, pos = 0.0, 0, 0
    try:
        if opener is None:
            return {}
        sealer = Sealer(opener.keys, seal_new=False)
        end = log.end_offset()
        while pos < end:
            records = log.read(pos, end, limit=5_000)
            if not records:
                break
            pos = records[-1].offset + 1
            sealer.fetch(r.value for r in records)
            work = []
            for r in records:
                if r.value.startswith(MAGIC):
                    key_id = r.value[len(MAGIC) : len(MAGIC) + KEY_ID_BYTES]
                    (size,) = _LEN.unpack_from(r.value, _HEAD)
                    ev_id = orjson.loads(r.value[_HEAD + 4 : _HEAD + 4 + size])["id"]
                    work.append((sealer._open[key_id], key_id, r.value, size, r.vector, str(ev_id).encode()))
            started = time.thread_time()
            for dek, key_id, value, size, vector, ev_id in work:
                aead = AESGCM(dek)
                clear = value[_HEAD + 4 : _HEAD + 4 + size]
                aead.decrypt(value[_HEAD - NONCE : _HEAD], value[_HEAD + 4 + size :], _aad(key_id, clear))
                if vector is not None:
                    aead.decrypt(vector[:NONCE], vector[NONCE:], _aad(key_id, b"vector:" + ev_id))
            spent += time.thread_time() - started
            n += len(work)
    finally:
        log.sealer = opener
        log.close()
    return {"sealed_records": n, "records_per_cpu_s_aes_gcm_only": round(n / max(1e-9, spent))}


def _children_cpu() -> float:
    """CPU seconds of this process's finished children (the rebuild's second process)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def checkpoint(settings: Any) -> float:
    """Start and close an engine on the directory: it folds the log and writes its checkpoints."""
    from memstream.api.services.engine import EmbeddedEngine

    started = time.perf_counter()
    engine = EmbeddedEngine(settings.model_copy(update={"embedder": "none"}))
    await engine.start()
    await engine.close()
    return time.perf_counter() - started


def one_size(
    n: int, workload: Any, work: Path, reaches: list[int], data: Path | None = None, log_read: bool = True
) -> dict[str, Any]:
    from memstream.api.services.rebuild import rebuild_all
    from memstream.api.services.settings import Settings

    data = data or work / f"n{n}"
    settings = Settings(data_dir=data)
    fill: dict[str, Any] | None = None
    checkpoint_s: float | None = None
    checkpoint_cpu_s: float | None = None
    if (data / "log.sqlite3").exists():  # a kept directory (--keep): filled and checkpointed before
        recall_latency.log(f"{n}: reusing {data}; rebuilding")
    else:
        texts, vecs = workload.corpus(n)
        fill = asyncio.run(recall_latency.fill(data, texts, vecs, workload.model_id))
        del texts, vecs
        recall_latency.log(f"{n}: filled in {fill['seconds']} s; checkpointing")
        cpu = time.process_time()
        checkpoint_s = asyncio.run(checkpoint(settings))
        checkpoint_cpu_s = time.process_time() - cpu
        recall_latency.log(f"{n}: checkpointed in {checkpoint_s:.1f} s; rebuilding")
    runs = []
    # By default: no vector graphs (reach 0), then graphs (a reach past the window), twice.
    for reach in reaches:
        started, cpu = time.perf_counter(), time.process_time()
        children = _children_cpu()
        report = rebuild_all(settings.model_copy(update={"vector_reach": reach}))
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        children = _children_cpu() - children  # the rebuild's second process, if it ran one
        recall_latency.log(f"{n}: rebuilt with reach {reach} in {wall:.1f} s (equal: {report['equal']})")
        runs.append(
            {
                "vector_reach": reach,
                "vector_graphs": reach > 0,
                "wall_s": round(wall, 2),
                "cpu_s": round(cpu, 2),  # usearch's add threads included
                "second_process_cpu_s": round(children, 2),
                "load": os.getloadavg(),
                "equal": report["equal"],
                "phases_s": report.get("phases_s"),
                "fold_events_per_s": report["events_per_second"],
            }
        )
    return {
        "memories": n or None,
        "data": str(data),
        "events": report["events"],
        "fill": fill,
        "checkpoint_s": None if checkpoint_s is None else round(checkpoint_s, 2),
        "checkpoint_cpu_s": None if checkpoint_cpu_s is None else round(checkpoint_cpu_s, 2),
        "rebuilds": runs,
        "log_read": log_read_rate(settings) | aes_gcm_rate(settings) if log_read else None,
        "data_dir_mb": round(sum(p.stat().st_size for p in data.rglob("*") if p.is_file()) / 2**20),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100000")
    ap.add_argument("--keep", type=Path, default=None, help="keep the data directories here")
    ap.add_argument("--skip-log-read", action="store_true", help="leave out the log's read rate (the limit)")
    ap.add_argument("--data", type=Path, default=None, help="rebuild this filled directory (no fill; --sizes unused)")
    ap.add_argument("--reaches", default="0,50000,0,50000", help="one rebuild per vector reach, in order")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "rebuild_speed.json")
    args = ap.parse_args(argv)
    for k in [k for k in os.environ if k.startswith("MEMSTREAM_")]:
        del os.environ[k]
    work = args.keep or (args.data.parent if args.data else Path(tempfile.mkdtemp(prefix="ms-rebuild-")))
    work.mkdir(parents=True, exist_ok=True)
    workload = recall_latency.Workload(1) if args.data is None else None
    report: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python bench/rebuild_speed.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "load_start": os.getloadavg()},
        "sizes": [],
    }
    reaches = [int(r) for r in args.reaches.split(",")]
    try:
        if args.data is not None:
            report["sizes"].append(one_size(0, workload, work, reaches, args.data, not args.skip_log_read))
            print(json.dumps(report["sizes"][-1]), flush=True)
        for n in (int(x) for x in args.sizes.split(",") if x and args.data is None):
            report["sizes"].append(one_size(n, workload, work, reaches, log_read=not args.skip_log_read))
            print(json.dumps(report["sizes"][-1]), flush=True)
    finally:
        if args.keep is None and args.data is None:
            shutil.rmtree(work, ignore_errors=True)
    report["machine"]["load_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
