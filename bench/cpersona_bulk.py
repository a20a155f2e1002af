"""The benches' side of bench/cpersona/bulk_fill.py: write a CPersona workload as the MCP tool calls
the benches would make (one JSON line per call) and run the bulk fill with CPersona's interpreter.

bulk_fill.py runs every call through CPersona's own tool handlers in process, so the database is
the one the MCP path writes (bench/cpersona/verify_bulk_fill.py checks that, table by table and
answer by answer, at 2,000 memories of each bench's workload; ``VERIFY_COMMAND``).

A server started on a bulk-filled database differs in one way from the server that filled it over
MCP: at startup CPersona calibrates its recall thresholds against what the database holds
(``CPERSONA_CALIBRATE_ON_MODEL_CHANGE``, on by default, whenever no calibration sidecar exists).
The MCP fill's server ran that calibration on the empty database, which learns nothing, and then
answered the benches' queries uncalibrated. ``SERVE_AS_MCP_FILLED`` turns the startup calibration
off so the server that measures a bulk-filled database answers in that same uncalibrated state
(and does not spend the first minutes of the measurement calibrating against 100k memories).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson

REPO = Path(__file__).resolve().parents[1]
BULK_FILL = REPO / "bench" / "cpersona" / "bulk_fill.py"
VERIFY_COMMAND = "python bench/cpersona/verify_bulk_fill.py --n 2000"
VERIFY_RESULT = "bench/results/cpersona_bulk_fill_verify.json"
SERVE_AS_MCP_FILLED = {"CPERSONA_CALIBRATE_ON_MODEL_CHANGE": "false"}


def store_line(arguments: Mapping[str, Any], *, key: str | None = None, vector: np.ndarray | None = None) -> bytes:
    """One ``store`` call. ``vector``: the content's embedding as float32, serialised exactly as
    bench/embed_server.py serialises it (orjson's numpy float32 encoding), so CPersona parses the
    same numbers it would have parsed from an /embed answer."""
    op: dict[str, Any] = {"tool": "store", "arguments": dict(arguments)}
    if key is not None:
        op["key"] = key
    if vector is not None:
        op["embedding"] = np.asarray(vector, dtype=np.float32)
    return orjson.dumps(op, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def declare_line(arguments: Mapping[str, Any], *, anchor_key: str | None = None) -> bytes:
    """One ``declare_associations`` call; ``anchor_key`` anchors it on the row a keyed store wrote."""
    op: dict[str, Any] = {"tool": "declare_associations", "arguments": dict(arguments)}
    if anchor_key is not None:
        op["anchor_key"] = anchor_key
    return orjson.dumps(op) + b"\n"


def write_ops(path: Path, lines: Iterable[bytes]) -> int:
    n = 0
    with path.open("wb") as fh:
        for line in lines:
            fh.write(line)
            n += 1
    return n


def cpersona_python(console_script: str | Path) -> Path:
    """CPersona's interpreter: the ``python`` beside its console script in its venv."""
    python = Path(console_script).with_name("python")
    if not python.exists():
        raise FileNotFoundError(f"{python} not found (CPersona's venv interpreter, beside {console_script})")
    return python


def run_bulk_fill(python: Path, ops: Path, env: Mapping[str, str], cwd: Path, stderr: Path) -> dict[str, Any]:
    """Run bulk_fill.py on ``ops`` into ``env['CPERSONA_DB_PATH']``; its report plus wall seconds.
    Raises when the fill failed or refused its input; a fill whose stores or declarations were not
    all accepted (exit 1) returns its report with ``exit_status`` 1 for the caller to judge."""
    report = ops.with_suffix(".report.json")
    t0 = time.perf_counter()
    with stderr.open("w") as err:
        rc = subprocess.run(
            [str(python), str(BULK_FILL), "--ops", str(ops), "--report", str(report)],
            env=dict(env),
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=err,
            check=False,
        ).returncode
    wall = time.perf_counter() - t0
    if rc not in (0, 1) or not report.exists():
        tail = stderr.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"bulk_fill exited {rc} (see {stderr}): {tail}")
    body: dict[str, Any] = json.loads(report.read_text())
    body["exit_status"] = rc
    body["wall_s"] = round(wall, 2)
    return body
