"""The CPersona bulk fill's logic on files: bulk_fill.py's checks of an ops file (tool-call lines)
before it writes anything, and the verifier's table comparison and clock transplant on two
SQLite database files. The rest of its logic, without files: tests/unit/test_cpersona_bulk.py."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.support.bench import REPO, bench_module

bulk = bench_module("cpersona_bulk_fill", REPO / "bench" / "cpersona" / "bulk_fill.py")
verify = bench_module("verify_bulk_fill", REPO / "bench" / "cpersona" / "verify_bulk_fill.py")


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
