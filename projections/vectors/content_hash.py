"""The content hash's terms: a sha256 per row, ghost and agent model, summed modulo 2^256."""

from __future__ import annotations

import hashlib
import struct
from typing import Final

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


def ghost_hash(key: int, agent: str, bucket: tuple[str, str], recency: int) -> int:
    h = hashlib.sha256(b"ghost")
    h.update(struct.pack("<qq", key, recency))
    h.update(_enc(agent) + _enc(bucket[0]) + _enc(bucket[1]))
    return int.from_bytes(h.digest(), "little")


def model_hash(agent: str, model: str) -> int:
    h = hashlib.sha256(b"model")
    h.update(_enc(agent) + _enc(model))
    return int.from_bytes(h.digest(), "little")
