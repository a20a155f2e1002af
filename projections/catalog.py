"""The read models the engine serves, each under its name, with the factory that makes a fresh one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Final, Generic, TypeVar

from memstream.projections.associations import AssociationsProjection
from memstream.projections.history import HistoryProjection
from memstream.projections.lexical import LexicalProjection
from memstream.projections.precision import PrecisionProjection
from memstream.projections.records import EpisodesProjection, MemoriesProjection, ProfilesProjection
from memstream.projections.runner import Projection, ProjectionFactory
from memstream.projections.standings import StandingsProjection
from memstream.projections.vectors import VectorProjection
from memstream.projections.versions import VersionsProjection
from memstream.streams.snapshots import SnapshotStore

P = TypeVar("P", bound=Projection, covariant=True)


@dataclass(frozen=True, slots=True)
class ReadModel(Generic[P]):
    """A read model: its name, its type, and how to make a fresh one. ``make`` takes the store
    where read models with binary state (vectors) keep their sidecar files (None: no sidecars)."""

    name: str
    kind: type[P]
    make: Callable[[SnapshotStore | None], P]


MEMORIES: Final = ReadModel("memories", MemoriesProjection, lambda _: MemoriesProjection())
EPISODES: Final = ReadModel("episodes", EpisodesProjection, lambda _: EpisodesProjection())
PROFILES: Final = ReadModel("profiles", ProfilesProjection, lambda _: ProfilesProjection())
HISTORY: Final = ReadModel("history", HistoryProjection, lambda _: HistoryProjection())
PRECISION: Final = ReadModel("precision", PrecisionProjection, lambda _: PrecisionProjection())
VECTORS: Final = ReadModel("vectors", VectorProjection, lambda blobs: VectorProjection(blobs=blobs))
LEXICAL: Final = ReadModel("lexical", LexicalProjection, lambda _: LexicalProjection())
ASSOCIATIONS: Final = ReadModel("associations", AssociationsProjection, lambda _: AssociationsProjection())
STANDINGS: Final = ReadModel("standings", StandingsProjection, lambda _: StandingsProjection())
VERSIONS: Final = ReadModel("versions", VersionsProjection, lambda _: VersionsProjection())

# Every read model the engine serves, in the order they fold each event.
CATALOG: Final[tuple[ReadModel[Projection], ...]] = (
    MEMORIES,
    EPISODES,
    PROFILES,
    HISTORY,
    PRECISION,
    VECTORS,
    LEXICAL,
    ASSOCIATIONS,
    STANDINGS,
    VERSIONS,
)


def factories(snapshots: SnapshotStore | None = None) -> list[ProjectionFactory]:
    """A factory per read model, for a runner (which rebuilds from it a model whose checkpoint
    cannot be loaded)."""
    return [partial(model.make, snapshots) for model in CATALOG]


def read_models(snapshots: SnapshotStore | None = None) -> list[Projection]:
    """Fresh instances of every read model, in catalog order."""
    return [model.make(snapshots) for model in CATALOG]
