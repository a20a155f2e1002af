"""Fill a CPersona database in-process, through CPersona's own tool handlers, in minutes.

Run it with CPersona's interpreter (never the project venv: it imports ``cpersona``, and nothing
from memstream)::

    CPERSONA_DB_PATH=/tmp/x/cpersona.db CPERSONA_EMBEDDING_MODE=http \\
    CPERSONA_EMBEDDING_URL=http://127.0.0.1:PORT/embed CPERSONA_UPDATE_CHECK=false \\
    CPERSONA_OPERATING_CONTEXT=off \\
        /work/cpersona-venv/bin/python bench/cpersona/bulk_fill.py --ops ops.jsonl --report fill.json

Why: CPersona over MCP stdio costs ~11 ms per ``store`` here whatever the corpus size (most of it
the MCP SDK re-checking each tool's JSON schema on every call, plus two HTTP round trips), and
two of its read probes scan in proportion to the data (see below); 100k memories, 100k mention
declarations and 50k relations took most of an hour that way. This script produces the database
CPersona's own write path produces, without the transport.

What runs, in order, is what ``cpersona.server.main`` runs before it serves, minus the transport:
the same config validation, ``vector.build_embedding_client()`` (the same env, so the same /embed
server and the same vectors, with the backend identity probe), ``init_db()`` (schema, migrations,
FTS triggers), the background task queue (block construction after every store, as the server
does), ``block_index.on_startup()`` and ``vector_index.on_startup()``. Then every operation of
``--ops`` goes, one at a time and in file order, to ``cpersona.server.registry._handlers[tool]``:
the very function the MCP layer calls with a tool call's ``arguments`` after its JSON-schema check
(CPersona's argument validators, the surrogate guard, the ACL guard, the operating-context gate,
``do_store`` / ``associations.declare`` and every write they make: rows, FTS5 index via triggers,
embedding blobs, pending block tasks). The first ``--schema-check`` calls of each tool are also
checked against the tool's own ``inputSchema`` (jsonschema, as the MCP layer does for all of them).
At the end the task queue is drained (every pending block task run) and the database closed.
Not repeated: the token report (``/count_tokens``, asked before every store to decide whether to
queue node construction) once the /embed server has answered it 404, as bench/embed_server.py
does; the store reads "not known" either way. Not run: the startup threshold calibration (it
writes only a sidecar file, and on the empty database a fill starts from it calibrates nothing)
and the update check (off by env).

Two read probes are answered through an index instead of by a scan. Neither changes an answer:

* ``memory_handlers._store_dedup_answer``'s msg_id probe ``SELECT id FROM memories WHERE agent_id
  = ? AND project_id IN (..) AND msg_id = ? LIMIT 1`` runs only when msg_id is non-empty, but the
  unique index that holds msg_ids is partial (``WHERE msg_id != ''``) and SQLite cannot prove the
  bound parameter satisfies it, so it plans ``idx_memories_isolation (agent_id, project_id)``:
  every memory of the agent is visited, on every store that carries an id (~1 ms per 1k stored).
  Here the same statement gets `` AND msg_id != ''`` appended, a term that is true in every row
  it can match (msg_id equals a non-empty parameter), so SQLite uses the partial unique index.
* ``associations._resolve_entity`` (every entity name in a declaration, every relation endpoint)
  runs ``... WHERE agent_id, project_id, channel = .. AND (normalized = ? OR EXISTS (SELECT 1
  FROM entity_aliases a WHERE a.entity_id = e.id AND a.normalized = ?)) ORDER BY id LIMIT 1``;
  the OR puts every entity of the scope through the correlated subquery (~0.16 ms per 1k
  entities per name; the benches declare E = N/10). Here it is the union of its two arms, each on an index: the entity
  whose normalized name is the name (unique per scope), and the entities with that alias
  (``idx_entity_aliases_normalized``), the smaller id of the two, scope by scope in the same
  order. Same set, same minimum.

Input (``--ops``, JSON lines, in the order they are to be applied)::

    {"tool": "store", "key": "m0", "arguments": {"agent_id": "a", "content": "..."}, "embedding": [..]}
    {"tool": "declare_associations", "anchor_key": "m0",
     "arguments": {"agent_id": "a", "associations": {"entities": [{"name": "x"}]}}}

``arguments`` are exactly the MCP tool call's arguments. ``key`` (optional) names a store's row;
``anchor_key`` sets ``arguments["anchor_ref"]`` to ``mem:<id>`` of that stored row (ids exist only
once stored). ``embedding`` (optional, a store's content vector as the /embed server would send
it: the same JSON numbers) is answered from this file instead of an /embed round trip; any text
not in the file (block clauses, say) still goes to CPERSONA_EMBEDDING_URL.

Output: ``--report`` JSON (counts of each tool's results, seconds per tool, first failures) and a
progress line on stderr every ``--progress`` operations. Exit status 1 when any store was not
``stored`` or any declaration dropped an item, 2 on bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

TOOLS = ("store", "declare_associations")
DRAIN_TIMEOUT_S = 1800.0


class BadInput(ValueError):
    """An --ops line that cannot be applied as written."""


def log(msg: str) -> None:
    print(f"[bulk-fill {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def read_ops(path: Path) -> list[dict[str, Any]]:
    """Parse and check every line before anything is written (a bad line 90k in must not leave
    a half-filled database)."""
    ops: list[dict[str, Any]] = []
    keys: set[str] = set()
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                op = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BadInput(f"{path}:{lineno}: not JSON ({exc})") from None
            if not isinstance(op, dict) or op.get("tool") not in TOOLS:
                raise BadInput(f"{path}:{lineno}: expected an object with tool in {TOOLS}")
            if not isinstance(op.get("arguments"), dict):
                raise BadInput(f"{path}:{lineno}: arguments must be an object")
            key = op.get("key")
            if key is not None:
                if op["tool"] != "store" or not isinstance(key, str):
                    raise BadInput(f"{path}:{lineno}: key is a string, on store lines only")
                if key in keys:
                    raise BadInput(f"{path}:{lineno}: key {key!r} used twice")
                keys.add(key)
            anchor = op.get("anchor_key")
            if anchor is not None:
                if op["tool"] != "declare_associations" or anchor not in keys:
                    raise BadInput(f"{path}:{lineno}: anchor_key {anchor!r} names no earlier store line")
                if "anchor_ref" in op["arguments"]:
                    raise BadInput(f"{path}:{lineno}: give anchor_key or arguments.anchor_ref, not both")
            emb = op.get("embedding")
            if emb is not None:
                content = op["arguments"].get("content")
                if op["tool"] != "store" or not isinstance(content, str):
                    raise BadInput(f"{path}:{lineno}: embedding belongs on a store line with content")
                if not isinstance(emb, list) or not emb or not all(isinstance(x, int | float) for x in emb):
                    raise BadInput(f"{path}:{lineno}: embedding must be a non-empty list of numbers")
            ops.append(op)
    if not ops:
        raise BadInput(f"{path}: no operations")
    return ops


# =============================================================================================
# The two probes, on an index (see the module docstring for why each answer is unchanged)
# =============================================================================================

MSG_ID_PROBE_HEAD = "SELECT id FROM memories WHERE agent_id = ? AND project_id IN ("
MSG_ID_PROBE_TAIL = " AND msg_id = ? LIMIT 1"


class _MsgIdProbeOnIndex:
    """The connection ``_store_dedup_answer`` reads through, with its msg_id probe made
    indexable; every other statement and attribute goes to the real connection untouched."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self.rewritten = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    async def execute_fetchall(self, sql: str, params: Any = ()) -> Any:
        if sql.startswith(MSG_ID_PROBE_HEAD) and sql.endswith(MSG_ID_PROBE_TAIL):
            sql = sql[: -len(" LIMIT 1")] + " AND msg_id != '' LIMIT 1"
            self.rewritten += 1
        return await self._db.execute_fetchall(sql, params)


