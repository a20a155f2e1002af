"""The BM25 formula (k1 1.2, b 0.75, Lucene's idf): a term's contribution per row, and a row's IDF share."""

from __future__ import annotations

import math
from typing import Final, NamedTuple

import numpy as np

K1: Final = 1.2
B: Final = 0.75


class Term(NamedTuple):
    """One query token that some row holds: its postings (views) and its idf."""

    name: str
    slots: np.ndarray  # ascending
    tf: np.ndarray
    idf: float
    dense: np.ndarray | None  # per-slot tf, for a common term (``pruning.dense_of``)


def idf_of(n_live: int, df: int) -> float:
    """Lucene's BM25 idf: positive for any df up to the row count."""
    return math.log(1.0 + (n_live - df + 0.5) / (df + 0.5))


def held_share(held: list[np.ndarray], idfs: list[float], slots: np.ndarray) -> np.ndarray:
    """Per slot of ``slots``, the summed ``idfs`` of the terms whose ascending slot arrays
    (``held``) contain it, over the sum of all ``idfs``: a binary search per term, no pass over
    the postings. Postings hold each slot at most once per term, in ascending order: slots are
    appended in order and compaction renumbers them monotonically."""
    out = np.zeros(slots.shape[0], dtype=np.float64)
    total = sum(idfs)
    if total <= 0 or not slots.shape[0]:
        return out
    for s, idf in zip(held, idfs, strict=True):
        pos = np.minimum(np.searchsorted(s, slots), s.shape[0] - 1)
        out += idf * (s[pos] == slots)
    return out / total


def contribution(dlen: np.ndarray, slots: np.ndarray, tf: np.ndarray, idf: float, slope: float) -> np.ndarray:
    """idf * (k1 + 1) * tf / (tf + k1 * (1 - b + b * dl / avgdl)) per slot, in place. Both
    top-k paths compute every term's contribution here, with the same operations in the
    same order, so their scores are equal to the last bit."""
    tf64 = tf.astype(np.float64)
    den = dlen[slots]
    den *= slope
    den += K1 * (1.0 - B)
    den += tf64
    np.divide(tf64, den, out=den)
    den *= idf * (K1 + 1.0)
    return den
