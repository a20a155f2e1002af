"""Versions and verification: which content of a message is current, and when it was last
checked (seed 002's ``superseded`` and ``stale``), as a pure fold of the log. See
docs/context-packets.md for what "version" and "verified" mean.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import is_not
from sys import intern
from typing import Any

from memstream.projections.row_dicts import Coded, coded, field_names
from memstream.streams.decision.whole_agent import names_every_record
from memstream.streams.release import release_later

# Versions snapshots: 3 holds columns in the fields' order, agents and projects as a table and a
# code per row (``coded``); 2 rows as lists of the fields; 1 a dict per row.
VERSIONS_FORMAT = 3
_CODED = ("agent_id", "project_id")


@dataclass(slots=True)
class VersionRow:
    ref: str
    agent_id: str
    project_id: str
    msg_id: str | None
    version: int  # 1 at store (or archive), +1 per content update
    written_at: str  # when the current version's content was written
    written_offset: int  # the log offset that wrote it: versions are ordered by this
    verified_at: str | None = None  # the last explicit verify_memory, if any
    verified_offset: int = -1

    @property
    def last_verified_at(self) -> str:
        """The later of writing and the last explicit verification (offsets order them)."""
        if self.verified_at is not None and self.verified_offset > self.written_offset:
            return self.verified_at
        return self.written_at


_FIELDS = tuple(field_names(VersionRow))


def buckets_meet(a: str, b: str) -> bool:
    """Whether two project buckets see each other: the same project, or one is the global pool."""
    return a == b or a == "" or b == ""


# Dropped rows' slots are reclaimed (the columns rebuilt) once they are over half of this many or more.
COMPACT_FROM = 1024
_NO_ROWS: tuple[tuple[Any, ...], ...] = ((),) * len(_FIELDS)


class VersionsProjection:
    """The rows as columns (docs/benchmarks.md, "Restart"): a restart loads 100k of them from
    the snapshot's lists in bulk (transposed, typed arrays built in C) instead of an object
    per row, and each holds ~60 bytes instead of ~330. ``of`` makes the row a read asks for."""

    name = "versions"

    def __init__(self) -> None:
        self.offset = -1
        # (agent, msg_id) -> the live memory refs stored under it: the ref itself while there
        # is one (most messages), a dict of them from the second on.
        self.by_msg: dict[tuple[str, str], str | dict[str, None]] = {}
        self._columns(_NO_ROWS)

    def _columns(self, cols: Sequence[Sequence[Any]]) -> None:
        """Set every column from the snapshot rows' fields, transposed (``_FIELDS`` order); the
        agents and projects as strings, or as a format-3 snapshot's ``[table, codes]`` (``Coded``)."""
        refs, agents, projects, msg, version, written_at, written_off, verified_at, verified_off = cols
        # Refs and times not interned (a load's ~2 CPU s per million rows; records.py says why).
        self._ref: list[str] = list(refs)
        self._names: list[str] = []  # the agents and projects the rows name, each once
        self._code: dict[str, int] = {}
        self._agent = self._recoded(agents) if isinstance(agents, Coded) else self._codes(agents)
        self._project = self._recoded(projects) if isinstance(projects, Coded) else self._codes(projects)
        self._msg: list[str | None] = list(msg)
        self._version = array("q", version)
        self._written_at: list[str] = list(written_at)
        self._written_off = array("q", written_off)
        self._verified_at: list[str | None] = list(verified_at)
        self._verified_off = array("q", verified_off)
        self._slot: dict[str, int] = dict(zip(self._ref, range(len(self._ref)), strict=True))
        if len(self._slot) != len(self._ref):
            raise ValueError("versions snapshot names a ref twice")

    def _codes(self, strings: Iterable[str]) -> array[int]:
        code = self._code
        for s in dict.fromkeys(strings):
            if s not in code:
                code[intern(s)] = len(self._names)
                self._names.append(intern(s))
        return array("i", map(code.__getitem__, strings))

    def _recoded(self, column: Coded) -> array[int]:
        """A snapshot's codes into its own table as codes into ``_names``, without the string
        of each row in between (at 1M rows: 1M lookups less per column)."""
        ours = [self._code_of(s) for s in column.table]
        codes = column.codes
        if len(ours) == 1 and codes.count(0) == len(codes):  # one agent, one project: most stores
            return array("i", ours) * len(codes)
        return array("i", map(ours.__getitem__, codes))

    def _code_of(self, s: str) -> int:
        got = self._code.get(s)
        if got is None:
            got = self._code[intern(s)] = len(self._names)
            self._names.append(intern(s))
        return got

    def apply(self, offset: int, ev: dict[str, Any]) -> None:
        t = ev["type"]
        p = ev["payload"]
        if t == "memory.stored" or t == "episode.archived":
            s = ev["scope"]
            # Refs and repeated strings interned: the lexical index and the memories share them.
            ref = intern(f"{'mem' if t == 'memory.stored' else 'ep'}:{p['id']}")
            msg_id = p.get("msg_id") if t == "memory.stored" else None
            agent = intern(s["agent_id"])
            self._slot[ref] = len(self._ref)
            self._ref.append(ref)
            self._agent.append(self._code_of(agent))
            self._project.append(self._code_of(s["project_id"]))
            self._msg.append(msg_id)
            self._version.append(1)
            self._written_at.append(intern(ev["occurred_at"]))
            self._written_off.append(offset)
            self._verified_at.append(None)
            self._verified_off.append(-1)
            if msg_id is not None:
                self._index(agent, msg_id, ref)
        elif t == "memory.updated":
            i = self._slot.get(f"mem:{p['id']}")
            if i is not None:
                self._version[i] += 1
                self._written_at[i] = intern(ev["occurred_at"])
                self._written_off[i] = offset
        elif t == "memory.verified":
            i = self._slot.get(f"mem:{p['id']}")
            if i is not None:
                self._verified_at[i] = ev["occurred_at"]
                self._verified_off[i] = offset
        elif t == "memory.deleted":
            self._drop(f"mem:{p['id']}")
        elif t == "episode.deleted":
            self._drop(f"ep:{p['id']}")
        elif t == "agent_data.deleted":
            # Many rows at once: the columns are compacted once after, not each time half the
            # slots are dropped (erasing a 100k agent rebuilt them again and again, 2.6 s, the
            # interpreter lock held 80-130 ms at a time while other agents' writes waited).
            if names_every_record(p):
                refs = self._refs_of_agent(ev["scope"]["agent_id"])
            else:
                refs = [f"mem:{mid}" for mid in p["memory_ids"]] + [f"ep:{eid}" for eid in p["episode_ids"]]
            for ref in refs:
                self._drop(ref, compact=False)
            self._compact_if_sparse()
            release_later(refs)  # their last references: freed a slice at a time, not in one call

    def _refs_of_agent(self, agent_id: str) -> list[str]:
        """The agent's live refs (an erasure of everything of it names none): one pass over
        the agent column, on the fold's thread, not the bus's writer."""
        code = self._code.get(agent_id)
        if code is None:
            return []
        return [ref for ref, a in zip(self._ref, self._agent, strict=True) if a == code and ref]

    def _index(self, agent_id: str, msg_id: str, ref: str) -> None:
        key = (agent_id, msg_id)
        group = self.by_msg.get(key)
        if group is None:
            self.by_msg[key] = ref
        elif isinstance(group, str):
            if group != ref:
                self.by_msg[key] = {group: None, ref: None}
        else:
            group[ref] = None

    def _refs_of(self, agent_id: str, msg_id: str) -> tuple[str, ...] | dict[str, None]:
        group = self.by_msg.get((agent_id, msg_id))
        if group is None:
            return ()
        return (group,) if isinstance(group, str) else group

    def _drop(self, ref: str, *, compact: bool = True) -> None:
        i = self._slot.pop(ref, None)
        if i is None:
            return
        msg_id = self._msg[i]
        self._msg[i] = None  # a dropped row's slot keeps nothing of it but numbers
        self._ref[i] = ""
        if msg_id is not None:
            self._unindex((self._names[self._agent[i]], msg_id), ref)
        if compact:
            self._compact_if_sparse()

    def _compact_if_sparse(self) -> None:
        if len(self._ref) > COMPACT_FROM and len(self._slot) < len(self._ref) // 2:
            self._compact()

    def _unindex(self, key: tuple[str, str], ref: str) -> None:
        group = self.by_msg.get(key)
        if group is None:
            return
        if isinstance(group, str):
            if group == ref:
                del self.by_msg[key]
            return
        group.pop(ref, None)
        if not group:
            del self.by_msg[key]

    def _compact(self) -> None:
        """Columns of the live rows only, once dropped slots are most of them (an agent wiped)."""
        keep = sorted(self._slot.values())
        self._columns(tuple(zip(*map(self._fields, keep), strict=True)) if keep else _NO_ROWS)

    def _fields(self, i: int) -> list[Any]:
        """The row in slot ``i`` as its snapshot list (``_FIELDS`` order)."""
        names = self._names
        return [
            self._ref[i],
            names[self._agent[i]],
            names[self._project[i]],
            self._msg[i],
            self._version[i],
            self._written_at[i],
            self._written_off[i],
            self._verified_at[i],
            self._verified_off[i],
        ]

    def _row(self, i: int) -> VersionRow:
        return VersionRow(*self._fields(i))

    def of(self, ref: str) -> VersionRow | None:
        i = self._slot.get(ref)
        return self._row(i) if i is not None else None

    @property
    def rows(self) -> dict[str, VersionRow]:
        """Every live row by ref, made now (O(rows): for tests and tools, not for reads)."""
        return {ref: self._row(i) for ref, i in self._slot.items()}

    def superseded_by(self, agent_id: str, refs: Any) -> dict[str, list[str]]:
        """For each of ``refs`` that a newer version of the same message supersedes, the refs
        that supersede it, newest first. Refs of another agent, gone, or current are absent."""
        out: dict[str, list[str]] = {}
        names, slot, off = self._names, self._slot, self._written_off
        for ref in refs:
            i = slot.get(ref)
            if i is None:
                continue
            msg_id = self._msg[i]
            if msg_id is None or names[self._agent[i]] != agent_id:
                continue
            project = names[self._project[i]]
            newer = [
                (off[j], other)
                for other, j in ((r, slot[r]) for r in self._refs_of(agent_id, msg_id))
                if off[j] > off[i] and buckets_meet(names[self._project[j]], project)
            ]
            if newer:
                newer.sort(key=lambda pair: -pair[0])
                out[ref] = [other for _, other in newer]
        return out

    def to_snapshot(self) -> dict[str, Any]:
        order = [i for _, i in sorted(self._slot.items())]
        names = self._names

        def pick(col: Sequence[Any]) -> list[Any]:
            return [col[i] for i in order]

        def names_of(col: Sequence[int]) -> list[Any]:
            # codes are 1:1 with names, so coding the codes codes the names in the same order
            table, codes = coded(pick(col))
            return [[names[c] for c in table], codes]

        cols = [
            pick(self._ref),
            names_of(self._agent),
            names_of(self._project),
            pick(self._msg),
            pick(self._version),
            pick(self._written_at),
            pick(self._written_off),
            pick(self._verified_at),
            pick(self._verified_off),
        ]
        return {"format": VERSIONS_FORMAT, "fields": list(_FIELDS), "columns": dict(zip(_FIELDS, cols, strict=True))}

    def load_snapshot(self, body: dict[str, Any]) -> None:
        # ``by_msg`` is an index, not state: its order never matters (``superseded_by`` orders
        # by offset), so it is rebuilt rather than stored.
        fmt = body.get("format", 1)
        if fmt in (2, 3) and body.get("fields") != list(_FIELDS):
            raise ValueError(f"versions snapshot fields {body.get('fields')!r} are not this version's")
        if fmt not in (1, 2, 3):
            raise ValueError(f"versions snapshot format {fmt!r}")
        self.by_msg = {}
        if fmt == 3:
            given = body["columns"]
            n = len(given["ref"])
            cols = [Coded.of(given[f], n) if f in _CODED else given[f] for f in _FIELDS]
            if any(len(c) != n for c in cols if not isinstance(c, Coded)):  # a Coded one was checked
                raise ValueError("versions snapshot columns of different lengths")
            self._columns(cols)
        else:
            rows = body["rows"]
            if fmt == 1:  # a dict per row
                rows = [[raw.get(n, -1 if n == "verified_offset" else None) for n in _FIELDS] for raw in rows]
            if any(len(r) != len(_FIELDS) for r in rows):
                raise ValueError(f"a versions snapshot row has not {len(_FIELDS)} fields")
            self._columns(tuple(zip(*rows, strict=True)) if rows else _NO_ROWS)
        self._index_all()

    def _index_all(self) -> None:
        """``by_msg`` of the loaded rows. In bulk (one dict built in C) when no (agent, msg id)
        repeats, as in most stores: the per-row loop was ~1.5 of a 1M restart's CPU seconds
        (docs/benchmarks.md, "Restart"); else row by row, the repeats grouped in row order."""
        msgs = self._msg
        agents = self._agent
        if agents and agents.count(agents[0]) == len(agents):  # one agent: its name, not a lookup per row
            names: Iterable[str] = repeat(self._names[agents[0]], len(agents))
        else:
            names = map(self._names.__getitem__, agents)
        # ((agent, msg id), ref) per row; those without a msg id are left out below
        keyed: Iterable[Any] = zip(zip(names, msgs, strict=True), self._ref, strict=True)
        count = len(msgs)
        if None in msgs:
            count -= msgs.count(None)
            keyed = compress(keyed, map(is_not, msgs, repeat(None)))
        self.by_msg = dict(keyed)
        if len(self.by_msg) == count:
            return
        by_msg = self.by_msg = {}
        names, agents = self._names, self._agent
        for i, (ref, msg_id) in enumerate(zip(self._ref, msgs, strict=True)):
            if msg_id is not None:
                agent = names[agents[i]]
                if by_msg.setdefault((agent, msg_id), ref) is not ref:
                    self._index(agent, msg_id, ref)
