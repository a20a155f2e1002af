"""A fold's read models under their names, looked up once: what a view or a Kafka worker's engine
serves as the ``ReadModels`` of api/services/ports.py."""

from __future__ import annotations

from collections.abc import Sequence

from memstream.api.services.ports import SupersededProvider
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
from memstream.projections.runner import Projection, pick
from memstream.projections.standings import StandingsProjection
from memstream.projections.vectors import VectorProjection
from memstream.projections.versions import VersionsProjection


class NamedModels:
    """The read models of ``projections`` (an engine's, fresh ones folded to a point, or a
    partition's), each under its name (projections/catalog.py), as plain attributes: the reads'
    hot paths touch them many times per call."""

    def __init__(self, projections: Sequence[Projection]) -> None:
        self.bind(projections)

    def bind(self, projections: Sequence[Projection]) -> None:
        """Look the read models up again (a runner replaces one whose checkpoint was unusable)."""
        by_name = {p.name: p for p in projections}
        self.memories: MemoriesProjection = pick(by_name, MEMORIES)
        self.episodes: EpisodesProjection = pick(by_name, EPISODES)
        self.profiles: ProfilesProjection = pick(by_name, PROFILES)
        self.history: HistoryProjection = pick(by_name, HISTORY)
        self.precision: PrecisionProjection = pick(by_name, PRECISION)
        self.vectors: VectorProjection = pick(by_name, VECTORS)
        self.lexical: LexicalProjection = pick(by_name, LEXICAL)
        self.associations: AssociationsProjection = pick(by_name, ASSOCIATIONS)
        self.standings: StandingsProjection = pick(by_name, STANDINGS)
        self.versions: VersionsProjection = pick(by_name, VERSIONS)

    def superseded_providers(self) -> list[SupersededProvider]:
        """Every source of "this record is superseded by that one" a packet consults
        (``api.query.context.packet.superseded_refs`` merges them). Today: newer versions under the
        same msg_id, and declared ``X supersedes Y`` relations."""
        return [self.versions.superseded_by, self.associations.superseded_by]