ENTITY_BY_NAME_SQL = "SELECT id FROM entities WHERE agent_id = ? AND project_id = ? AND channel = ? AND normalized = ?"
ENTITY_BY_ALIAS_SQL = (
    "SELECT e.id FROM entity_aliases a CROSS JOIN entities e ON e.id = a.entity_id "
    "WHERE a.normalized = ? AND e.agent_id = ? AND e.project_id = ? AND e.channel = ? ORDER BY e.id LIMIT 1"
)


async def resolve_entity_on_index(
    db: Any, agent_id: str, scopes: list[tuple[str, str]], normalized: str, counters: Counter[str]
) -> int | None:
    """``associations._resolve_entity``'s answer, scope by scope in its order: the smallest id among
    the entity named ``normalized`` (unique per scope) and the entities carrying it as an alias."""
    for project_id, channel in scopes:
        by_name = await db.execute_fetchall(ENTITY_BY_NAME_SQL, (agent_id, project_id, channel, normalized))
        by_alias = await db.execute_fetchall(ENTITY_BY_ALIAS_SQL, (normalized, agent_id, project_id, channel))
        counters["entity_resolutions_on_index"] += 1
        found = [rows[0][0] for rows in (by_name, by_alias) if rows]
        if found:
            return min(found)
    return None


