"""The settings a recall reads, declared here so query logic needs nothing above it: the
service's ``Settings`` (api/services/settings.py) has each under the same name and type."""

from __future__ import annotations

from typing import Literal, Protocol


class RecallSettings(Protocol):
    """Retrievers, fusion, confidence, the episode prior and autocut (each explained in Settings)."""

    @property
    def recall_mode(self) -> Literal["rrf", "rsf", "cascade"]: ...

    @property
    def recall_retrievers(self) -> Literal["all", "vector", "lexical"]: ...

    @property
    def max_memories(self) -> int: ...

    @property
    def vector_reach(self) -> int: ...

    @property
    def vector_far_limit(self) -> int: ...

    @property
    def vector_min_similarity(self) -> float: ...

    @property
    def rrf_k(self) -> int: ...

    @property
    def rrf_evidence(self) -> bool: ...

    @property
    def rrf_lexical_weight(self) -> float: ...

    @property
    def recall_neighbour_weight(self) -> float: ...

    @property
    def recall_speaker_boost(self) -> float: ...

    @property
    def recall_rerank(self) -> Literal["learned", "off"]: ...

    @property
    def confidence_enabled(self) -> bool: ...

    @property
    def confidence_ordering(self) -> Literal["fusion", "legacy"]: ...

    @property
    def episode_penalty_enabled(self) -> bool: ...

    @property
    def episode_decay_rate(self) -> float: ...

    @property
    def episode_decay_floor(self) -> float: ...

    @property
    def autocut_enabled(self) -> bool: ...

    @property
    def autocut_min_gap_ratio(self) -> float: ...

    @property
    def autocut_min_results(self) -> int: ...
