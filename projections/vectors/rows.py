"""How a record is keyed: one integer per memory or episode of an agent, and its ref."""

from __future__ import annotations

from typing import Final

MEM: Final = 0
EP: Final = 1
KIND_OF: Final = {"mem": MEM, "ep": EP}
PREFIX: Final = ("mem:", "ep:")

Hit = tuple[str, float]  # (ref, cosine)


def row_key(kind: int, ident: int) -> int:
    """One integer per record of an agent (also the graph's key): ``id << 1 | kind``."""
    return (ident << 1) | kind


def ref_of(key: int) -> str:
    return f"{PREFIX[key & 1]}{key >> 1}"