def install_index_probes(counters: Counter[str]) -> None:
    from cpersona import associations, memory_handlers

    original_dedup = memory_handlers._store_dedup_answer
    if MSG_ID_PROBE_HEAD not in _source(original_dedup) or MSG_ID_PROBE_TAIL.strip() not in _source(original_dedup):
        raise RuntimeError("this CPersona's _store_dedup_answer no longer has the msg_id probe this script rewrites")
    resolve_sql = "AND (e.normalized = ? OR EXISTS (SELECT 1 FROM entity_aliases a"
    if resolve_sql not in _source(associations._resolve_entity):
        raise RuntimeError("this CPersona's _resolve_entity is not the query this script replaces")

    async def dedup_answer(db: Any, *args: Any, **kwargs: Any) -> Any:
        proxy = _MsgIdProbeOnIndex(db)
        try:
            return await original_dedup(proxy, *args, **kwargs)
        finally:
            counters["msg_id_probes_on_index"] += proxy.rewritten

    async def resolve_entity(db: Any, scope: Any, normalized: str, *, exact: bool = False) -> int | None:
        scopes = associations._visible_scopes(scope)
        return await resolve_entity_on_index(db, scope.agent_id, scopes[:1] if exact else scopes, normalized, counters)

    memory_handlers._store_dedup_answer = dedup_answer
    associations._resolve_entity = resolve_entity


def _source(fn: Any) -> str:
    import inspect

    return inspect.getsource(fn)


# =============================================================================================
# Embeddings from the file
# =============================================================================================


def install_vector_table(client: Any, table: dict[str, list[float]], counters: Counter[str]) -> None:
    """Answer /embed requests whose texts are all in ``table`` from it; anything else goes to the
    configured server as before. The vectors then pass the client's own response checks."""
    original = client._embed_via_http

    async def embed_via_http(texts: list[str]) -> Any:
        if texts and all(t in table for t in texts):
            counters["embeddings_from_file"] += len(texts)
            return client._validate_batch([table[t] for t in texts], len(texts))
        counters["embeddings_over_http"] += len(texts)
        return await original(texts)

    client._embed_via_http = embed_via_http


def install_token_report_memo(client: Any, counters: Counter[str]) -> None:
    """Once the /embed server has answered the token report with 404 (bench/embed_server.py has no
    such route), answer every later ask with that same outcome instead of a round trip per store.
    ``nodes.runs_past_window`` reads either as "not known", so no node build is queued either way."""
    original = client.count_tokens_with_outcome
    absent: list[Any] = []

    async def count_tokens_with_outcome(texts: list[str]) -> Any:
        if absent:
            counters["token_reports_known_absent"] += 1
            return None, absent[0]
        result, outcome = await original(texts)
        if result is None and outcome.attempted and "404" in str(outcome.error or ""):
            absent.append(outcome)
        return result, outcome

    client.count_tokens_with_outcome = count_tokens_with_outcome


