"""Size limits a write must stay within, set per deployment."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    max_content_chars: int = 100_000
    max_metadata_bytes: int = 64_000
    max_keywords_chars: int = 10_000
