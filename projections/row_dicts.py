"""Rows as the plain dicts their snapshots hold, field by field, without ``dataclasses.asdict``'s
deep copies (most of a rebuild's digest time went to them: docs/benchmarks.md).

A row's nested values (a memory's ``metadata`` and ``source``) are shared with the dict, not
copied. That is safe because folds replace them and never change them in place, so a snapshot
captured now (a Kafka worker writes its checkpoint after releasing the models) keeps the state
it was taken at."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import fields, is_dataclass
from operator import attrgetter
from typing import Any, NamedTuple

_READERS: dict[type, tuple[tuple[str, ...], attrgetter[Any]]] = {}


def row_dicts(rows: Iterable[Any]) -> list[dict[str, Any]]:
    """``[asdict(row) for row in rows]`` for rows of flat dataclasses, without the deep copies."""
    out = []
    for row in rows:
        names, read = _reader(type(row))
        out.append(dict(zip(names, read(row), strict=True)))
    return out


def row_lists(rows: Iterable[Any]) -> list[list[Any]]:
    """Rows as lists of their fields in declaration order: a snapshot of many rows parses
    about twice as fast without every row repeating its field names (docs/benchmarks.md, "Restart")."""
    out = []
    for row in rows:
        _, read = _reader(type(row))
        out.append(list(read(row)))
    return out


def field_names(kind: type) -> list[str]:
    """The field names ``row_lists`` writes, in order (a snapshot names them, to be checked on load)."""
    return list(_reader(kind)[0])


def _reader(kind: type) -> tuple[tuple[str, ...], attrgetter[Any]]:
    reader = _READERS.get(kind)
    if reader is None:
        if not is_dataclass(kind):
            raise TypeError(f"{kind.__name__} is not a dataclass")
        names = tuple(f.name for f in fields(kind))
        if len(names) < 2:
            raise TypeError(f"{kind.__name__}: a row needs at least two fields")  # attrgetter returns a tuple
        reader = _READERS[kind] = (names, attrgetter(*names))
    return reader


def coded(values: list[Any], key: Callable[[Any], Any] | None = None) -> list[Any]:
    """``[table, codes]``: the distinct values in order of first use and each row's index in the
    table (equal by ``key(value)`` when given). A column many rows repeat a few values of loads
    by making each value once (docs/benchmarks.md, "Restart")."""
    codes: dict[Any, int] = {}
    table: list[Any] = []
    out = []
    for v in values:
        k = v if key is None else key(v)
        c = codes.get(k)
        if c is None:
            c = codes[k] = len(table)
            table.append(v)
        out.append(c)
    return [table, out]


def decoded(column: list[Any], n: int, make: Callable[[Any], Any] | None = None) -> list[Any]:
    """The values of a ``coded`` column of ``n`` rows, each table value made once by ``make``;
    ``ValueError`` or ``IndexError`` when the column is not ``n`` codes into its table."""
    table, codes = column
    if len(codes) != n:
        raise ValueError(f"a coded column of {len(codes)} rows, not {n}")
    made = table if make is None else [make(v) for v in table]
    return [made[c] for c in codes]


class Coded(NamedTuple):
    """A ``coded`` column as loaded, not decoded: a reader that keeps codes of its own maps the
    table once instead of making (and looking up) a value per row."""

    table: list[Any]
    codes: list[int]

    @classmethod
    def of(cls, column: list[Any], n: int) -> Coded:
        """``ValueError`` when the column is not ``n`` codes into its table (as ``decoded``)."""
        table, codes = column
        if len(codes) != n:
            raise ValueError(f"a coded column of {len(codes)} rows, not {n}")
        if n and (min(codes) < 0 or max(codes) >= len(table)):
            raise ValueError("a coded column names a value past its table")
        return cls(table, codes)