# =============================================================================================
# The fill
# =============================================================================================


async def _startup() -> Any:
    """cpersona.server.main's steps before it serves (transport, calibration, update check aside)."""
    from cpersona import block_index, blocks, config, generation, server, tasks, vector, vector_index
    from cpersona.database import init_db

    config.validate_reconstruct_counts()
    config.validate_block_gates()
    config.validate_content_caps()
    config.assert_embedding_mode_supported()
    vector._embedding_client = vector.build_embedding_client()
    if vector._embedding_client is not None:
        await vector._embedding_client.initialize()
        try:
            await asyncio.wait_for(generation.refresh(vector._embedding_client), server.STARTUP_IDENTITY_PROBE_SECONDS)
        except TimeoutError:
            log("embedding backend identity: no answer at startup (asked again on first write, as the server does)")
    await init_db()
    if config.TASK_QUEUE_ENABLED:
        tasks._task_queue = tasks.MemoryTaskQueue()
        await tasks._task_queue.start()
        await blocks.queue_backfill()
    await block_index.on_startup()
    await vector_index.on_startup()
    return server


async def _drain_task_queue() -> None:
    """Wait (polling, with a deadline) until the queue has run every task the fill queued."""
    from cpersona import tasks
    from cpersona.database import connection

    if tasks._task_queue is None:
        return
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while True:
        async with connection() as db:
            rows = await db.execute_fetchall("SELECT count(*) FROM pending_memory_tasks")
        pending = int(rows[0][0])
        if pending == 0:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{pending} background tasks still pending after {DRAIN_TIMEOUT_S:.0f} s")
        tasks._task_queue._event.set()
        await asyncio.sleep(0.05)
    await tasks._task_queue.stop()
    tasks._task_queue = None


def _schema_validators(server: Any) -> dict[str, Any]:
    import jsonschema

    return {
        t.name: jsonschema.validators.validator_for(t.inputSchema)(t.inputSchema)
        for t in server.registry._tools
        if t.name in TOOLS
    }


