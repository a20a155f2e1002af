"""Several processes sharing one data directory decide as if one writer ran (W2, W3)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import orjson

from memstream.streams.events import decode
from memstream.streams.log.sqlite import SqliteLog

PROCS = Path(__file__).parents[1] / "procs"


def test_eight_processes_store_the_same_50_msg_ids(tmp_path: Path) -> None:
    data = tmp_path / "data"
    workers = [
        subprocess.Popen(
            [sys.executable, str(PROCS / "store_many.py"), str(data), str(n), "50"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for n in range(8)
    ]
    answers = []
    for w in workers:
        out, err = w.communicate(timeout=180)
        assert w.returncode == 0, err.decode()[-2000:]
        answers.extend(orjson.loads(line) for line in out.splitlines())
    assert len(answers) == 400
    assert Counter(a["result"] for a in answers).keys() <= {"stored", "skipped"}
    stored = [a for a in answers if a["result"] == "stored"]
    assert len(stored) == 50

    log = SqliteLog(data / "log.sqlite3")
    try:
        events = [decode(r.value) for r in log.read(0, limit=10_000)]
    finally:
        log.close()
    by_msg = Counter(e["payload"]["msg_id"] for e in events if e["type"] == "memory.stored")
    assert len(by_msg) == 50 and set(by_msg.values()) == {1}
    id_of = {e["payload"]["msg_id"]: e["payload"]["id"] for e in events if e["type"] == "memory.stored"}
    ids = set(id_of.values())
    for a in answers:
        assert a["id"] in ids  # every skip echoes the one row that landed
