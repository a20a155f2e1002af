"""The CPersona bulk fill's own logic, without CPersona: the tool-call lines the benches write, the
checks bulk_fill.py makes on them, its two index-backed probes against the queries they replace,
and the verifier's table comparison and clock transplant. The fill itself against a real CPersona
is bench/cpersona/verify_bulk_fill.py's job (it needs CPersona's venv)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import random
import sqlite3
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


bulk = _load("cpersona_bulk_fill", REPO / "bench" / "cpersona" / "bulk_fill.py")
cb = _load("cpersona_bulk", REPO / "bench" / "cpersona_bulk.py")
verify = _load("verify_bulk_fill", REPO / "bench" / "cpersona" / "verify_bulk_fill.py")


# -- the lines the benches write ---------------------------------------------------------------


def test_store_line_carries_the_numbers_the_embed_server_sends() -> None:
    rng = np.random.default_rng(3)
    vec = rng.standard_normal(384).astype(np.float32)
    vec /= np.linalg.norm(vec)
    op = json.loads(cb.store_line({"agent_id": "a", "content": "x", "id": "d1"}, key="m1", vector=vec))
    assert op["tool"] == "store" and op["key"] == "m1"
    assert op["arguments"] == {"agent_id": "a", "content": "x", "id": "d1"}
    # bench/embed_server.py answers {"embeddings": <float32 matrix>} through orjson's numpy encoding
    served = json.loads(orjson.dumps({"embeddings": np.stack([vec])}, option=orjson.OPT_SERIALIZE_NUMPY))
    assert op["embedding"] == served["embeddings"][0]
    assert np.array_equal(np.asarray(op["embedding"], dtype=np.float32), vec)


def test_declare_line_keeps_arguments_and_anchor_key() -> None:
    args = {"agent_id": "a", "associations": {"entities": [{"name": "e"}]}}
    op = json.loads(cb.declare_line(args, anchor_key="m0"))
    assert op == {"tool": "declare_associations", "arguments": args, "anchor_key": "m0"}
    assert "anchor_key" not in json.loads(cb.declare_line(args))


# -- bulk_fill.py's input checks -----------------------------------------------------------------


def _ops_file(tmp_path: Path, lines: list[Any]) -> Path:
    path = tmp_path / "ops.jsonl"
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


GOOD = [
    {"tool": "store", "key": "m0", "arguments": {"agent_id": "a", "content": "one"}, "embedding": [0.6, 0.8]},
    {"tool": "declare_associations", "anchor_key": "m0", "arguments": {"agent_id": "a", "associations": {}}},
]


def test_read_ops_accepts_the_documented_shapes(tmp_path: Path) -> None:
    ops = bulk.read_ops(_ops_file(tmp_path, GOOD))
    assert [op["tool"] for op in ops] == ["store", "declare_associations"]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("{not json", "not JSON"),
        ({"tool": "recall", "arguments": {}}, "expected an object with tool"),
        ({"tool": "store", "arguments": []}, "arguments must be an object"),
        ({"tool": "store", "key": "m0", "arguments": {"content": "two"}}, "used twice"),
        ({"tool": "declare_associations", "anchor_key": "nope", "arguments": {}}, "names no earlier store"),
        (
            {"tool": "declare_associations", "anchor_key": "m0", "arguments": {"anchor_ref": "mem:1"}},
            "not both",
        ),
        ({"tool": "store", "arguments": {"content": "x"}, "embedding": []}, "non-empty list of numbers"),
        ({"tool": "store", "arguments": {"content": "x"}, "embedding": ["a"]}, "non-empty list of numbers"),
        ({"tool": "declare_associations", "arguments": {}, "embedding": [1.0]}, "store line with content"),
        ({"tool": "declare_associations", "key": "k", "arguments": {}}, "on store lines only"),
    ],
)
def test_read_ops_refuses_bad_lines_before_writing(tmp_path: Path, bad: Any, message: str) -> None:
    with pytest.raises(bulk.BadInput, match=message):
        bulk.read_ops(_ops_file(tmp_path, [*GOOD, bad]))


def test_read_ops_refuses_an_empty_file(tmp_path: Path) -> None:
    with pytest.raises(bulk.BadInput, match="no operations"):
        bulk.read_ops(_ops_file(tmp_path, []))


# -- the two probes ------------------------------------------------------------------------------


class _AsyncDb:
    """What the probes see of aiosqlite: an awaitable execute_fetchall, over sqlite3."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.statements: list[str] = []

    async def execute_fetchall(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        self.statements.append(sql)
        return self.conn.execute(sql, params).fetchall()


def _memories_db() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE TABLE memories (id INTEGER PRIMARY KEY, agent_id TEXT NOT NULL, project_id TEXT NOT NULL "
        "DEFAULT '', msg_id TEXT NOT NULL DEFAULT '', created_at TEXT NOT NULL DEFAULT '')"
    )
    conn.execute("CREATE INDEX idx_memories_isolation ON memories(agent_id, project_id, created_at DESC)")
    conn.execute("CREATE INDEX idx_memories_msg_id ON memories(agent_id, msg_id)")
    conn.execute(
        "CREATE UNIQUE INDEX idx_memories_dedup_msg_id ON memories(agent_id, project_id, msg_id) WHERE msg_id != ''"
    )
    rows = [("a", p, f"d{i}" if i % 3 else "") for i in range(300) for p in ("", "p")]
    conn.executemany("INSERT INTO memories (agent_id, project_id, msg_id) VALUES (?, ?, ?)", rows)
    return conn


def _msg_id_probe(scope: tuple[str, ...]) -> str:
    """The statement CPersona's _store_dedup_answer builds (memory_handlers.py, 2.6.14)."""
    return (
        f"SELECT id FROM memories WHERE agent_id = ? AND project_id IN ({','.join('?' * len(scope))})"
        " AND msg_id = ? LIMIT 1"
    )


@pytest.mark.parametrize("scope", [("",), ("p", "")])
def test_msg_id_probe_is_rewritten_onto_the_partial_index_with_the_same_answers(scope: tuple[str, ...]) -> None:
    conn = _memories_db()
    db = _AsyncDb(conn)
    proxy = bulk._MsgIdProbeOnIndex(db)
    sql = _msg_id_probe(scope)
    for msg_id in ["d1", "d2", "d299", "d7", "absent", "d600"]:
        params = ("a", *scope, msg_id)
        assert asyncio.run(proxy.execute_fetchall(sql, params)) == conn.execute(sql, params).fetchall()
    assert proxy.rewritten == 6
    plan = " ".join(str(r) for r in conn.execute("EXPLAIN QUERY PLAN " + db.statements[-1], ("a", *scope, "d1")))
    assert "idx_memories_dedup_msg_id" in plan
    original = " ".join(str(r) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, ("a", *scope, "d1")))
    assert "idx_memories_dedup_msg_id" not in original  # why the rewrite exists