async def fill(ops: list[dict[str, Any]], schema_check: int, progress: int) -> dict[str, Any]:
    from cpersona import vector
    from cpersona.database import close_db

    counters: Counter[str] = Counter()
    t_start = time.perf_counter()
    server = await _startup()
    install_index_probes(counters)
    if vector._embedding_client is not None:
        install_token_report_memo(vector._embedding_client, counters)
    table = {op["arguments"]["content"]: op["embedding"] for op in ops if op.get("embedding") is not None}
    if table:
        if vector._embedding_client is None:
            raise BadInput("--ops carries embeddings but CPERSONA_EMBEDDING_MODE stores none")
        install_vector_table(vector._embedding_client, table, counters)
    validators = _schema_validators(server)
    handlers = server.registry._handlers
    ids: dict[str, int] = {}
    results: dict[str, Counter[str]] = {tool: Counter() for tool in TOOLS}
    seconds: Counter[str] = Counter()
    failures: list[dict[str, Any]] = []
    checked: Counter[str] = Counter()
    mentions = relations = dropped = 0
    startup_s = time.perf_counter() - t_start
    t0 = time.perf_counter()
    try:
        for i, op in enumerate(ops):
            tool, arguments = op["tool"], dict(op["arguments"])
            if op.get("anchor_key") is not None:
                anchor_id = ids.get(op["anchor_key"])
                if anchor_id is None:
                    raise BadInput(f"op {i}: anchor_key {op['anchor_key']!r} names a store that returned no id")
                arguments["anchor_ref"] = f"mem:{anchor_id}"
            if checked[tool] < schema_check:
                validators[tool].validate(arguments)  # what the MCP layer checks before the handler
                checked[tool] += 1
            t = time.perf_counter()
            body = await handlers[tool](arguments)
            seconds[tool] += time.perf_counter() - t
            if tool == "store":
                results[tool][str(body.get("result"))] += 1
                if isinstance(body.get("id"), int) and op.get("key") is not None:
                    ids[op["key"]] = body["id"]
                if body.get("result") != "stored" and len(failures) < 5:
                    failures.append({"op": i, "tool": tool, "response": body})
            else:
                results[tool][str(body.get("result"))] += 1
                mentions += int(body.get("mentions") or 0)
                relations += len(body.get("relations") or [])
                dropped += len(body.get("dropped") or [])
                if (body.get("dropped") or body.get("ok") is False) and len(failures) < 5:
                    failures.append({"op": i, "tool": tool, "response": body})
            if progress and (i + 1) % progress == 0:
                rate = (i + 1) / (time.perf_counter() - t0)
                log(f"{i + 1}/{len(ops)} operations ({rate:.0f}/s)")
        ops_s = time.perf_counter() - t0
        t_drain = time.perf_counter()
        await _drain_task_queue()
        drain_s = time.perf_counter() - t_drain
    finally:
        await close_db()
        if vector._embedding_client is not None:
            await vector._embedding_client.close()
    stores = sum(results["store"].values())
    return {
        "cpersona_version": _cpersona_version(),
        "db_path": os.environ.get("CPERSONA_DB_PATH"),
        "operations": len(ops),
        "store_results": dict(results["store"]),
        "declare_results": dict(results["declare_associations"]),
        "mentions_declared": mentions,
        "relations_declared": relations,
        "items_dropped": dropped,
        "first_failures": failures,
        "schema_checked_calls": dict(checked),
        "counters": dict(counters),
        "startup_s": round(startup_s, 2),
        "store_s": round(seconds["store"], 2),
        "declare_s": round(seconds["declare_associations"], 2),
        "operations_s": round(ops_s, 2),
        "task_drain_s": round(drain_s, 2),
        "total_s": round(time.perf_counter() - t_start, 2),
        "stores_per_s": round(stores / seconds["store"], 1) if seconds["store"] else None,
    }


def _cpersona_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cpersona")
    except PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=Path, required=True, help="JSON lines of tool calls (see above)")
    ap.add_argument("--report", type=Path, default=None, help="write the fill report here (JSON)")
    ap.add_argument("--schema-check", type=int, default=1000, help="calls per tool checked against inputSchema")
    ap.add_argument("--progress", type=int, default=10000, help="log every N operations (0: never)")
    args = ap.parse_args(argv)
    if not os.environ.get("CPERSONA_DB_PATH"):
        print("bulk_fill: set CPERSONA_DB_PATH (the database to create or extend)", file=sys.stderr)
        return 2
    try:
        ops = read_ops(args.ops)
    except (OSError, BadInput) as exc:
        print(f"bulk_fill: {exc}", file=sys.stderr)
        return 2
    try:
        import cpersona  # noqa: F401
    except ImportError:
        print("bulk_fill: run me with CPersona's interpreter (/work/cpersona-venv/bin/python)", file=sys.stderr)
        return 2
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s [%(name)s] %(levelname)s: %(message)s")
    log(f"{len(ops)} operations into {os.environ['CPERSONA_DB_PATH']}")
    try:
        report = asyncio.run(fill(ops, args.schema_check, args.progress))
    except BadInput as exc:
        print(f"bulk_fill: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(report, indent=1)
    if args.report:
        args.report.write_text(text + "\n", encoding="utf-8")
    log(
        f"done in {report['total_s']} s: stores {report['store_results']} ({report['store_s']} s), "
        f"declarations {report['declare_results']} ({report['declare_s']} s), drain {report['task_drain_s']} s"
    )
    bad_stores = sum(n for r, n in report["store_results"].items() if r != "stored")
    return 1 if bad_stores or report["items_dropped"] else 0


if __name__ == "__main__":
    sys.exit(main())
