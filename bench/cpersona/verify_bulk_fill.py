"""Check that bench/cpersona/bulk_fill.py writes the database CPersona's MCP path writes.

For each bench workload, at ``--n`` memories (2,000 by default):

* reconstruct (bench/reconstruct_latency.py): N stores, N mention declarations anchored on them,
  N/2 entity relations in calls of 64; hashed 64-dim vectors from an in-process /embed server.
* recall (bench/recall_latency.py): N WordNet definitions stored with msg_id ``d<i>`` and their
  precomputed MiniLM vectors (the /embed server answers them from its table and embeds the rest
  live), in two increments (N/2, then N) with the recall queries asked after each, as the bench
  does at its sizes.

Two databases are filled from the same calls: (A) over MCP stdio by the benches' own fill code,
one request in flight (with several in flight the server assigns ids in completion order, so rows
would match only up to a permutation of ids); (B) by bulk_fill.py through the benches'
``--cpersona-fill bulk`` code. Then:

1. Tables: once each fill is done and CPersona's background block tasks have drained, each
   database is copied (SQLite backup API) and every table in ``sqlite_master`` is compared row
   by row, rowids included: the data tables, the FTS5 index and its shadow tables, the block and
   vector change logs, the task queue and ``sqlite_sequence``; also the schema and a few pragmas.
   Left out: the columns that hold the wall clock (``TIMESTAMP_COLUMNS``, listed per table in the
   report) and the task queue's id counter (``TRANSIENT_SEQUENCES``, both values reported).
2. Same clock: the MCP database's wall-clock columns are written into the bulk one (by rowid;
   ``transplant_clock``), and every table is compared again with nothing left out. Equal means
   the two fills differ in when they ran and in nothing else.
3. Answers as each bench reads them, on the bulk database with the MCP clock: A's queries go to
   the server that filled it (the benches' MCP mode), B's to a fresh server started the way the
   benches start one on a bulk database (``SERVE_AS_MCP_FILLED``). reconstruct workload:
   ``--queries`` reconstruct, recall and traverse calls; recall workload: ``--queries`` recall
   calls at each size.
4. The same calls to fresh servers with the default startup on copies of both (what the reconstruct
   bench's adjacency-off pass does: a restart, which runs CPersona's startup calibration; asked
   once it has finished).
5. For information only: fresh servers on the MCP database and on the bulk database with its own
   clock. CPersona's answers read the stamps (recency in recall scores, the adjacency key and
   claim order in reconstruct), and a bulk fill runs ~4x faster, so some answers differ here; by
   (2) the stamps are the whole of the difference.

Answers are compared after replacing ISO-8601 date-times by ``<time>``; any other difference,
a number's last digit included, counts (the report lists the first ones per pass). The check
passes on 1-4.

Usage (repo root, project venv; CPersona installed in /work/cpersona-venv)::

    python bench/cpersona/verify_bulk_fill.py --n 2000            # both workloads, ~4 min here
    python bench/cpersona/verify_bulk_fill.py --workloads reconstruct --n 500

Writes bench/results/cpersona_bulk_fill_verify.json (``--out``); exit status 0 when every table
and every answer matched, 1 otherwise.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import platform
import re
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

import recall_latency as rcl  # noqa: E402
import reconstruct_latency as rl  # noqa: E402
from cpersona_bulk import SERVE_AS_MCP_FILLED, VERIFY_RESULT  # noqa: E402
from embed_server import EmbedServer, serve_in_thread  # noqa: E402
from eval_recall import DEFAULT_CPERSONA, McpStdio, _dist_version, cpersona_env  # noqa: E402

REPO = BENCH.parent
TIMESTAMP_COLUMNS = ("timestamp", "created_at", "last_recalled_at", "declared_at", "applied_at", "updated_at")
_ISO = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?")
CALIBRATED = "Vector threshold startup calibration:"
MAX_LISTED = 5
# The task queue's id counter: every process start queues one block-backfill task (deleted once
# run), and the bulk mode starts more processes than one long-lived MCP server (bulk_fill.py per
# increment, a fresh server per size), so this counter runs ahead by those starts. No row and no
# answer reads it; the report shows both values.
TRANSIENT_SEQUENCES = ("pending_memory_tasks",)
PRAGMAS = ("user_version", "journal_mode", "page_size", "encoding")


def log(msg: str) -> None:
    print(f"[verify-bulk-fill {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# =============================================================================================
# Databases
# =============================================================================================


def wait_drained(db: Path, timeout: float = 600.0) -> None:
    """Poll until CPersona's background task queue is empty (the block tasks every store queues)."""
    deadline = time.monotonic() + timeout
    while True:
        conn = sqlite3.connect(db, timeout=30)
        try:
            pending = conn.execute("SELECT count(*) FROM pending_memory_tasks").fetchone()[0]
        finally:
            conn.close()
        if pending == 0:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{db}: {pending} background tasks still pending after {timeout:.0f} s")
        time.sleep(0.1)