def test_other_statements_pass_through_the_probe_proxy_untouched() -> None:
    db = _AsyncDb(_memories_db())
    proxy = bulk._MsgIdProbeOnIndex(db)
    asyncio.run(proxy.execute_fetchall("SELECT count(*) FROM memories WHERE msg_id = ?", ("d1",)))
    assert db.statements == ["SELECT count(*) FROM memories WHERE msg_id = ?"]
    assert proxy.rewritten == 0
    assert proxy.conn is db.conn  # every other attribute is the real connection's


# CPersona 2.6.14's associations._resolve_entity statement, which resolve_entity_on_index replaces.
RESOLVE_SQL = (
    "SELECT e.id FROM entities e WHERE e.agent_id = ? AND e.project_id = ? AND e.channel = ? "
    "AND (e.normalized = ? OR EXISTS (SELECT 1 FROM entity_aliases a "
    "WHERE a.entity_id = e.id AND a.normalized = ?)) ORDER BY e.id LIMIT 1"
)


def _original_resolve(conn: sqlite3.Connection, agent: str, scopes: list[tuple[str, str]], name: str) -> int | None:
    for project_id, channel in scopes:
        rows = conn.execute(RESOLVE_SQL, (agent, project_id, channel, name, name)).fetchall()
        if rows:
            return int(rows[0][0])
    return None


def test_entity_resolution_on_index_answers_as_the_scan_does() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE TABLE entities (id INTEGER PRIMARY KEY AUTOINCREMENT, agent_id TEXT NOT NULL, project_id TEXT "
        "NOT NULL DEFAULT '', channel TEXT NOT NULL DEFAULT '', name TEXT NOT NULL, normalized TEXT NOT NULL, "
        "UNIQUE (agent_id, project_id, channel, normalized))"
    )
    conn.execute(
        "CREATE TABLE entity_aliases (entity_id INTEGER NOT NULL, alias TEXT NOT NULL, normalized TEXT NOT NULL, "
        "PRIMARY KEY (entity_id, normalized))"
    )
    conn.execute("CREATE INDEX idx_entity_aliases_normalized ON entity_aliases(normalized)")
    rng = random.Random(5)
    names = [f"n{i}" for i in range(40)]
    axes = [("", ""), ("p", ""), ("", "c"), ("p", "c")]
    for agent in ("a", "b"):
        for project_id, channel in axes:
            for name in rng.sample(names, 15):
                conn.execute(
                    "INSERT INTO entities (agent_id, project_id, channel, name, normalized) VALUES (?, ?, ?, ?, ?)",
                    (agent, project_id, channel, name, name),
                )
    ids = [r[0] for r in conn.execute("SELECT id FROM entities")]
    for _ in range(120):  # aliases, some naming another entity's name, some shared by several entities
        conn.execute(
            "INSERT OR IGNORE INTO entity_aliases VALUES (?, ?, ?)",
            (rng.choice(ids), "x", rng.choice(names)),
        )
    counters: Counter[str] = Counter()
    db = _AsyncDb(conn)
    checked = found = 0
    for agent in ("a", "b", "z"):
        for scopes in ([("", "")], [("p", "")], [("p", "c"), ("p", ""), ("", "c"), ("", "")], [("", "c"), ("", "")]):
            for name in [*names, "absent"]:
                want = _original_resolve(conn, agent, scopes, name)
                got = asyncio.run(bulk.resolve_entity_on_index(db, agent, scopes, name, counters))
                assert got == want, (agent, scopes, name)
                checked += 1
                found += want is not None
    assert checked > 400 and 0 < found < checked


