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
class ReadModelOptions:
    """How the read models are built. ``vector_graphs``: keep an HNSW graph per (agent, model)
    for the vector far list. Only a recall with a reach past the window searches it
    (MEMSTREAM_VECTOR_REACH above the window), and it is most of a rebuild's time and of the vectors'
    memory (docs/vectors.md). Without graphs a far list is searched exactly."""

    vector_graphs: bool = True


DEFAULTS: Final = ReadModelOptions()


@dataclass(frozen=True, slots=True)
class ReadModel(Generic[P]):
    """A read model: its name, its type, and how to make a fresh one. ``make`` takes the store
    where read models with binary state (vectors) keep their sidecar files (None: no sidecars)
    and the options the read models are built with."""

    name: str
    kind: type[P]
    make: Callable[[SnapshotStore | None, ReadModelOptions], P]


MEMORIES: Final = ReadModel("memories", MemoriesProjection, lambda _, __: MemoriesProjection())
EPISODES: Final = ReadModel("episodes", EpisodesProjection, lambda _, __: EpisodesProjection())
PROFILES: Final = ReadModel("profiles", ProfilesProjection, lambda _, __: ProfilesProjection())
HISTORY: Final = ReadModel("history", HistoryProjection, lambda _, __: HistoryProjection())
PRECISION: Final = ReadModel("precision", PrecisionProjection, lambda _, __: PrecisionProjection())
VECTORS: Final = ReadModel(
    "vectors", VectorProjection, lambda blobs, opts: VectorProjection(blobs=blobs, hnsw=opts.vector_graphs)
)
LEXICAL: Final = ReadModel("lexical", LexicalProjection, lambda blobs, _: LexicalProjection(blobs))
ASSOCIATIONS: Final = ReadModel("associations", AssociationsProjection, lambda _, __: AssociationsProjection())
STANDINGS: Final = ReadModel("standings", StandingsProjection, lambda _, __: StandingsProjection())
VERSIONS: Final = ReadModel("versions", VersionsProjection, lambda _, __: VersionsProjection())

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


def factories(snapshots: SnapshotStore | None = None, options: ReadModelOptions = DEFAULTS) -> list[ProjectionFactory]:
    """A factory per read model, for a runner (which rebuilds from it a model whose checkpoint
    cannot be loaded)."""
    return [partial(model.make, snapshots, options) for model in CATALOG]


def read_models(snapshots: SnapshotStore | None = None, options: ReadModelOptions = DEFAULTS) -> list[Projection]:
    """Fresh instances of every read model, in catalog order."""
    return [model.make(snapshots, options) for model in CATALOG]
