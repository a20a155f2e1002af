"""Per-agent bookkeeping: the agent's model, its scope buckets, segments, ghosts and graphs."""

from __future__ import annotations

import numpy as np

from memstream.projections.scope import ScopeFilter
from memstream.projections.vectors.graph import Graph
from memstream.projections.vectors.segment import Segment


class Agent:
    """One agent's rows: its model, scope buckets, segments per (model, kind), ghosts and graphs."""

    __slots__ = ("bucket_ids", "bucket_list", "counts", "ghosts", "graphs", "lut_cache", "model", "name", "segs")

    def __init__(self, name: str) -> None:
        self.name = name
        # The model recall searches: the first one a write embedded with, then whatever the
        # last ``embedding.switched`` named (the decider's rule, so both agree on every log).
        self.model: str | None = None
        self.bucket_ids: dict[tuple[str, str], int] = {}
        self.bucket_list: list[tuple[str, str]] = []
        # live rows per bucket (all models, both kinds: a record being re-embedded counts twice)
        self.counts: list[int] = []
        self.segs: dict[tuple[str, int], Segment] = {}
        self.ghosts: dict[int, tuple[int, int]] = {}  # key -> (bucket, recency)
        self.graphs: dict[str, Graph] = {}
        self.lut_cache: dict[tuple[str | None, str | None], np.ndarray | None] = {}

    def bucket(self, project: str, channel: str) -> int:
        b = self.bucket_ids.get((project, channel))
        if b is None:
            b = self.bucket_ids[(project, channel)] = len(self.bucket_list)
            self.bucket_list.append((project, channel))
            self.counts.append(0)
            self.lut_cache.clear()
        return b

    def lut(self, scope: ScopeFilter) -> np.ndarray | None:
        """Admitted buckets as a boolean table; None when the scope admits every bucket."""
        ck = (scope.project_id, scope.channel)
        if ck in self.lut_cache:
            return self.lut_cache[ck]
        table = np.array([scope.admits(p, c) for p, c in self.bucket_list], dtype=np.bool_)
        out = None if table.all() else table
        self.lut_cache[ck] = out
        return out

    def find_all(self, key: int) -> list[Segment]:
        """The segments holding the key: one, or one per model while a re-embed is under way."""
        kind = key & 1
        return [seg for (_, k), seg in self.segs.items() if k == kind and seg.has(key)]

    def model_live(self, model: str) -> int:
        return sum(s.live for (m, _), s in self.segs.items() if m == model)

    def model_keys(self, model: str) -> set[int]:
        """The keys of every row with a vector of ``model``."""
        keys: set[int] = set()
        for (m, _), seg in self.segs.items():
            if m == model:
                keys.update(seg.live_keys())
        return keys
