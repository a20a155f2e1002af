"""Where a full fold's time goes as it advances: per chunk of the log (100k events by default),
the CPU seconds of this thread spent reading SQLite's rows, opening sealed records (a read's
keys fetched in one query, each record opened into its decoded event: ``SqliteLog.read_decoded``),
putting events in fold form, and in each read model's ``apply`` (``apply_many`` per read of 5,000 for a read model
that folds batches, as the runner folds it), with the process's anonymous RSS at the chunk's end.

    python bench/fold_profile.py --data /tmp/scale-1m/n1000000            # the whole log
    python bench/fold_profile.py --data D --stop 300000 --chunk 50000

A cost per event that grows with the state shows as a chunk figure that grows along the log.
Thread CPU, not wall: on a shared machine it leaves out the time other processes ran. The read
models are built as a rebuild builds them by default (no vector graphs), their sidecars in a
temporary directory; the data directory is only read (open a copy of kept data: opening the log
creates its schema if missing).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as `memstream` sets it, before numpy loads


def rss_anon_mb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) // 1024
    return -1


def main(argv: list[str] | None = None) -> int:
    from memstream.projections.catalog import ReadModelOptions, factories
    from memstream.projections.redaction import fold_form, is_redacted, sees_redacted
    from memstream.projections.runner import BatchFolding
    from memstream.streams.events import decode
    from memstream.streams.folding import collector_paused
    from memstream.streams.log.sqlite import SqliteLog
    from memstream.streams.snapshots import SnapshotStore

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="a data directory (its log.sqlite3 is read)")
    ap.add_argument("--stop", type=int, default=None, help="fold up to this offset (default: the log's end)")
    ap.add_argument("--chunk", type=int, default=100_000, help="events per line of output")
    args = ap.parse_args(argv)
    log = SqliteLog(args.data / "log.sqlite3")
    sealer, log.sealer = log.sealer, None  # rows read raw, then opened here: the two timed apart
    sidecars = SnapshotStore(Path(tempfile.mkdtemp(prefix="ms-fold-profile-")))
    models = [make() for make in factories(sidecars, ReadModelOptions(vector_graphs=False))]
    batching = [m for m in models if isinstance(m, BatchFolding)]
    singly = [m for m in models if not isinstance(m, BatchFolding)]
    stop = log.end_offset() if args.stop is None else args.stop
    clock = time.thread_time
    zero = {"sql": 0.0, "open": 0.0, "decode": 0.0, **{m.name: 0.0 for m in models}}
    spent, pos, mark, wall = dict(zero), 0, clock(), time.perf_counter()
    with collector_paused():  # as every long fold runs
        while pos < stop:
            t0 = clock()
            records = log.read(pos, stop, limit=5_000)
            t1 = clock()
            spent["sql"] += t1 - t0
            if not records:
                break
            batch: list[tuple[int, dict[str, object], bool]] = []
            if sealer is not None:  # the read's keys in one query, as SqliteLog.read_decoded does
                t1 = clock()
                sealer.refresh()
                sealer.fetch(rec.value for rec in records)
                spent["open"] += clock() - t1
            for rec in records:
                t1 = clock()
                if sealer is not None:
                    event, vector = sealer.open_decoded(rec.value, rec.vector)
                else:
                    event, vector = decode(rec.value), rec.vector
                t2 = clock()
                ev = fold_form(event)
                if vector is not None:
                    ev["vector"] = vector
                redacted = is_redacted(ev)
                t3 = clock()
                spent["open"] += t2 - t1
                spent["decode"] += t3 - t2
                batch.append((rec.offset, ev, redacted))
                for m in singly:  # as runner.fold_records folds it
                    if not redacted or sees_redacted(m):
                        m.apply(rec.offset, ev)
                    m.offset = rec.offset
                    t4 = clock()
                    spent[m.name] += t4 - t3
                    t3 = t4
            for b in batching:  # the batch's events at once (the lexical read model)
                t3 = clock()
                b.apply_many([(o, ev) for o, ev, redacted in batch if not redacted or sees_redacted(b)])
                b.offset = records[-1].offset
                spent[b.name] += clock() - t3
            pos = records[-1].offset + 1
            if pos % args.chunk < len(records) or pos >= stop:
                line = {"upto": pos, "cpu_s": round(clock() - mark, 2), "wall_s": round(time.perf_counter() - wall, 1)}
                line.update({k: round(v, 2) for k, v in spent.items()})
                line.update(rss_anon_mb=rss_anon_mb(), load=round(os.getloadavg()[0], 1))
                print(json.dumps(line), flush=True)
                spent, mark, wall = dict(zero), clock(), time.perf_counter()
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
