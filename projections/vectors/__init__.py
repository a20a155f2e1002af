"""The vector read model (``VectorProjection``); how it works: docs/vectors.md."""

from memstream.projections.vectors.graph import HnswConfig
from memstream.projections.vectors.projection import SnapshotRejected, VectorProjection

__all__ = ["HnswConfig", "SnapshotRejected", "VectorProjection"]
