"""The read models a recall reads, declared here so query logic needs nothing above it: every
engine surface (the embedded engine, a Kafka worker's partition, a point-in-time view) has them."""

from __future__ import annotations

from typing import Any, Protocol, Self

from memstream.api.query.recall.options import RecallSettings
from memstream.projections.lexical import LexicalProjection
from memstream.projections.precision import PrecisionProjection
from memstream.projections.records import (
    EpisodeRow,
    EpisodesProjection,
    MemoriesProjection,
    MemoryRow,
    ProfilesProjection,
)
from memstream.projections.vectors import VectorProjection

Row = MemoryRow | EpisodeRow


class RecallModels(Protocol):
    @property
    def memories(self) -> MemoriesProjection: ...

    @property
    def episodes(self) -> EpisodesProjection: ...

    @property
    def profiles(self) -> ProfilesProjection: ...

    @property
    def precision(self) -> PrecisionProjection: ...

    @property
    def vectors(self) -> VectorProjection: ...

    @property
    def lexical(self) -> LexicalProjection: ...


class CopyableSettings(RecallSettings, Protocol):
    """Settings a calibration can copy with one option changed (autocut off for its curve)."""

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Self: ...


class CalibrationSource(RecallModels, Protocol):
    """What a calibration reads: the recall's read models and the settings it recalls under."""

    @property
    def settings(self) -> CopyableSettings: ...
