"""The versions read model's message index (a lone ref bare, a dict from the second on) answers
``superseded_by`` as a scan of its rows does, through stores, updates, deletes and agent wipes,
folded or loaded from its snapshot."""

from __future__ import annotations

import itertools
from typing import Any, Protocol

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.projections.versions import VersionRow, VersionsProjection, buckets_meet

AGENTS = ("a", "b")

steps = st.lists(
    st.tuples(
        st.sampled_from(["store", "store", "store", "update", "delete", "wipe", "episode"]),
        st.sampled_from(AGENTS),
        st.sampled_from(["", "p"]),
        st.sampled_from([None, "m1", "m2", "m3"]),
        st.integers(0, 40),
    ),
    max_size=60,
)


def events(spec: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    ids = itertools.count(1)
    made: list[tuple[str, int]] = []
    for op, agent, project, msg_id, n in spec:
        scope = {"agent_id": agent, "project_id": project, "channel": ""}
        at = f"2026-01-01T00:00:{len(out) % 60:02d}Z"
        if op in ("store", "episode"):
            ident = next(ids)
            payload: dict[str, Any] = {"id": ident, "content": "x"} if op == "store" else {"id": ident, "summary": "s"}
            if op == "store" and msg_id is not None:
                payload["msg_id"] = msg_id
            out.append(
                {
                    "type": "memory.stored" if op == "store" else "episode.archived",
                    "scope": scope,
                    "payload": payload,
                    "occurred_at": at,
                }
            )
            if op == "store":
                made.append((agent, ident))
        elif made:
            owner, ident = made[n % len(made)]
            scope["agent_id"] = owner
            if op == "update":
                out.append(
                    {
                        "type": "memory.updated",
                        "scope": scope,
                        "payload": {"id": ident, "content": "y"},
                        "occurred_at": at,
                    }
                )
            elif op == "delete":
                out.append({"type": "memory.deleted", "scope": scope, "payload": {"id": ident}, "occurred_at": at})
            else:
                mine = [i for a, i in made if a == owner]
                out.append(
                    {
                        "type": "agent_data.deleted",
                        "scope": scope,
                        "payload": {"memory_ids": mine, "episode_ids": []},
                        "occurred_at": at,
                    }
                )
    return out


class HasRows(Protocol):
    @property
    def rows(self) -> dict[str, VersionRow]: ...


def scanned(p: HasRows, agent: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for ref, row in p.rows.items():
        if row.msg_id is None or row.agent_id != agent:
            continue
        newer = [
            o
            for o in p.rows.values()
            if o.agent_id == agent
            and o.msg_id == row.msg_id
            and o.written_offset > row.written_offset
            and buckets_meet(o.project_id, row.project_id)
        ]
        if newer:
            out[ref] = [o.ref for o in sorted(newer, key=lambda o: -o.written_offset)]
    return out


@settings(max_examples=150, deadline=None)
@given(steps)
def test_superseded_by_equals_a_scan_of_the_rows(spec: list[tuple[Any, ...]]) -> None:
    folded = VersionsProjection()
    for offset, ev in enumerate(events(spec)):
        folded.apply(offset, ev)
        for agent in AGENTS:
            assert folded.superseded_by(agent, list(folded.rows)) == scanned(folded, agent)
    loaded = VersionsProjection()
    loaded.load_snapshot(orjson.loads(orjson.dumps(folded.to_snapshot())))
    for agent in AGENTS:
        assert loaded.superseded_by(agent, list(loaded.rows)) == scanned(folded, agent)
    live = {(r.agent_id, r.msg_id) for r in folded.rows.values() if r.msg_id is not None}
    assert set(folded.by_msg) == live and set(loaded.by_msg) == live  # no empty groups left
    # the bulk index of a load, or its row-by-row one on repeats (a group may be one ref or a dict of it)
    assert {k: {v} if isinstance(v, str) else set(v) for k, v in loaded.by_msg.items()} == {
        k: {v} if isinstance(v, str) else set(v) for k, v in folded.by_msg.items()
    }
