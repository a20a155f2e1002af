"""A fold's read models under their names, looked up once: what a view or a Kafka worker's engine
serves as the ``ReadModels`` of api/services/ports.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from memstream.projections.associations import AssociationsProjection
from memstream.projections.catalog import (
    ASSOCIATIONS,
    EPISODES,
    HISTORY,
    LEXICAL,
    MEMORIES,
    PRECISION,
    PROFILES,
    STANDINGS,
    VECTORS,
    VERSIONS,
)
from memstream.projections.history import HistoryProjection
from memstream.projections.lexical import LexicalProjection
from memstream.projections.precision import PrecisionProjection
from memstream.projections.records import EpisodesProjection, MemoriesProjection, ProfilesProjection
from memstream.projections.runner import Projection
from memstream.projections.standings import StandingsProjection
from memstream.projections.vectors import VectorProjection
from memstream.projections.versions import VersionsProjection

P = TypeVar("P", bound=Projection)


def _pick(by_name: Mapping[str, Projection], name: str, kind: type[P]) -> P:
    p = by_name[name]
    if not isinstance(p, kind):
        raise TypeError(f"read model {name!r} is a {type(p).__name__}, not a {kind.__name__}")
    return p


class NamedModels:
    """The read models of ``projections`` (fresh ones folded to a point, or a partition's), each
    under its name (projections/catalog.py)."""

    def __init__(self, projections: Sequence[Projection]) -> None:
        by_name = {p.name: p for p in projections}
        self.memories: MemoriesProjection = _pick(by_name, MEMORIES.name, MEMORIES.kind)
        self.episodes: EpisodesProjection = _pick(by_name, EPISODES.name, EPISODES.kind)
        self.profiles: ProfilesProjection = _pick(by_name, PROFILES.name, PROFILES.kind)
        self.history: HistoryProjection = _pick(by_name, HISTORY.name, HISTORY.kind)
        self.precision: PrecisionProjection = _pick(by_name, PRECISION.name, PRECISION.kind)
        self.vectors: VectorProjection = _pick(by_name, VECTORS.name, VECTORS.kind)
        self.lexical: LexicalProjection = _pick(by_name, LEXICAL.name, LEXICAL.kind)
        self.associations: AssociationsProjection = _pick(by_name, ASSOCIATIONS.name, ASSOCIATIONS.kind)
        self.standings: StandingsProjection = _pick(by_name, STANDINGS.name, STANDINGS.kind)
        self.versions: VersionsProjection = _pick(by_name, VERSIONS.name, VERSIONS.kind)
