"""A checkpoint's numeric column as base64 text in its JSON, and back, checked for its length."""

from __future__ import annotations

import base64

import numpy as np


def encode(column: np.ndarray | bytes | bytearray) -> str:
    """``column``'s bytes as base64 (an array as it is laid out: give it the dtype to store)."""
    data = column if isinstance(column, bytes | bytearray) else np.ascontiguousarray(column).data
    return base64.b64encode(data).decode("ascii")


def decode(text: str, dtype: str, n: int) -> np.ndarray:
    """The ``n`` entries of ``dtype`` that ``text`` holds (read-only, over the decoded bytes);
    raises ``ValueError`` when it is not base64 or holds another number of entries."""
    column = np.frombuffer(base64.b64decode(text, validate=True), dtype=dtype)
    if column.shape[0] != n:
        raise ValueError(f"column of {column.shape[0]} entries, expected {n}")
    return column