def snapshot(db: Path, dest: Path) -> Path:
    """A consistent copy of the committed database (the server may still have it open)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    src = sqlite3.connect(db, timeout=30)
    out = sqlite3.connect(dest)
    try:
        src.backup(out)
    finally:
        out.close()
        src.close()
    return dest


def _rows(
    conn: sqlite3.Connection, table: str, ignore: tuple[str, ...]
) -> tuple[list[str], list[str], list[tuple[Any, ...]]]:
    """(columns compared, columns ignored, rows sorted) of one table, its rowid first when it has one."""
    cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
    keep = [c for c in cols if c not in ignore]
    ignored = [c for c in cols if c in ignore]
    select = ", ".join(f'"{c}"' for c in keep)
    try:
        rows = conn.execute(f'SELECT rowid, {select} FROM "{table}"').fetchall()
        keep = ["rowid", *keep]
    except sqlite3.OperationalError:  # WITHOUT ROWID
        rows = conn.execute(f'SELECT {select} FROM "{table}"').fetchall()
    return keep, ignored, sorted(rows, key=repr)


def compare_databases(a: Path, b: Path, ignore: tuple[str, ...] = TIMESTAMP_COLUMNS) -> dict[str, Any]:
    """Every table of ``a`` and ``b`` row by row (rowids included), leaving out ``ignore`` columns."""
    ca, cb = sqlite3.connect(a), sqlite3.connect(b)
    try:
        names_a = {r[0] for r in ca.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        names_b = {r[0] for r in cb.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        schema_a = sorted(r for r in ca.execute("SELECT type, name, sql FROM sqlite_master"))
        schema_b = sorted(r for r in cb.execute("SELECT type, name, sql FROM sqlite_master"))
        tables: dict[str, Any] = {}
        for name in sorted(names_a | names_b):
            if name not in names_a or name not in names_b:
                tables[name] = {"equal": False, "difference": "table missing on one side"}
                continue
            cols, ignored, ra = _rows(ca, name, ignore)
            _, _, rb = _rows(cb, name, ignore)
            entry: dict[str, Any] = {}
            if name == "sqlite_sequence":
                entry["not_compared"] = {
                    r[1]: [r[2], next((x[2] for x in rb if x[1] == r[1]), None)]
                    for r in ra
                    if r[1] in TRANSIENT_SEQUENCES
                }
                ra = [r for r in ra if r[1] not in TRANSIENT_SEQUENCES]
                rb = [r for r in rb if r[1] not in TRANSIENT_SEQUENCES]
            entry.update({"rows": len(ra), "equal": ra == rb})
            if ignored:
                entry["ignored_columns"] = ignored
            if ra != rb:
                entry["rows_bulk"] = len(rb)
                only_a = [r for r in ra if r not in set(rb)][:2]
                only_b = [r for r in rb if r not in set(ra)][:2]
                entry["columns"] = cols
                entry["first_only_mcp"] = [_short(r) for r in only_a]
                entry["first_only_bulk"] = [_short(r) for r in only_b]
            tables[name] = entry
        pragmas = {p: (ca.execute(f"PRAGMA {p}").fetchall(), cb.execute(f"PRAGMA {p}").fetchall()) for p in PRAGMAS}
    finally:
        ca.close()
        cb.close()
    return {
        "schema_equal": schema_a == schema_b,
        "pragmas_equal": all(x == y for x, y in pragmas.values()),
        "tables_equal": all(t["equal"] for t in tables.values()),
        "tables": tables,
    }


def transplant_clock(src: Path, dst: Path) -> int:
    """Write ``src``'s wall-clock columns into the same rows of ``dst`` (matched by rowid), so the two
    databases differ in nothing a server reads when the fills differed only in when they ran.

    Only ``TIMESTAMP_COLUMNS`` are written. The one trigger such an UPDATE can fire on these tables
    (``memories_vector_log_au``) writes only while CPersona's vector change log is on, which is
    refused here; the comparison with nothing ignored that follows would show any other effect."""
    conn = sqlite3.connect(dst)
    try:
        if conn.execute("SELECT logging FROM vector_log_clock WHERE id = 0").fetchone() != (0,):
            raise RuntimeError(f"{dst}: vector change log on; an UPDATE of timestamps would log changes")
        conn.execute("ATTACH DATABASE ? AS src", (str(src),))
        changed = 0
        tables = [r[0] for r in conn.execute("SELECT name FROM main.sqlite_master WHERE type = 'table'")]
        for table in tables:
            cols = [r[1] for r in conn.execute(f'PRAGMA main.table_info("{table}")') if r[1] in TIMESTAMP_COLUMNS]
            for col in cols:
                cur = conn.execute(
                    f'UPDATE main."{table}" SET "{col}" = (SELECT s."{col}" FROM src."{table}" s '
                    f'WHERE s.rowid = main."{table}".rowid) WHERE rowid IN (SELECT rowid FROM src."{table}")'
                )
                changed += cur.rowcount
        conn.commit()
        conn.execute("DETACH DATABASE src")
    finally:
        conn.close()
    return changed


def _short(row: tuple[Any, ...]) -> list[Any]:
    return [v.hex()[:32] + "…" if isinstance(v, bytes) else (v[:80] if isinstance(v, str) else v) for v in row]


# =============================================================================================
# Answers
# =============================================================================================


def normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, str):
        return _ISO.sub("<time>", value)
    return value


def differences(a: Any, b: Any, path: str = "$") -> list[str]:
    if type(a) is not type(b):
        return [f"{path}: {json.dumps(a)[:120]} != {json.dumps(b)[:120]}"]
    if isinstance(a, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: only in {'mcp' if k in a else 'bulk'}")
            else:
                out += differences(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {json.dumps(a)[:120]} != {json.dumps(b)[:120]}"]


Calls = list[tuple[str, dict[str, Any]]]


def ask(client: McpStdio, calls: Calls) -> list[dict[str, Any]]:
    return [normalize(client.call_tool(tool, args)) for tool, args in calls]


def compare_answers(a: list[dict[str, Any]], b: list[dict[str, Any]], calls: Calls) -> dict[str, Any]:
    diffs: list[str] = []
    unequal = 0
    for (tool, args), x, y in zip(calls, a, b, strict=True):
        d = differences(x, y)
        if d:
            unequal += 1
            diffs += [f"{tool} {json.dumps(args)[:80]}: {line}" for line in d[:2]]
    errors = sum(1 for body in a + b if body.get("ok") is False or "error" in body)
    return {
        "calls": len(calls),
        "equal": unequal == 0,
        "unequal_calls": unequal,
        "error_answers": errors,
        "first_differences": diffs[:MAX_LISTED],
    }


def wait_calibrated(stderr: Path, timeout: float = 900.0) -> None:
    """A fresh server calibrates in the background at startup; wait until it has logged the end."""
    deadline = time.monotonic() + timeout
    while CALIBRATED not in stderr.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no startup calibration line in {stderr} after {timeout:.0f} s")
        time.sleep(0.2)


def serve_and_ask(
    cpersona: str, db: Path, home: Path, embed_url: str, extra: dict[str, str], calls: Calls, *, calibrated: bool
) -> list[dict[str, Any]]:
    """A fresh CPersona server on a copy of ``db``, asked ``calls``."""
    (home / "data").mkdir(parents=True, exist_ok=True)
    shutil.copy(db, home / "data" / "cpersona.db")
    err = home / "server.stderr"
    client = McpStdio([cpersona], cpersona_env(home, embed_url, extra), home, err)
    try:
        client.handshake()
        if calibrated:
            wait_calibrated(err)
        return ask(client, calls)
    finally:
        client.close()


# =============================================================================================
# Workloads
# =============================================================================================


def bulk_side(
    db: Path, snap_mcp: Path, copy: Path, serve: Callable[[], list[dict[str, Any]]]
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """After a bulk fill into ``db``: its tables against the MCP copy ``snap_mcp`` (clock columns left
    out), then the MCP fill's clock written into ``db`` and every column compared, then ``serve``.
    Returns (tables, tables with the same clock, answers); ``copy`` keeps the bulk database as filled."""
    snapshot(db, copy)
    tables = compare_databases(snap_mcp, copy)
    transplant_clock(snap_mcp, db)
    same_clock = compare_databases(snap_mcp, db, ignore=())
    same_clock = {k: v for k, v in same_clock.items() if k != "tables"} | {
        "unequal_tables": [t for t, e in same_clock["tables"].items() if not e["equal"]]
    }
    return tables, same_clock, serve()


def fresh_passes(
    args: argparse.Namespace,
    work: Path,
    embed_url: str,
    calls: Calls,
    snap_mcp: Path,
    snap_bulk_same_clock: Path,
    snap_bulk_own_clock: Path,
    extra: dict[str, str],
) -> dict[str, Any]:
    """Fresh servers on copies: default startup (calibration, awaited) on both databases with the
    same clock; then, for information, the bulk database with its own clock against the MCP one."""
    fa = serve_and_ask(args.cpersona, snap_mcp, work / "fresh-mcp", embed_url, extra, calls, calibrated=True)
    fb = serve_and_ask(
        args.cpersona, snap_bulk_same_clock, work / "fresh-bulk", embed_url, extra, calls, calibrated=True
    )
    own = serve_and_ask(
        args.cpersona,
        snap_bulk_own_clock,
        work / "own-clock-bulk",
        embed_url,
        SERVE_AS_MCP_FILLED,
        calls,
        calibrated=False,
    )
    ref = serve_and_ask(
        args.cpersona, snap_mcp, work / "own-clock-mcp", embed_url, SERVE_AS_MCP_FILLED, calls, calibrated=False
    )
    return {
        "answers_fresh_servers": {"env": extra, **compare_answers(fa, fb, calls)},
        "answers_own_clocks_informational": compare_answers(ref, own, calls),
    }


def verify_reconstruct(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    wl = rl.workload(args.n, args.seed, args.queries)
    calls: Calls = []
    for q in wl.reconstruct_queries:
        calls.append(("reconstruct", rl.reconstruct_args(q)))
        calls.append(("recall", {"agent_id": rl.AGENT, "query": q, "limit": 10}))
    calls += [("traverse", rl.traverse_args(e)) for e in wl.traverse_entities]
    embed = EmbedServer(rl.HashedEmbedder(), "127.0.0.1", 0)  # type: ignore[arg-type]
    embed.RequestHandlerClass = rl._NoDelayHandler
    serve_in_thread(embed)
    out: dict[str, Any] = {"n": args.n, "entities": wl.entities, "relations": len(wl.relations)}
    try:
        # (A) over MCP stdio: the bench's fill, then the same server answers (as the bench measures)
        home_a = work / "mcp"
        (home_a / "data").mkdir(parents=True)
        client = McpStdio([args.cpersona], cpersona_env(home_a, embed.url, {}), home_a, home_a / "server.stderr")
        try:
            client.handshake()
            log(f"reconstruct: MCP fill of {args.n}")
            out["fill_mcp"] = rl.cpersona_fill_mcp(client, wl, concurrency=1)
            wait_drained(home_a / "data" / "cpersona.db")
            snap_a = snapshot(home_a / "data" / "cpersona.db", work / "mcp.db")
            answers_a = ask(client, calls)
        finally:
            client.close()
        # (B) the bench's bulk fill, then a server started as the bench starts it on a bulk database
        home_b = work / "bulk"
        (home_b / "data").mkdir(parents=True)
        db_b = home_b / "data" / "cpersona.db"
        log(f"reconstruct: bulk fill of {args.n}")
        out["fill_bulk"] = rl.cpersona_fill_bulk(args, wl, cpersona_env(home_b, embed.url, {}), home_b)

        def serve_b() -> list[dict[str, Any]]:
            snapshot(db_b, work / "bulk-same-clock.db")
            env = cpersona_env(home_b, embed.url, SERVE_AS_MCP_FILLED)
            client = McpStdio([args.cpersona], env, home_b, home_b / "server.stderr")
            try:
                client.handshake()
                return ask(client, calls)
            finally:
                client.close()

        tables, same_clock, answers_b = bulk_side(db_b, snap_a, work / "bulk.db", serve_b)
        out["tables"] = tables
        out["tables_same_clock"] = same_clock
        out["answers_as_benched"] = compare_answers(answers_a, answers_b, calls)
        log("reconstruct: fresh servers (adjacency key off, calibrated; then own clocks)")
        extra = {"CPERSONA_RECONSTRUCT_ADJACENCY_SECONDS": "0"}
        out.update(
            fresh_passes(args, work, embed.url, calls, snap_a, work / "bulk-same-clock.db", work / "bulk.db", extra)
        )
        out["sample_answer"] = {"call": calls[0], "answer": _truncate(answers_a[0])}
    finally:
        embed.shutdown()
        embed.server_close()
    return out


def verify_recall(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import numpy as np

    wl = rcl.Workload(args.queries)
    sizes = [args.n // 2, args.n]
    texts, vecs = wl.corpus(args.n)
    calls: Calls = [("recall", {"agent_id": rcl.AGENT, "query": q, "limit": rcl.K}) for q in wl.query_texts]
    precomputed = work / "recall-vectors.npz"
    np.savez(precomputed, texts=np.array(texts), vectors=vecs, model=np.array(wl.model_id))
    embed = rcl.CpersonaEmbedServer(sys.executable, work, precomputed)
    out: dict[str, Any] = {"n": args.n, "sizes": sizes, "model": wl.model_id}
    try:
        # (A) one server fills over MCP in increments and answers at each size, as the bench does
        home_a = work / "mcp"
        (home_a / "data").mkdir(parents=True)
        answers_a: list[dict[str, Any]] = []
        snaps_a: list[Path] = []
        out["fill_mcp"] = []
        client = McpStdio([args.cpersona], cpersona_env(home_a, embed.url, {}), home_a, home_a / "server.stderr")
        try:
            client.handshake()
            have = 0
            for n in sizes:
                log(f"recall: MCP stores {have}..{n}")
                out["fill_mcp"].append(rcl._mcp_store_range(client, embed, texts, have, n, concurrency=1))
                have = n
                wait_drained(home_a / "data" / "cpersona.db")
                snaps_a.append(snapshot(home_a / "data" / "cpersona.db", work / f"mcp-{n}.db"))
                answers_a += ask(client, calls)
        finally:
            client.close()
        # (B) bulk increments (no server running), then a fresh server as the bench starts it
        home_b = work / "bulk"
        (home_b / "data").mkdir(parents=True)
        db_b = home_b / "data" / "cpersona.db"
        answers_b: list[dict[str, Any]] = []
        out["fill_bulk"], out["tables"], out["tables_same_clock"] = [], {}, {}
        have = 0
        for n, snap_a in zip(sizes, snaps_a, strict=True):
            log(f"recall: bulk stores {have}..{n}")
            env = cpersona_env(home_b, embed.url, {})
            out["fill_bulk"].append(rcl._bulk_store_range(args, env, home_b, texts, vecs, have, n))
            have = n

            def serve_b(n: int = n) -> list[dict[str, Any]]:
                snapshot(db_b, work / f"bulk-same-clock-{n}.db")
                env = cpersona_env(home_b, embed.url, SERVE_AS_MCP_FILLED)
                client = McpStdio([args.cpersona], env, home_b, home_b / f"server-{n}.stderr")
                try:
                    client.handshake()
                    return ask(client, calls)
                finally:
                    client.close()

            tables, same_clock, answers = bulk_side(db_b, snap_a, work / f"bulk-{n}.db", serve_b)
            out["tables"][str(n)] = tables
            out["tables_same_clock"][str(n)] = same_clock
            answers_b += answers
        out["answers_as_benched"] = compare_answers(answers_a, answers_b, calls + calls)
        log("recall: fresh servers (defaults, calibrated; then own clocks)")
        last = sizes[-1]
        out.update(
            fresh_passes(
                args,
                work,
                embed.url,
                calls,
                snaps_a[-1],
                work / f"bulk-same-clock-{last}.db",
                work / f"bulk-{last}.db",
                {},
            )
        )
        out["embed_server"] = embed.health()
        out["sample_answer"] = {"call": calls[0], "answer": _truncate(answers_a[-len(calls)])}
    finally:
        embed.stop()
    return out


def _truncate(body: dict[str, Any]) -> str:
    return json.dumps(body)[:600]


def passed(result: dict[str, Any]) -> bool:
    tables = result["tables"] if "schema_equal" not in result["tables"] else {"": result["tables"]}
    same = result["tables_same_clock"]
    same = same if "schema_equal" not in same else {"": same}
    return bool(
        all(t["schema_equal"] and t["pragmas_equal"] and t["tables_equal"] for t in tables.values())
        and all(t["schema_equal"] and t["pragmas_equal"] and t["tables_equal"] for t in same.values())
        and result["answers_as_benched"]["equal"]
        and result["answers_fresh_servers"]["equal"]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="memories per workload")
    ap.add_argument("--workloads", default="reconstruct,recall")
    ap.add_argument("--queries", type=int, default=30, help="queries of each kind")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--cpersona", default=DEFAULT_CPERSONA)
    ap.add_argument("--out", type=Path, default=REPO / VERIFY_RESULT)
    ap.add_argument("--keep-workdir", action="store_true")
    args = ap.parse_args(argv)
    if args.n < 2:
        ap.error("--n must be at least 2")
    runners: dict[str, Callable[[argparse.Namespace, Path], dict[str, Any]]] = {
        "reconstruct": verify_reconstruct,
        "recall": verify_recall,
    }
    chosen = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in chosen if w not in runners]
    if unknown:
        ap.error(f"unknown workloads {unknown} (choose from {sorted(runners)})")
    report: dict[str, Any] = {
        "command": "python bench/cpersona/verify_bulk_fill.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpersona_version": _dist_version(args.cpersona, "cpersona"),
        "timestamp_columns_ignored": list(TIMESTAMP_COLUMNS),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "loadavg_start": os.getloadavg()},
        "workloads": {},
    }
    work = Path(tempfile.mkdtemp(prefix="cpersona-bulk-verify-"))
    t0 = time.perf_counter()
    try:
        for name in chosen:
            (work / name).mkdir()
            result = runners[name](args, work / name)
            result["passed"] = passed(result)
            report["workloads"][name] = result
            log(f"{name}: {'PASSED' if result['passed'] else 'FAILED'}")
    finally:
        report["seconds"] = round(time.perf_counter() - t0, 1)
        report["machine"]["loadavg_end"] = os.getloadavg()
        report["passed"] = bool(report["workloads"]) and all(w["passed"] for w in report["workloads"].values())
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        if args.keep_workdir:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    for name, w in report["workloads"].items():
        log(
            f"{name}: passed {w['passed']}; answers as benched {w['answers_as_benched']['unequal_calls']} "
            f"unequal of {w['answers_as_benched']['calls']}; fresh servers "
            f"{w['answers_fresh_servers']['unequal_calls']} unequal; own clocks (informational) "
            f"{w['answers_own_clocks_informational']['unequal_calls']} unequal"
        )
    log(f"wrote {args.out}: {'PASSED' if report['passed'] else 'FAILED'}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
