"""The versions read model keeps its rows as columns; it must answer and snapshot exactly as the
row store it replaced: the same rows from ``of``, the same ``superseded_by``, the same snapshot
bytes (so the same digest), folded or loaded, with dropped slots reclaimed or not."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.projections import versions
from memstream.projections.row_dicts import coded, field_names, row_lists
from memstream.projections.runner import digest_of
from memstream.projections.versions import VersionRow, VersionsProjection
from tests.unit.test_versions_index import scanned

AGENTS = ("a", "b")

steps = st.lists(
    st.tuples(
        st.sampled_from(["store", "store", "store", "update", "verify", "delete", "wipe", "episode", "drop-ep"]),
        st.sampled_from(AGENTS),
        st.sampled_from(["", "p"]),
        st.sampled_from([None, "m1", "m2"]),
        st.integers(0, 40),
    ),
    max_size=80,
)


def events(spec: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    ids = itertools.count(1)
    made: list[tuple[str, str, int]] = []  # (agent, kind, id)
    for op, agent, project, msg_id, n in spec:
        scope = {"agent_id": agent, "project_id": project, "channel": ""}
        at = f"2026-01-01T00:{len(out) // 60:02d}:{len(out) % 60:02d}Z"
        if op in ("store", "episode"):
            ident = next(ids)
            stored = op == "store"
            payload: dict[str, Any] = {"id": ident, "content": "x"} if stored else {"id": ident, "summary": "s"}
            if stored and msg_id is not None:
                payload["msg_id"] = msg_id
            kind = "memory.stored" if stored else "episode.archived"
            out.append({"type": kind, "scope": scope, "payload": payload, "occurred_at": at})
            made.append((agent, "mem" if stored else "ep", ident))
            continue
        if not made:
            continue
        owner, kind, ident = made[n % len(made)]
        scope["agent_id"] = owner
        one = {"id": ident, "content": "y"}
        if op == "update":
            out.append({"type": "memory.updated", "scope": scope, "payload": one, "occurred_at": at})
        elif op == "verify":
            out.append({"type": "memory.verified", "scope": scope, "payload": {"id": ident}, "occurred_at": at})
        elif op == "delete":
            out.append({"type": "memory.deleted", "scope": scope, "payload": {"id": ident}, "occurred_at": at})
        elif op == "drop-ep":
            out.append({"type": "episode.deleted", "scope": scope, "payload": {"id": ident}, "occurred_at": at})
        else:
            mine = [(k, i) for a, k, i in made if a == owner]
            payload = {
                "memory_ids": [i for k, i in mine if k == "mem"],
                "episode_ids": [i for k, i in mine if k == "ep"],
            }
            out.append({"type": "agent_data.deleted", "scope": scope, "payload": payload, "occurred_at": at})
    return out


class RowStore:
    """The row store the columns replaced (a ``VersionRow`` per ref, changed in place), as the oracle."""

    def __init__(self) -> None:
        self.rows: dict[str, VersionRow] = {}

    def apply(self, offset: int, ev: dict[str, Any]) -> None:
        t, p, s = ev["type"], ev["payload"], ev["scope"]
        if t in ("memory.stored", "episode.archived"):
            ref = f"{'mem' if t == 'memory.stored' else 'ep'}:{p['id']}"
            msg = p.get("msg_id") if t == "memory.stored" else None
            self.rows[ref] = VersionRow(ref, s["agent_id"], s["project_id"], msg, 1, ev["occurred_at"], offset)
        elif t == "memory.updated" and (row := self.rows.get(f"mem:{p['id']}")) is not None:
            at = ev["occurred_at"]
            self.rows[row.ref] = replace(row, version=row.version + 1, written_at=at, written_offset=offset)
        elif t == "memory.verified" and (row := self.rows.get(f"mem:{p['id']}")) is not None:
            self.rows[row.ref] = replace(row, verified_at=ev["occurred_at"], verified_offset=offset)
        elif t in ("memory.deleted", "episode.deleted"):
            self.rows.pop(f"{'mem' if t == 'memory.deleted' else 'ep'}:{p['id']}", None)
        elif t == "agent_data.deleted":
            for ref in [f"mem:{i}" for i in p["memory_ids"]] + [f"ep:{i}" for i in p["episode_ids"]]:
                self.rows.pop(ref, None)

    def snapshot(self) -> dict[str, Any]:
        rows = row_lists(r for _, r in sorted(self.rows.items()))
        names = field_names(VersionRow)
        cols: dict[str, Any] = {n: [r[i] for r in rows] for i, n in enumerate(names)}
        for n in ("agent_id", "project_id"):
            cols[n] = coded(cols[n])
        return {"format": 3, "fields": names, "columns": cols}

    def superseded_by(self, agent: str) -> dict[str, list[str]]:
        return scanned(self, agent)


@contextmanager
def compacting_from(n: int) -> Iterator[None]:
    was = versions.COMPACT_FROM
    versions.COMPACT_FROM = n
    try:
        yield
    finally:
        versions.COMPACT_FROM = was


def same(columns: VersionsProjection, rows: RowStore) -> None:
    assert orjson.dumps(columns.to_snapshot()) == orjson.dumps(rows.snapshot())
    for ref, row in rows.rows.items():
        assert columns.of(ref) == row
    assert columns.of("mem:999999") is None
    for agent in AGENTS:
        assert columns.superseded_by(agent, [*rows.rows, "mem:999999"]) == rows.superseded_by(agent)


@settings(max_examples=150, deadline=None)
@given(steps, st.sampled_from([1024, 2]))
def test_columns_answer_and_snapshot_as_the_row_store(spec: list[tuple[Any, ...]], compact_from: int) -> None:
    with compacting_from(compact_from):
        columns, rows = VersionsProjection(), RowStore()
        evs = events(spec)
        half = len(evs) // 2
        for offset, ev in enumerate(evs[:half]):
            columns.apply(offset, ev)
            rows.apply(offset, ev)
            same(columns, rows)
        # a restart half way: the rest folds into the columns loaded from the snapshot
        loaded = VersionsProjection()
        loaded.load_snapshot(orjson.loads(orjson.dumps(columns.to_snapshot())))
        same(loaded, rows)
        for offset, ev in enumerate(evs[half:], start=half):
            columns.apply(offset, ev)
            loaded.apply(offset, ev)
            rows.apply(offset, ev)
        same(columns, rows)
        same(loaded, rows)
        assert digest_of(loaded) == digest_of(columns)
        live = {(r.agent_id, r.msg_id) for r in rows.rows.values() if r.msg_id is not None}
        assert set(columns.by_msg) == live and set(loaded.by_msg) == live


def test_a_malformed_snapshot_is_refused() -> None:
    p = VersionsProjection()
    p.apply(0, events([("store", "a", "", "m1", 0)])[0])
    p.apply(1, events([("store", "a", "", "m2", 0)])[0] | {"payload": {"id": 2, "content": "x"}})
    body = p.to_snapshot()
    old = {"format": 2, "fields": body["fields"], "rows": row_lists(p.rows[r] for r in sorted(p.rows))}
    row = old["rows"][0]
    for rows in ([row[:-1]], [row, row], [[*row[:4], "one", *row[5:]]]):
        with pytest.raises((ValueError, TypeError)):
            VersionsProjection().load_snapshot({**old, "rows": rows})
    cols = body["columns"]
    for name, bad in (
        ("written_at", cols["written_at"][:1]),  # a short column
        ("ref", [cols["ref"][0]] * 2),  # a ref twice
        ("agent_id", [cols["agent_id"][0], [5, 0]]),  # a code past its table
        ("agent_id", [cols["agent_id"][0], [0, -1]]),  # a code before it
        ("project_id", [cols["project_id"][0], [0]]),  # a short coded column
        ("version", [1, "one"]),
    ):
        with pytest.raises((ValueError, TypeError, IndexError)):
            VersionsProjection().load_snapshot({**body, "columns": {**cols, name: bad}})


@pytest.mark.parametrize("listed", [False, True])
def test_an_erasure_of_many_rows_compacts_the_columns_once(listed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Erasing most rows rebuilds the columns once, after (not each time half the slots are
    dropped: at 100k rows that was 2.6 s of the fold, the interpreter lock held throughout)."""
    columns = VersionsProjection()
    for i in range(1, 4_011):
        scope = {"agent_id": "a" if i <= 4_000 else "b", "project_id": "", "channel": ""}
        ev = {"type": "memory.stored", "scope": scope, "payload": {"id": i, "msg_id": f"m{i}"}, "occurred_at": "t"}
        columns.apply(i, ev)
    compactions: list[int] = []
    real = VersionsProjection._compact

    def counted(self: VersionsProjection) -> None:
        compactions.append(len(self._slot))
        real(self)

    monkeypatch.setattr(VersionsProjection, "_compact", counted)
    payload: dict[str, Any] = {"memory_ids": None}
    if listed:
        payload = {"memory_ids": list(range(1, 4_001)), "episode_ids": []}
    scope = {"agent_id": "a", "project_id": "", "channel": ""}
    columns.apply(5_000, {"type": "agent_data.deleted", "scope": scope, "payload": payload, "occurred_at": "t"})
    assert compactions == [10]
    assert columns.of("mem:1") is None
    assert columns.of("mem:4005") is not None
