"""The usearch HNSW graph of one (agent, model): derived data (never state), extended in batches."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from memstream.projections.vectors.segment import Segment


def usearch_index() -> Any:
    """usearch's Index class, imported only when a graph is first needed.

    onnxruntime (the default embedder's runtime) is imported first when it is installed:
    importing it *after* usearch's compiled module crashes the process (SIGSEGV at import,
    usearch 2.26.6 + onnxruntime 1.31.1 on this machine), and the engine loads its embedder
    lazily, so a graph built during restore would otherwise take the server down at the first
    store. The other order is fine.
    """
    with contextlib.suppress(ImportError):
        import onnxruntime  # noqa: F401
    from usearch.index import Index

    return Index


@dataclass(frozen=True, slots=True)
class HnswConfig:
    dtype: str = "f16"
    connectivity: int = 16
    expansion_add: int = 128
    expansion_search: int = 64


class Graph:
    """usearch HNSW over one (agent, model): both kinds, keyed by ``row_key``."""

    __slots__ = ("index", "pending", "removed")

    def __init__(self) -> None:
        self.index: Any = None
        self.pending: set[int] = set()
        self.removed = 0


def new_index(dim: int, config: HnswConfig) -> Any:
    """An empty usearch index of ``dim`` components, cosine, with ``config``'s settings."""
    return usearch_index()(
        ndim=dim,
        metric="cos",
        dtype=config.dtype,
        connectivity=config.connectivity,
        expansion_add=config.expansion_add,
        expansion_search=config.expansion_search,
    )


def add_pending(g: Graph, dim: int, segments: Sequence[Segment], config: HnswConfig) -> bool:
    """Add the graph's pending rows (found in ``segments``, the model's, in kind order), creating
    its index first when it has none; True when it did."""
    keys = np.fromiter(g.pending, dtype=np.int64, count=len(g.pending))
    keys.sort()
    built = False
    if g.index is None:
        g.index = new_index(dim, config)
        g.removed = 0
        built = True
    step = 65_536
    for seg in segments:
        kk = keys[(keys & 1) == seg.kind]
        for a in range(0, len(kk), step):
            part = kk[a : a + step]
            pos = np.fromiter((seg.at(k) for k in part.tolist()), dtype=np.int64, count=len(part))
            g.index.add(part.astype(np.uint64), seg.gather(pos), threads=0)
    g.pending.clear()
    return built
