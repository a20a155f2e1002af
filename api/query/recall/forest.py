"""Boosted regression trees over the second stage's signals, evaluated in numpy.

The linear model (rerank.py) weighs each signal on its own. A few dozen shallow trees fitted on
top of its scores (LambdaMART with the linear score as the start, ``bench/rerank_fit.py --trees``)
add what signals say together, such as a neighbour's cosine mattering more for a short reply.
Every candidate of a recall is scored at once: the trees' nodes are flat arrays and all trees
descend together, one level per step, so the cost is a few numpy calls per level, not a Python
loop per candidate and tree. Why and what it gains: docs/eval.md, "Seventh pass".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# One node: (feature, threshold, left, right, value), children indexed within its tree. A split
# sends a row left when its feature is <= threshold; a leaf has feature -1 and only its value.
Node = tuple[int, float, int, int, float]


class Forest:
    """The sum of the trees' outputs for each row."""

    def __init__(self, trees: Sequence[Sequence[Node]]) -> None:
        self.trees = tuple(tuple(t) for t in trees)
        feature: list[int] = []
        threshold: list[float] = []
        left: list[int] = []
        right: list[int] = []
        value: list[float] = []
        roots: list[int] = []
        for tree in self.trees:
            base = len(feature)
            roots.append(base)
            for i, (f, t, lo, hi, v) in enumerate(tree):
                leaf = f < 0
                feature.append(0 if leaf else f)
                # a leaf sends every row to itself: its threshold lets all pass to "left"
                threshold.append(np.inf if leaf else t)
                left.append(base + (i if leaf else lo))
                right.append(base + (i if leaf else hi))
                value.append(v)
        self._feature = np.array(feature, dtype=np.int64)
        self._threshold = np.array(threshold, dtype=np.float64)
        self._left = np.array(left, dtype=np.int64)
        self._right = np.array(right, dtype=np.int64)
        self._value = np.array(value, dtype=np.float64)
        self._roots = np.array(roots, dtype=np.int64)
        self._depth = max((_depth(t, 0) for t in self.trees), default=0)

    def __len__(self) -> int:
        return len(self.trees)

    def scores(self, x: np.ndarray) -> np.ndarray:
        """Each row's summed output; ``x`` is (rows, features)."""
        if not self.trees or not len(x):
            return np.zeros(len(x))
        at = np.broadcast_to(self._roots, (len(x), len(self._roots))).copy()
        rows = np.arange(len(x))[:, None]
        for _ in range(self._depth):
            go_left = x[rows, self._feature[at]] <= self._threshold[at]
            at = np.where(go_left, self._left[at], self._right[at])
        return self._value[at].sum(axis=1)


def _depth(tree: Sequence[Node], i: int) -> int:
    f, _, lo, hi, _ = tree[i]
    return 0 if f < 0 else 1 + max(_depth(tree, lo), _depth(tree, hi))


def from_lightgbm(dump: Mapping[str, Any]) -> list[list[Node]]:
    """The trees of a LightGBM ``Booster.dump_model()`` as ``Node`` lists (numerical splits
    with ``<=`` only; the signals have no missing values)."""
    out = []
    for info in dump["tree_info"]:
        nodes: list[Node] = []
        _walk(info["tree_structure"], nodes)
        out.append(nodes)
    return out


def _walk(n: Mapping[str, Any], nodes: list[Node]) -> int:
    """Append ``n``'s subtree to ``nodes`` in pre-order; its index."""
    i = len(nodes)
    if "leaf_value" in n:
        nodes.append((-1, 0.0, -1, -1, float(n["leaf_value"])))
        return i
    if n.get("decision_type", "<=") != "<=":
        raise ValueError(f"unsupported split {n.get('decision_type')}")
    nodes.append((0, 0.0, -1, -1, 0.0))
    lo = _walk(n["left_child"], nodes)
    hi = _walk(n["right_child"], nodes)
    nodes[i] = (int(n["split_feature"]), float(n["threshold"]), lo, hi, 0.0)
    return i
