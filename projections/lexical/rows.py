"""An agent's live rows as the lexical snapshot holds them: columns, in creation order.

Version 4 of the snapshot. Versions 2 and 3 held a [ref, project, channel, seq, text] list per
row, ~150 bytes a row to make: at 1M memories ~0.19 GB at the top of a running server's
checkpoint (docs/benchmarks.md, "A running server's checkpoint with room (wave 12)"). As
columns they are two lists of strings the index already holds, and three base64 arrays.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from memstream.projections.lexical.index import AgentIndex, Row
from memstream.streams.base64_columns import decode, encode


@dataclass(frozen=True)
class SnapshotRows:
    """Row ``i`` is (``refs[i]``, ``names[project[i]]``, ``names[channel[i]]``, ``seq[i]``,
    ``texts[i]``); rows ordered by seq (ties in slot order), ``names`` sorted and holding only
    what some row names, so equal live rows give equal JSON whatever the index's history."""

    refs: list[str]
    texts: list[str]
    seq: np.ndarray  # int64
    names: list[str]
    project: np.ndarray  # uint32 codes into names
    channel: np.ndarray

    def __len__(self) -> int:
        return len(self.refs)

    @classmethod
    def of_index(cls, idx: AgentIndex) -> SnapshotRows:
        slots = idx.live_slots()
        proj, chan = idx.proj[slots], idx.chan[slots]
        used = np.union1d(proj, chan)
        names = [idx.names[c] for c in used.tolist()]
        by_name = sorted(range(len(names)), key=names.__getitem__)
        recode = np.zeros(max(1, len(idx.names)), dtype=np.uint32)
        recode[used[by_name]] = np.arange(used.shape[0], dtype=np.uint32)
        # Picked through object arrays: a list of slot numbers would be an int object per row.
        return cls(
            refs=np.array(idx.refs, dtype=object)[slots].tolist(),
            texts=np.array(idx.texts, dtype=object)[slots].tolist(),  # live slots hold text
            seq=idx.seq[slots],
            names=[names[i] for i in by_name],
            project=recode[proj],
            channel=recode[chan],
        )

    @classmethod
    def of_lists(cls, rows: list[list[Any]]) -> SnapshotRows:
        """Rows as versions 2 and 3 held them: a [ref, project, channel, seq, text] list each."""
        table = sorted({name for r in rows for name in (r[1], r[2])})
        code = {name: i for i, name in enumerate(table)}
        return cls(
            refs=[r[0] for r in rows],
            texts=[r[4] for r in rows],
            seq=np.fromiter((r[3] for r in rows), dtype=np.int64, count=len(rows)),
            names=table,
            project=np.fromiter((code[r[1]] for r in rows), dtype=np.uint32, count=len(rows)),
            channel=np.fromiter((code[r[2]] for r in rows), dtype=np.uint32, count=len(rows)),
        )

    @classmethod
    def of_json(cls, body: dict[str, Any]) -> SnapshotRows:
        """Version 4's columns, checked; raises ``ValueError`` (or ``KeyError``, ``TypeError``)."""
        n = body["n"]
        refs, texts, names = body["refs"], body["texts"], body["names"]
        if not (isinstance(refs, list) and isinstance(texts, list) and isinstance(names, list)):
            raise TypeError("lexical rows columns are not lists")
        if len(refs) != n or len(texts) != n:
            raise ValueError("lexical rows columns of unequal lengths")
        project = decode(body["project"], "<u4", n)
        channel = decode(body["channel"], "<u4", n)
        if n and max(int(project.max()), int(channel.max())) >= len(names):
            raise ValueError("lexical rows name a project or channel past their table")
        return cls(refs, texts, decode(body["seq"], "<i8", n), names, project, channel)

    def to_json(self) -> dict[str, Any]:
        return {
            "n": len(self.refs),
            "refs": self.refs,
            "texts": self.texts,
            "seq": encode(self.seq.astype("<i8", copy=False)),
            "names": self.names,
            "project": encode(self.project.astype("<u4", copy=False)),
            "channel": encode(self.channel.astype("<u4", copy=False)),
        }

    def rows(self) -> Iterator[Row]:
        names = self.names
        for ref, p, c, q, text in zip(
            self.refs, self.project.tolist(), self.channel.tolist(), self.seq.tolist(), self.texts, strict=True
        ):
            yield ref, names[p], names[c], q, text


def rows_of(body: dict[str, Any]) -> dict[str, SnapshotRows]:
    """Each agent's rows in a lexical snapshot of any version this one loads (2, 3 or 4)."""
    agents: dict[str, Any] = body["agents"]
    if body.get("version") == 4:
        return {agent: SnapshotRows.of_json(cols) for agent, cols in agents.items()}
    return {agent: SnapshotRows.of_lists(rows) for agent, rows in agents.items()}
