"""Deterministic hash embedders: tests measure memstream, not a neural model's load time."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"\w+", re.UNICODE)


class HashEmbedder:
    """Feature-hashed bag of words: deterministic, instant, and similar texts share dimensions.
    Tests use it so that what they measure is memstream, not a neural model's load time."""

    model_id = "test-hash-64"
    dim = 64
    salt = b""

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                h = int.from_bytes(hashlib.blake2b(self.salt + word.encode(), digest_size=4).digest(), "little")
                out[i, h % self.dim] += 1.0 if (h >> 16) & 1 else -1.0
            norm = np.linalg.norm(out[i])
            out[i] = out[i] / norm if norm else 1.0 / np.sqrt(self.dim)
        return out


class SecondHashEmbedder(HashEmbedder):
    """Another model (48-d, other hash salt) for re-embedding tests: its vectors are not
    comparable with HashEmbedder's, as two real models' would not be."""

    model_id = "test-hash-b"
    dim = 48
    salt = b"b:"
