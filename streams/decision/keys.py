"""The keys content dedup compares: a digest of the text and the id of its source."""

from __future__ import annotations

import hashlib


def source_id_of(source: object) -> str:
    """The part of a source that content dedup compares: its id (``""`` when anonymous)."""
    return str(source.get("id") or "") if isinstance(source, dict) else ""


def content_key(content: str) -> bytes:
    """Content dedup compares a 128-bit digest, so the fold never holds the texts."""
    return hashlib.blake2b(content.encode("utf-8", "surrogatepass"), digest_size=16).digest()
