"""A record's vector in the file: ``embedding_b64`` (raw little-endian float32, as CPersona writes it)."""

from __future__ import annotations

import base64

import numpy as np

from memstream.streams.events import Embedding


def vector_fields(model: str, blob: bytes) -> dict[str, str]:
    """The keys an exported record carries its vector in."""
    return {"embedding_b64": base64.b64encode(blob).decode("ascii"), "embedding_model": model}


def decode_vector(b64: str, model: str) -> Embedding | None:
    """The vector ``b64`` holds as an embedding of ``model``, or None (not base64, not whole
    float32 components, not finite): the text is then embedded anew."""
    try:
        blob = base64.b64decode(b64, validate=True)
    except ValueError:
        return None
    if not blob or len(blob) % 4:
        return None
    vec = np.frombuffer(blob, dtype="<f4")
    return Embedding.from_vector(model, vec) if np.isfinite(vec).all() else None
