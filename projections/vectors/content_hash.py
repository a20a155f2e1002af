"""The content hash's terms: a sha256 per row, ghost and agent model, summed modulo 2^256."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from typing import Final

import numpy as np

MOD: Final = 1 << 256


def _enc(text: str) -> bytes:
    raw = text.encode("utf-8", "surrogatepass")
    return struct.pack("<I", len(raw)) + raw


def row_hash(key: int, agent: str, bucket: tuple[str, str], model: str, recency: int, vec: bytes) -> int:
    h = hashlib.sha256(b"row")
    h.update(struct.pack("<qq", key, recency))
    h.update(_enc(agent) + _enc(bucket[0]) + _enc(bucket[1]) + _enc(model))
    h.update(vec)
    return int.from_bytes(h.digest(), "little")


def row_hash_sum(
    agent: str,
    buckets: list[tuple[str, str]],
    model: str,
    keys: np.ndarray,
    recencies: np.ndarray,
    bucket_of: np.ndarray,
    vecs: Iterable[bytes],
) -> int:
    """The sum (not reduced) of ``row_hash`` over many rows of one agent and model, each
    bucket's names encoded once: an erasure subtracts up to all of an agent's rows."""
    names: dict[int, bytes] = {}
    total = 0
    pack = struct.Struct("<qq").pack
    for key, recency, b, vec in zip(keys.tolist(), recencies.tolist(), bucket_of.tolist(), vecs, strict=True):
        enc = names.get(b)
        if enc is None:
            enc = names[b] = _enc(agent) + _enc(buckets[b][0]) + _enc(buckets[b][1]) + _enc(model)
        h = hashlib.sha256(b"row")
        h.update(pack(key, recency))
        h.update(enc)
        h.update(vec)
        total += int.from_bytes(h.digest(), "little")
    return total


def ghost_hash(key: int, agent: str, bucket: tuple[str, str], recency: int) -> int:
    h = hashlib.sha256(b"ghost")
    h.update(struct.pack("<qq", key, recency))
    h.update(_enc(agent) + _enc(bucket[0]) + _enc(bucket[1]))
    return int.from_bytes(h.digest(), "little")


def model_hash(agent: str, model: str) -> int:
    h = hashlib.sha256(b"model")
    h.update(_enc(agent) + _enc(model))
    return int.from_bytes(h.digest(), "little")
