"""The one exception type the embedder layer raises for operational failures."""

from __future__ import annotations

__all__ = ["EmbeddingError"]


class EmbeddingError(Exception):
    """An embedder could not be loaded or could not produce valid vectors.

    Raised for: unknown embedder names or missing model packages, unreachable or timing-out
    embedding servers, non-2xx responses, malformed JSON, a wrong number of vectors, a wrong or
    inconsistent dimension, and non-finite values. Programming errors (passing a single ``str``
    instead of a sequence, non-string items) raise ``TypeError`` instead.
    """
