"""Vector-projection events as folds receive them, a feed that keeps them for replays, and
random histories (hypothesis) with the answers compared after a replay."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from hypothesis import strategies as st

from memstream.projections.scope import ScopeFilter
from memstream.projections.vectors import VectorProjection

DIM = 16
T0 = "2026-01-01T00:00:00+00:00"


def unit(seed: int, dim: int = DIM) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


def event(
    type_: str,
    payload: dict[str, Any],
    *,
    agent: str = "a",
    project: str = "",
    channel: str = "",
    vec: np.ndarray | None = None,
    model: str = "m1",
) -> dict[str, Any]:
    """An event as folds receive it: Event.model_dump() decoded, the attachment as ``vector``."""
    ev: dict[str, Any] = {
        "id": "e",
        "type": type_,
        "v": 1,
        "scope": {"agent_id": agent, "project_id": project, "channel": channel},
        "actor": {"client_id": "t", "agent_id": agent, "session_id": ""},
        "occurred_at": T0,
        "command_id": "c",
        "payload": dict(payload),
    }
    if vec is not None:
        raw = np.ascontiguousarray(vec, dtype="<f4")
        ev["payload"]["embedding"] = {"model": model, "dim": int(raw.shape[0]), "dtype": "f32"}
        ev["vector"] = raw.tobytes()
    elif type_ in ("memory.stored", "memory.updated", "episode.archived"):
        ev["payload"]["embedding"] = None
    return ev


def store(mid: int, vec: np.ndarray | None, **kw: Any) -> dict[str, Any]:
    return event("memory.stored", {"id": mid, "content": f"m{mid}"}, vec=vec, **kw)


def archive(eid: int, vec: np.ndarray | None, **kw: Any) -> dict[str, Any]:
    return event("episode.archived", {"id": eid, "summary": f"e{eid}"}, vec=vec, **kw)


def update(mid: int, vec: np.ndarray | None, **kw: Any) -> dict[str, Any]:
    return event("memory.updated", {"id": mid, "content": f"m{mid}'", "metadata": None}, vec=vec, **kw)


def reembed(ident: int, vec: np.ndarray, model: str, kind: str = "mem", **kw: Any) -> dict[str, Any]:
    return event("memory.reembedded", {"id": ident, "kind": kind}, vec=vec, model=model, **kw)


class Feed:
    """Applies events at increasing offsets and keeps them for replays."""

    def __init__(self, proj: VectorProjection | None = None) -> None:
        self.proj = proj or VectorProjection()
        self.events: list[dict[str, Any]] = []

    def __call__(self, *evs: dict[str, Any]) -> Feed:
        for ev in evs:
            self.proj.apply(len(self.events), ev)
            self.proj.offset = len(self.events)
            self.events.append(ev)
        return self

    def replayed(self, **kw: Any) -> VectorProjection:
        fresh = VectorProjection(**kw)
        for off, ev in enumerate(self.events):
            fresh.apply(off, ev)
        return fresh


A = ScopeFilter("a")


ops = st.lists(
    st.tuples(
        st.sampled_from(
            ["store"] * 4 + ["store_bare", "episode", "update", "update_bare", "reembed", "delete", "delete_ep", "wipe"]
        ),
        st.integers(0, 30),  # which id (for updates/deletes) or vector seed
        st.sampled_from(["a", "b"]),
        st.sampled_from(["", "x"]),
        st.sampled_from(["", "c"]),
        st.sampled_from(["m1", "m2"]),
    ),
    max_size=70,
)


def build(spec: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    evs: list[dict[str, Any]] = []
    next_id = itertools.count(1)
    made: list[tuple[str, int, str]] = []  # (kind, id, agent)
    for op, n, agent, project, channel, model in spec:
        vec = unit(n % 12)  # a small pool of vectors: ties happen
        if op in ("store", "store_bare", "episode"):
            ident = next(next_id)
            if op == "episode":
                evs.append(archive(ident, vec, agent=agent, project=project, channel=channel, model=model))
                made.append(("ep", ident, agent))
            else:
                v = None if op == "store_bare" else vec
                evs.append(store(ident, v, agent=agent, project=project, channel=channel, model=model))
                made.append(("mem", ident, agent))
        elif made:
            kind, ident, owner = made[n % len(made)]
            if op == "update" and kind == "mem":
                evs.append(update(ident, vec, agent=owner, model=model))
            elif op == "update_bare" and kind == "mem":
                evs.append(update(ident, None, agent=owner))
            elif op == "reembed":
                evs.append(reembed(ident, vec, model, kind=kind, agent=owner))
            elif op == "delete" and kind == "mem":
                evs.append(event("memory.deleted", {"id": ident}, agent=owner))
            elif op == "delete_ep" and kind == "ep":
                evs.append(event("episode.deleted", {"id": ident}, agent=owner))
            elif op == "wipe":
                mine = [i for k, i, a in made if a == owner]
                evs.append(
                    event(
                        "agent_data.deleted",
                        {"memory_ids": mine[::2], "episode_ids": mine, "profile": False, "kept_locked": []},
                        agent=owner,
                    )
                )
    return evs


def small_answers(proj: VectorProjection) -> list[Any]:
    out = []
    for agent in ("a", "b"):
        for scope in (ScopeFilter(agent), ScopeFilter(agent, "x"), ScopeFilter(agent, "", "c")):
            for seed in (0, 3):
                for model in (None, "m2"):
                    out.append(proj.search(scope, unit(seed), 3, window=4, reach=12, model=model))
            out.append(proj.count(scope))
    return out
