"""The embedding variables a shell may set, which tests of the embedder layer clear first."""

from __future__ import annotations

ENV_VARS = (
    "MEMSTREAM_EMBEDDING_URL",
    "MEMSTREAM_EMBEDDER",
    "MEMSTREAM_EMBEDDING_MODEL_ID",
    "MEMSTREAM_EMBEDDING_DIM",
    "MEMSTREAM_EMBEDDING_TIMEOUT",
    "MEMSTREAM_EMBEDDING_SPIN",
)
