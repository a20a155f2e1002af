"""The CPersona bulk fill's own logic, without CPersona and without files: the tool-call lines the
benches write, bulk_fill.py's two index-backed probes (on in-memory SQLite) against the queries
they replace, and the verifier's answer comparison. Its input checks on an ops file and the
verifier's comparison of database files: tests/system/test_cpersona_bulk_files.py. The fill
itself against a real CPersona is bench/cpersona/verify_bulk_fill.py's job (it needs CPersona's
venv)."""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
from collections import Counter
from typing import Any

import numpy as np
import orjson
import pytest

from tests.support.bench import REPO, bench_module

bulk = bench_module("cpersona_bulk_fill", REPO / "bench" / "cpersona" / "bulk_fill.py")
cb = bench_module("cpersona_bulk", REPO / "bench" / "cpersona_bulk.py")
verify = bench_module("verify_bulk_fill", REPO / "bench" / "cpersona" / "verify_bulk_fill.py")


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


# -- the verifier's answer comparison ---------------------------------------------------------------


def test_answers_compare_modulo_times_only() -> None:
    a = {"items": [{"ref": "mem:1", "as_of": "2026-11-30T06:10:00.123+00:00", "score": 0.5}]}
    b = {"items": [{"ref": "mem:1", "as_of": "2026-11-30T06:12:07.9+00:00", "score": 0.5}]}
    calls = [("reconstruct", {"query": "q"})]
    assert verify.compare_answers([verify.normalize(a)], [verify.normalize(b)], calls)["equal"]
    c = {"items": [{"ref": "mem:1", "as_of": "2026-11-30T06:12:07.9+00:00", "score": 0.5000001}]}
    out = verify.compare_answers([verify.normalize(a)], [verify.normalize(c)], calls)
    assert not out["equal"] and "score" in out["first_differences"][0]
