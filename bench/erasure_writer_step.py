"""The agent erasure's step on the bus's writer thread, in one process (issue 16): deciding
``erase_agent_data``, folding it into the decision state and encoding its event (what the
bus's commit does before the append), plus one parse of the event (the sealer's), on a
``DecisionState`` of N memories (every 97th locked). ``before``: the event listing every
memory and episode id (``decide_erase_agent_listing``); ``now``: the event naming no
record. Alternating by round, each on a fresh state.

    python bench/erasure_writer_step.py --memories 100000 --rounds 6
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from memstream.streams.commands import EraseAgentData
from memstream.streams.deciders.step import NewAudit, NewEvent, decide_and_fold
from memstream.streams.decision import dispatch
from memstream.streams.decision.erasure import decide_erase_agent_listing
from memstream.streams.decision.limits import Limits
from memstream.streams.decision.state import DecisionState
from memstream.streams.events import Actor, Scope, decode, utcnow

ROOT = Path(__file__).resolve().parents[1]


def stored(mid: int) -> dict[str, Any]:
    return {
        "type": "memory.stored",
        "scope": {"agent_id": "big", "project_id": "p", "channel": "c"},
        "command_id": f"store-{mid}",
        "payload": {"id": mid, "content": f"note {mid}", "msg_id": f"m{mid}", "locked": mid % 97 == 1,
                    "embedding": {"model": "m", "dim": 3}},
    }  # fmt: skip


def one(memories: int, variant: str, label: str) -> tuple[float, int]:
    state = DecisionState(1)
    for i in range(memories):
        state.apply_event(i, stored(i + 1))
    now = dispatch.decide_erase_agent
    dispatch.decide_erase_agent = decide_erase_agent_listing if variant == "before" else now
    try:
        cmd = EraseAgentData(command_id=label, scope=Scope(agent_id="big"), actor=Actor(client_id="bench"),
                             received_at=utcnow(), reason="bench")  # fmt: skip
        events: list[NewEvent] = []
        audits: list[NewAudit] = []
        t = time.perf_counter()
        decide_and_fold(state, cmd, Limits(), events, audits)
        decode(events[0].value)
        return (time.perf_counter() - t) * 1000, len(events[0].value)
    finally:
        dispatch.decide_erase_agent = now


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memories", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "erasure_writer_step.json")
    a = ap.parse_args()
    ms: dict[str, list[float]] = {"before": [], "now": []}
    size: dict[str, int] = {}
    for r in range(a.rounds):
        for variant in ("before", "now") if r % 2 == 0 else ("now", "before"):
            t, size[variant] = one(a.memories, variant, f"erase-{r}-{variant}")
            ms[variant].append(round(t, 2))
    report = {
        "command": "python bench/erasure_writer_step.py " + " ".join(sys.argv[1:]),
        "memories": a.memories,
        "ms": ms,
        "median_ms": {k: round(statistics.median(v), 2) for k, v in ms.items()},
        "event_bytes": size,
        "load_average_after": list(os.getloadavg()),
    }
    a.out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    print(orjson.dumps(report).decode())


if __name__ == "__main__":
    main()
