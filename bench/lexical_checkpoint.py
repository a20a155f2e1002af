"""A running server's periodic lexical checkpoint (issue 19): its peak RSS over the base and its time.

A server at 1M memories checkpoints every ``checkpoint_every`` events. The lexical read model's
checkpoint writes a new sidecar, then needs the name of the sidecar the checkpoint on disk holds
(kept until the new one is saved). Two ways to learn it, alternating in one process each:

- ``known``: the read model was restored from that checkpoint, as a running server's was (what
  it does since 8852232);
- ``readback``: the name is not known, so the previous ``lexical.snap`` is read and parsed whole
  (a fresh fold beside an old checkpoint still does that; before 8852232 every checkpoint did).

    python bench/lexical_checkpoint.py --snapshots /tmp/scale-1m/n1000000/snapshots --rounds 2

The snapshots directory is only read: each run hard-links the lexical files into a scratch
directory (a save renames new files into place, so the originals are never written).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODES = ("readback", "known")


def status_mb() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS", "VmHWM")):
            fields[line.split(":")[0]] = int(line.split()[1]) // 1024
    return fields


def one(snapshots: Path, mode: str) -> dict[str, Any]:
    """Restore the lexical read model, fold one new memory, checkpoint it as the runner does."""
    from memstream.projections.lexical import LexicalProjection
    from memstream.streams.snapshots import SnapshotStore

    work = Path(tempfile.mkdtemp(prefix=f"memstream-lexcp-{mode}-"))
    try:
        for f in snapshots.iterdir():
            if f.name.startswith("lexical"):
                (work / f.name).hardlink_to(f)
        store = SnapshotStore(work)
        lex = LexicalProjection(store)
        body = store.load("lexical")
        if body is None:
            raise SystemExit(f"no lexical checkpoint in {snapshots}")
        lex.load_snapshot(body["state"])
        lex.offset = int(body["offset"])
        agent = next(iter(lex.agents))
        rows = sum(len(idx.slot_of) for idx in lex.agents.values())
        del body
        if mode == "readback":
            lex._on_disk_known = False  # the state of a fold that was not restored
        lex.apply(lex.offset + 1, new_memory(agent))
        lex.offset += 1
        gc.collect()
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here
        base = status_mb()["VmRSS"]
        t0 = time.perf_counter()
        store.save("lexical", {"offset": lex.offset, "state": lex.to_snapshot()})
        lex.drop_stale_sidecars()
        seconds = time.perf_counter() - t0
        peak = status_mb()["VmHWM"]
        return {
            "mode": mode,
            "rows": rows,
            "base_rss_mb": base,
            "peak_mb": peak,
            "peak_over_base_mb": peak - base,
            "seconds": round(seconds, 2),
            "sidecars_left": len(store.blob_names("lexical-")),
            "loadavg": list(os.getloadavg()),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def new_memory(agent: str) -> dict[str, Any]:
    return {
        "id": "e-bench-lexical-checkpoint",
        "type": "memory.stored",
        "v": 1,
        "scope": {"agent_id": agent, "project_id": "", "channel": ""},
        "actor": {"client_id": "bench", "agent_id": agent, "session_id": ""},
        "occurred_at": "2026-12-03T00:00:00+00:00",
        "command_id": "bench",
        "payload": {"id": 987_654_321, "content": "a new memory since the last checkpoint", "msg_id": None,
                    "locked": False},
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--snapshots", type=Path, required=True, help="a data directory's snapshots/")
    ap.add_argument("--rounds", type=int, default=2, help="pairs of runs, alternating the order")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--one", choices=MODES, help=argparse.SUPPRESS)  # a child process's run
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.snapshots, args.one)))
        return
    runs = []
    for r in range(args.rounds):
        for mode in MODES if r % 2 == 0 else MODES[::-1]:
            out = subprocess.run(
                [sys.executable, __file__, "--snapshots", str(args.snapshots), "--one", mode],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
            print(json.dumps(runs[-1]), flush=True)
    report = {
        "command": "python " + " ".join(sys.argv),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "runs": runs,
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
