"""Memories, episodes and profiles as callers read them: the simple read models.

Each is a fold over the events of its own kind. Rows keep what reads return (content,
scope, metadata, times, lock, the embedding's model) and not the vectors, which belong to the
vector projection. Per-agent id lists are kept in insertion order, so "newest first" listing is a
reversed walk, not a sort.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from sys import intern
from typing import Any, Final

import orjson

from memstream.projections.row_dicts import coded, decoded, field_names, row_dicts
from memstream.streams.decision.whole_agent import names_every_record


def shared(s: str | None) -> str | None:
    """One string object for values many rows repeat (agent, project, channel, author, model,
    timestamps shared with other read models): a row holds a reference, not a copy
    (docs/benchmarks.md, "Memory per memory")."""
    return intern(s) if s is not None else None


class _Shared(dict[str, Any]):
    """A dict many rows hold: the one empty dict every row without a source or metadata holds,
    or one source for all the rows with an equal one (a dict per row was about a third of the
    ~850 bytes per memory at 100k). Reads return it as a dict; a write to it raises instead of
    reaching every such row (nothing writes to a row's dicts: updates replace them)."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a row's source or metadata is shared: copy it to change it")

    __setitem__ = __delitem__ = setdefault = update = pop = popitem = clear = __ior__ = _refuse  # type: ignore[assignment]


NO_FIELDS: Final[dict[str, Any]] = _Shared()


def _fields(d: dict[str, Any] | None) -> dict[str, Any]:
    """A row's metadata: the event's or snapshot's own dict, or the shared empty one."""
    return d if d else NO_FIELDS


class Sources:
    """One shared dict per distinct source among a read model's rows: equal keys in the same
    order, equal values of the same types (1, 1.0 and True stay apart, so snapshot bytes do not
    change). A source with an unhashable (nested) value stays the row's own, its strings
    interned. The table is emptied whenever a row is dropped, so it never holds an erased
    source after its rows are gone."""

    def __init__(self) -> None:
        self.table: dict[tuple[tuple[Any, ...], ...], dict[str, Any]] = {}

    def of(self, src: dict[str, Any] | None) -> dict[str, Any]:
        if not src:
            return NO_FIELDS
        try:
            values = tuple(src.values())
            key = (tuple(src), tuple(map(type, values)), values)
            got = self.table.get(key)
        except TypeError:  # an unhashable value: the row keeps its own dict
            for k, v in src.items():
                if isinstance(v, str):
                    src[k] = intern(v)  # replacing a value: the dict's size does not change
            return src
        if got is None:
            got = self.table[key] = _Shared((k, intern(v) if isinstance(v, str) else v) for k, v in src.items())
        return got


# Memory snapshots: 3 holds columns (the values many rows repeat as a table and each row's
# code in it: ``memory_columns``); 2 rows as lists of the fields in this order; 1 a dict per row.
MEMORY_FORMAT = 3
# The memory fields written as a table of distinct values and a code per row.
CODED: Final = ("agent_id", "project_id", "channel", "author", "embedding_model", "source")


def memory_columns(rows: list[MemoryRow]) -> dict[str, Any]:
    """The format-3 body: the columns of ``rows`` in order. A restart at 1M memories spent most of
    this read model's load on a list, 14 values and 5 interned strings per row; columns let the
    repeated values be made once each and the rows be built by ``map``."""
    names = field_names(MemoryRow)
    cols: dict[str, Any] = {n: [getattr(r, n) for r in rows] for n in names if n not in CODED}
    cols["updated_at"] = [None if u == c else u for u, c in zip(cols["updated_at"], cols["created_at"], strict=True)]
    cols["metadata"] = [m or None for m in cols["metadata"]]
    by_code = {n: coded([getattr(r, n) for r in rows]) for n in CODED if n != "source"}
    by_code["source"] = coded([r.source for r in rows], key=_source_key)
    return {"format": MEMORY_FORMAT, "fields": names, "columns": cols, "coded": by_code}


def _source_key(src: dict[str, Any]) -> bytes:
    return orjson.dumps(src)  # keys in order, 1, 1.0 and true apart: as ``Sources`` tells them apart


def _memory_row(raw: dict[str, Any], sources: Sources) -> MemoryRow:
    """A memory row from a format-1 snapshot dict."""
    fields = [raw.get(f) for f in field_names(MemoryRow)]
    fields[11], fields[12] = raw.get("locked", False), raw.get("author", "")
    return _memory_row_of(fields, sources)


def _memory_row_of(f: list[Any], sources: Sources) -> MemoryRow:
    """A memory row from its snapshot list, its repeated strings shared."""
    created = intern(f[8])
    updated = f[9]
    return MemoryRow(
        f[0],
        intern(f[1]),
        intern(f[2]),
        intern(f[3]),
        intern(f[4]),  # the content: the lexical index, loaded from its own snapshot, shares it
        f[5],
        sources.of(f[6]),
        _fields(f[7]),
        created,
        created if updated == created else intern(updated),
        f[10],
        f[11],
        intern(f[12]),
        shared(f[13]),
    )


@dataclass(slots=True)
class MemoryRow:
    id: int
    agent_id: str
    project_id: str
    channel: str
    content: str
    msg_id: str | None
    source: dict[str, Any]
    metadata: dict[str, Any]
    created_at: str
    updated_at: str
    timestamp: str | None
    locked: bool = False
    author: str = ""
    embedding_model: str | None = None


@dataclass(slots=True)
class EpisodeRow:
    id: int
    agent_id: str
    project_id: str
    channel: str
    summary: str
    keywords: str
    resolved: bool | None
    start_time: str | None
    end_time: str | None
    metadata: dict[str, Any]
    created_at: str
    embedding_model: str | None = None


@dataclass(slots=True)
class ProfileRow:
    agent_id: str
    content: str
    updated_at: str


def _model(p: dict[str, Any]) -> str | None:
    emb = p.get("embedding")
    return emb["model"] if emb else None


def _switch_model(rows: dict[int, Any], by_agent: dict[str, dict[int, None]], agent_id: str, model: str) -> None:
    """A row's ``embedding_model`` is the model its searchable vector has. A re-embed adds a
    vector of another model without changing that; the switch (accepted only once every live
    record has a vector of the new model) does, for all of the agent's rows at once."""
    for ident in by_agent.get(agent_id, {}):
        rows[ident].embedding_model = model


# The ids the last few erasures of everything of an agent dropped, by event id: the erasure's
# answer lists them (its event names none). Not state: no snapshot holds them.
ERASED_KEPT = 4


class Dropped(OrderedDict[str, dict[int, None]]):
    """Event id -> the ids an erasure of everything of an agent dropped (the last ``ERASED_KEPT``)."""

    def keep(self, event_id: str, ids: dict[int, None]) -> None:
        self[event_id] = ids
        while len(self) > ERASED_KEPT:
            self.popitem(last=False)


@dataclass
class MemoriesProjection:
    name: str = "memories"
    offset: int = -1
    rows: dict[int, MemoryRow] = field(default_factory=dict)
    by_agent: dict[str, dict[int, None]] = field(default_factory=dict)
    sources: Sources = field(default_factory=Sources, compare=False, repr=False)
    erased: Dropped = field(default_factory=Dropped, compare=False, repr=False)

    def apply(self, offset: int, ev: dict[str, Any]) -> None:
        t = ev["type"]
        if not (t.startswith("memory.") or t == "agent_data.deleted" or t == "embedding.switched"):
            return
        p = ev["payload"]
        if t == "embedding.switched":
            _switch_model(self.rows, self.by_agent, ev["scope"]["agent_id"], p["model"])
            return
        if t == "memory.stored":
            s = ev["scope"]
            at = intern(ev["occurred_at"])
            new = MemoryRow(
                id=p["id"],
                agent_id=intern(s["agent_id"]),
                project_id=intern(s["project_id"]),
                channel=intern(s["channel"]),
                content=p["content"],
                msg_id=p.get("msg_id"),
                source=self.sources.of(p.get("source")),
                metadata=_fields(p.get("metadata")),
                created_at=at,
                updated_at=at,
                timestamp=p.get("timestamp"),
                locked=bool(p.get("locked", False)),
                author=intern(ev["actor"]["client_id"]),
                embedding_model=shared(_model(p)),
            )
            self.rows[new.id] = new
            self.by_agent.setdefault(new.agent_id, {})[new.id] = None
            return
        if t == "agent_data.deleted":
            if names_every_record(p):
                ids = self.by_agent.pop(ev["scope"]["agent_id"], {})
                for mid in ids:
                    self.rows.pop(mid, None)
                self.sources.table.clear()
                self.erased.keep(ev["id"], ids)
                return
            for mid in p["memory_ids"]:
                self._drop(mid)
            return
        row = self.rows.get(p["id"]) if p.get("kind", "mem") == "mem" else None
        if row is None:
            return
        if t == "memory.updated":
            row.content = p["content"]
            if p.get("metadata") is not None:
                row.metadata = _fields(p["metadata"])
            row.updated_at = intern(ev["occurred_at"])
            row.embedding_model = shared(_model(p))
        elif t == "memory.deleted":
            self._drop(row.id)
        elif t == "memory.locked":
            row.locked = True
        elif t == "memory.unlocked":
            row.locked = False

    def _drop(self, mid: int) -> None:
        row = self.rows.pop(mid, None)
        if row is not None:
            self.by_agent.get(row.agent_id, {}).pop(mid, None)
            self.sources.table.clear()

    def of_agent(self, agent_id: str) -> list[MemoryRow]:
        """The agent's live memories, oldest first."""
        return [self.rows[i] for i in self.by_agent.get(agent_id, {})]

    def to_snapshot(self) -> dict[str, Any]:
        return memory_columns(list(self.rows.values()))

    def load_snapshot(self, body: dict[str, Any]) -> None:
        self.rows.clear()
        self.by_agent.clear()
        self.sources.table.clear()
        fmt = body.get("format", 1)
        if fmt in (2, 3) and body.get("fields") != field_names(MemoryRow):
            raise ValueError(f"memory snapshot fields {body.get('fields')!r} are not this version's")
        if fmt not in (1, 2, 3):
            raise ValueError(f"memory snapshot format {fmt!r}")
        if fmt == 3:
            self._load_columns(body)
            return
        make = _memory_row_of if fmt == 2 else _memory_row
        rows, by_agent, sources = self.rows, self.by_agent, self.sources
        for raw in body["rows"]:
            row = make(raw, sources)
            rows[row.id] = row
            by_agent.setdefault(row.agent_id, {})[row.id] = None

    def _sources(self, column: list[Any], n: int) -> list[dict[str, Any]]:
        """Each row's source: one shared dict per distinct one, but a row's own copy of a source
        with a nested value (``Sources``)."""
        table, codes = column
        made = [self.sources.of(v) for v in table]
        out = decoded([made, codes], n)
        if all(isinstance(m, _Shared) for m in made):  # checked once per distinct source, not per row
            return out
        return [m if isinstance(m, _Shared) else self.sources.of(orjson.loads(_source_key(m))) for m in out]

    def _load_columns(self, body: dict[str, Any]) -> None:
        cols, by_code = body["columns"], body["coded"]
        ids = cols["id"]
        n = len(ids)

        def column(name: str) -> list[Any]:
            values = cols[name]
            if len(values) != n:
                raise ValueError(f"memory snapshot column {name} has {len(values)} rows, not {n}")
            return values

        # Neither the texts nor the times are interned: sharing them with the lexical and versions
        # read models cost ~1 CPU s per million strings (a lookup in an interning table of
        # millions), and at 1M the RSS after loading did not grow without it (2,480 -> 2,442 MB:
        # the table held about what the copies do; docs/benchmarks.md, "Restart").
        created = column("created_at")
        updated_at = column("updated_at")
        # null: the row was never updated (its creation time); most rows, so checked in C first
        updated = (
            created
            if updated_at.count(None) == n
            else [c if u is None else intern(u) for c, u in zip(created, updated_at, strict=True)]
        )
        agents = decoded(by_code["agent_id"], n, intern)
        rows = map(
            MemoryRow,
            ids,
            agents,
            decoded(by_code["project_id"], n, intern),
            decoded(by_code["channel"], n, intern),
            column("content"),
            column("msg_id"),
            self._sources(by_code["source"], n),
            [m or NO_FIELDS for m in column("metadata")],
            created,
            updated,
            column("timestamp"),
            column("locked"),
            decoded(by_code["author"], n, intern),
            decoded(by_code["embedding_model"], n, shared),
        )
        self.rows.update(zip(ids, rows, strict=True))
        if len(self.rows) != n:
            raise ValueError("memory snapshot ids repeat")
        by_agent = self.by_agent
        if len(by_code["agent_id"][0]) == 1:  # one agent (a table of one name): its ids at once
            by_agent[agents[0]] = dict.fromkeys(ids)
            return
        for mid, agent in zip(ids, agents, strict=True):
            ids_of = by_agent.get(agent)
            if ids_of is None:
                ids_of = by_agent[agent] = {}
            ids_of[mid] = None


@dataclass
class EpisodesProjection:
    name: str = "episodes"
    offset: int = -1
    rows: dict[int, EpisodeRow] = field(default_factory=dict)
    by_agent: dict[str, dict[int, None]] = field(default_factory=dict)
    erased: Dropped = field(default_factory=Dropped, compare=False, repr=False)

    def apply(self, offset: int, ev: dict[str, Any]) -> None:
        t = ev["type"]
        p = ev["payload"]
        if t == "episode.archived":
            s = ev["scope"]
            row = EpisodeRow(
                id=p["id"],
                agent_id=s["agent_id"],
                project_id=s["project_id"],
                channel=s["channel"],
                summary=p["summary"],
                keywords=p.get("keywords") or "",
                resolved=p.get("resolved"),
                start_time=p.get("start_time"),
                end_time=p.get("end_time"),
                metadata=p.get("metadata") or {},
                created_at=ev["occurred_at"],
                embedding_model=_model(p),
            )
            self.rows[row.id] = row
            self.by_agent.setdefault(row.agent_id, {})[row.id] = None
        elif t == "episode.deleted":
            self._drop(p["id"])
        elif t == "agent_data.deleted" and names_every_record(p):
            ids = self.by_agent.pop(ev["scope"]["agent_id"], {})
            for eid in ids:
                self.rows.pop(eid, None)
            self.erased.keep(ev["id"], ids)
        elif t == "agent_data.deleted":
            for eid in p["episode_ids"]:
                self._drop(eid)
        elif t == "embedding.switched":
            _switch_model(self.rows, self.by_agent, ev["scope"]["agent_id"], p["model"])

    def _drop(self, eid: int) -> None:
        row = self.rows.pop(eid, None)
        if row is not None:
            self.by_agent.get(row.agent_id, {}).pop(eid, None)

    def of_agent(self, agent_id: str) -> list[EpisodeRow]:
        return [self.rows[i] for i in self.by_agent.get(agent_id, {})]

    def to_snapshot(self) -> dict[str, Any]:
        return {"rows": row_dicts(self.rows.values())}

    def load_snapshot(self, body: dict[str, Any]) -> None:
        self.rows.clear()
        self.by_agent.clear()
        for raw in body["rows"]:
            row = EpisodeRow(**raw)
            self.rows[row.id] = row
            self.by_agent.setdefault(row.agent_id, {})[row.id] = None


@dataclass
class ProfilesProjection:
    """At most one profile per agent: an update replaces (W6)."""

    name: str = "profiles"
    offset: int = -1
    rows: dict[str, ProfileRow] = field(default_factory=dict)

    def apply(self, offset: int, ev: dict[str, Any]) -> None:
        t = ev["type"]
        agent = ev["scope"]["agent_id"]
        if t == "profile.updated":
            self.rows[agent] = ProfileRow(agent, ev["payload"]["content"], ev["occurred_at"])
        elif t == "agent_data.deleted" and ev["payload"].get("profile"):
            self.rows.pop(agent, None)

    def to_snapshot(self) -> dict[str, Any]:
        return {"rows": row_dicts(r for _, r in sorted(self.rows.items()))}

    def load_snapshot(self, body: dict[str, Any]) -> None:
        self.rows = {r["agent_id"]: ProfileRow(**r) for r in body["rows"]}
