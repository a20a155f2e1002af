"""Matching values against a search ``filter`` and namespaces against match conditions, as
LangGraph's store documentation describes them (SearchOp.filter, MatchCondition)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_ORDERED = {
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}


def _operator(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    compare = _ORDERED.get(op)
    if compare is None:
        raise ValueError(f"unknown filter operator {op!r}: use $eq, $ne, $gt, $gte, $lt or $lte")
    if value is None or isinstance(value, bool) != isinstance(operand, bool):
        return False
    try:
        return bool(compare(value, operand))
    except TypeError:  # a string against a number, say: no match, as a JSON comparison gives
        return False


def matches(value: Any, wanted: Any) -> bool:
    """Whether a stored value satisfies one filter entry: operators (``{"$gt": 3}``), a nested
    object (each of its keys must match), a list (equal, element by element) or a plain value."""
    if isinstance(wanted, dict):
        if any(isinstance(k, str) and k.startswith("$") for k in wanted):
            return all(_operator(value, op, operand) for op, operand in wanted.items())
        return isinstance(value, dict) and all(matches(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(wanted)
            and all(matches(a, b) for a, b in zip(value, wanted, strict=True))
        )
    return bool(value == wanted)


def passes(value: dict[str, Any], filter: dict[str, Any] | None) -> bool:
    return not filter or all(matches(value.get(key), wanted) for key, wanted in filter.items())


def path_matches(namespace: tuple[str, ...], path: Sequence[str], *, suffix: bool) -> bool:
    """A prefix (or suffix) condition; ``"*"`` matches any one label."""
    if len(namespace) < len(path):
        return False
    part = namespace[len(namespace) - len(path) :] if suffix else namespace[: len(path)]
    return all(p == "*" or p == label for label, p in zip(part, path, strict=True))