# -- the verifier's table comparison and clock transplant -----------------------------------------


def _cpersona_like(path: Path, stamp: str, extra_row: bool = False) -> Path:
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE memories (id INTEGER PRIMARY KEY AUTOINCREMENT, content TEXT, timestamp TEXT, created_at TEXT)"
    )
    conn.execute("CREATE TABLE vector_log_clock (id INTEGER PRIMARY KEY, logging INTEGER)")
    conn.execute("INSERT INTO vector_log_clock VALUES (0, 0)")
    conn.execute("CREATE TABLE pending_memory_tasks (id INTEGER PRIMARY KEY AUTOINCREMENT, payload TEXT)")
    rows = [("a",), ("b",), ("c",)] + ([("d",)] if extra_row else [])
    conn.executemany(f"INSERT INTO memories (content, timestamp, created_at) VALUES (?, '{stamp}', '{stamp}')", rows)
    conn.executemany("INSERT INTO pending_memory_tasks (payload) VALUES (?)", [("t",)] * (5 if extra_row else 3))
    conn.execute("DELETE FROM pending_memory_tasks")
    conn.commit()
    conn.close()
    return path


def test_compare_ignores_only_the_clock_and_the_task_counter(tmp_path: Path) -> None:
    a = _cpersona_like(tmp_path / "a.db", "2026-01-01T00:00:00")
    b = _cpersona_like(tmp_path / "b.db", "2026-01-01T00:09:00")
    result = verify.compare_databases(a, b)
    assert result["tables_equal"] and result["schema_equal"]
    assert result["tables"]["memories"]["ignored_columns"] == ["timestamp", "created_at"]
    assert result["tables"]["sqlite_sequence"]["not_compared"] == {"pending_memory_tasks": [3, 3]}
    assert not verify.compare_databases(a, b, ignore=())["tables_equal"]
    c = _cpersona_like(tmp_path / "c.db", "2026-01-01T00:00:00", extra_row=True)
    differs = verify.compare_databases(a, c)
    assert not differs["tables"]["memories"]["equal"]
    assert differs["tables"]["memories"]["first_only_bulk"] == [[4, 4, "d"]]
    assert differs["tables"]["sqlite_sequence"]["equal"] is False  # memories' counter is compared


def test_transplanted_clock_makes_every_column_equal(tmp_path: Path) -> None:
    a = _cpersona_like(tmp_path / "a.db", "2026-01-01T00:00:00")
    b = _cpersona_like(tmp_path / "b.db", "2026-01-01T00:09:00")
    assert verify.transplant_clock(a, b) == 6
    assert verify.compare_databases(a, b, ignore=())["tables_equal"]


def test_transplant_refuses_while_the_vector_log_records_updates(tmp_path: Path) -> None:
    a = _cpersona_like(tmp_path / "a.db", "2026-01-01T00:00:00")
    b = _cpersona_like(tmp_path / "b.db", "2026-01-01T00:09:00")
    conn = sqlite3.connect(b)
    conn.execute("UPDATE vector_log_clock SET logging = 1")
    conn.commit()
    conn.close()
    with pytest.raises(RuntimeError, match="vector change log on"):
        verify.transplant_clock(a, b)


def test_answers_compare_modulo_times_only() -> None:
    a = {"items": [{"ref": "mem:1", "as_of": "2026-11-30T06:10:00.123+00:00", "score": 0.5}]}
    b = {"items": [{"ref": "mem:1", "as_of": "2026-11-30T06:12:07.9+00:00", "score": 0.5}]}
    calls = [("reconstruct", {"query": "q"})]
    assert verify.compare_answers([verify.normalize(a)], [verify.normalize(b)], calls)["equal"]
    c = {"items": [{"ref": "mem:1", "as_of": "2026-11-30T06:12:07.9+00:00", "score": 0.5000001}]}
    out = verify.compare_answers([verify.normalize(a)], [verify.normalize(c)], calls)
    assert not out["equal"] and "score" in out["first_differences"][0]
