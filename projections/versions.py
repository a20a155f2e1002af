"""Versions and verification: which content of a message is current, and when it was last
checked (seed 002's ``superseded`` and ``stale``), as a pure fold of the log. See
docs/context-packets.md for what "version" and "verified" mean.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from sys import intern
from typing import Any

from memstream.projections.row_dicts import field_names, row_lists

# Versions snapshots: 2 holds rows as lists of the fields in this order (1: a dict per row).
VERSIONS_FORMAT = 2


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


def buckets_meet(a: str, b: str) -> bool:
    """Whether two project buckets see each other: the same project, or one is the global pool."""
    return a == b or a == "" or b == ""


@dataclass
class VersionsProjection:
    name: str = "versions"
    offset: int = -1
    rows: dict[str, VersionRow] = field(default_factory=dict)
    # (agent, msg_id) -> the live memory refs stored under it: the ref itself while there is
    # one (most messages), a dict of them from the second on. A one-entry dict per message was
    # about a third of the ~520 bytes per memory this held at 100k.
    by_msg: dict[tuple[str, str], str | dict[str, None]] = field(default_factory=dict)

    def apply(self, offset: int, ev: dict[str, Any]) -> None:
        t = ev["type"]
        p = ev["payload"]
        if t == "memory.stored" or t == "episode.archived":
            s = ev["scope"]
            # Refs and repeated strings interned: the lexical index and the memories share them.
            ref = intern(f"{'mem' if t == 'memory.stored' else 'ep'}:{p['id']}")
            msg_id = p.get("msg_id") if t == "memory.stored" else None
            at = intern(ev["occurred_at"])
            self.rows[ref] = VersionRow(ref, intern(s["agent_id"]), intern(s["project_id"]), msg_id, 1, at, offset)
            if msg_id is not None:
                self._index(intern(s["agent_id"]), msg_id, ref)
        elif t == "memory.updated":
            row = self.rows.get(f"mem:{p['id']}")
            if row is not None:
                row.version += 1
                row.written_at = intern(ev["occurred_at"])
                row.written_offset = offset
        elif t == "memory.verified":
            row = self.rows.get(f"mem:{p['id']}")
            if row is not None:
                row.verified_at = ev["occurred_at"]
                row.verified_offset = offset
        elif t == "memory.deleted":
            self._drop(f"mem:{p['id']}")
        elif t == "episode.deleted":
            self._drop(f"ep:{p['id']}")
        elif t == "agent_data.deleted":
            for mid in p["memory_ids"]:
                self._drop(f"mem:{mid}")
            for eid in p["episode_ids"]:
                self._drop(f"ep:{eid}")

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

    def _drop(self, ref: str) -> None:
        row = self.rows.pop(ref, None)
        if row is None or row.msg_id is None:
            return
        key = (row.agent_id, row.msg_id)
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

    def of(self, ref: str) -> VersionRow | None:
        return self.rows.get(ref)

    def superseded_by(self, agent_id: str, refs: Any) -> dict[str, list[str]]:
        """For each of ``refs`` that a newer version of the same message supersedes, the refs
        that supersede it, newest first. Refs of another agent, gone, or current are absent."""
        out: dict[str, list[str]] = {}
        for ref in refs:
            row = self.rows.get(ref)
            if row is None or row.msg_id is None or row.agent_id != agent_id:
                continue
            newer = [
                other
                for other in (self.rows[r] for r in self._refs_of(agent_id, row.msg_id))
                if other.written_offset > row.written_offset and buckets_meet(other.project_id, row.project_id)
            ]
            if newer:
                newer.sort(key=lambda r: -r.written_offset)
                out[ref] = [r.ref for r in newer]
        return out

    def to_snapshot(self) -> dict[str, Any]:
        rows = row_lists(r for _, r in sorted(self.rows.items()))
        return {"format": VERSIONS_FORMAT, "fields": field_names(VersionRow), "rows": rows}

    def load_snapshot(self, body: dict[str, Any]) -> None:
        # ``by_msg`` is an index, not state: its order never matters (``superseded_by`` orders
        # by offset), so it is rebuilt rather than stored.
        self.rows.clear()
        self.by_msg.clear()
        fmt = body.get("format", 1)
        if fmt == VERSIONS_FORMAT and body.get("fields") != field_names(VersionRow):
            raise ValueError(f"versions snapshot fields {body.get('fields')!r} are not this version's")
        if fmt not in (1, VERSIONS_FORMAT):
            raise ValueError(f"versions snapshot format {fmt!r}")
        names = field_names(VersionRow)
        for raw in body["rows"]:
            if fmt == 1:  # a dict per row
                raw = [raw.get(n, -1 if n == "verified_offset" else None) for n in names]
            ref, agent, project, msg_id, version, written_at, written_offset, verified_at, verified_offset = raw
            row = VersionRow(
                intern(ref),
                intern(agent),
                intern(project),
                msg_id,
                version,
                intern(written_at),
                written_offset,
                intern(verified_at) if verified_at is not None else None,
                verified_offset,
            )
            self.rows[row.ref] = row
            if row.msg_id is not None:
                self._index(row.agent_id, row.msg_id, row.ref)
