"""Term -> int32 lists that a checkpoint loads packed (one CSR) and unpacks one key at a time.

A restart at 1M memories spent seconds making an ``array`` per term and per gram that most
queries and writes never touch (docs/benchmarks.md, "Restart"). The mapping is a dict of the
unpacked entries (what the fold adds and reads at dict speed) over a packed base: a key of the
base becomes the dict's own, copied out of the CSR, when it is first read or written.
"""

from __future__ import annotations

from _collections_abc import dict_items, dict_keys, dict_values
from array import array
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

import numpy as np

V = TypeVar("V")


def _unpack(flat: np.ndarray, a: int, b: int) -> array:
    out = array("i")
    out.frombytes(flat[a:b].tobytes())
    return out


class Packed(dict[str, V], Generic[V]):
    """The unpacked entries (the dict itself) over a CSR base: ``base`` maps a key not unpacked
    yet to its row of ``ptr``, whose columns are ``cols``. A key is in exactly one of the two.
    As a mapping it is the whole: ``get``, ``[]``, ``in``, ``len`` and iteration see the base
    (``get`` and ``[]`` unpack the key; ``items``, ``keys`` and ``values`` unpack everything).
    ``own`` is the plain dict's ``get``, at C speed, for the fold's hot loop, which unpacks
    itself on a miss."""

    __slots__ = ("base", "cols", "ptr")

    def __init__(self) -> None:
        super().__init__()
        self.base: dict[str, int] = {}
        self.ptr = np.zeros(1, dtype=np.int64)
        self.cols: tuple[np.ndarray, ...] = ()

    def pack(self, keys: list[str], ptr: np.ndarray, cols: tuple[np.ndarray, ...]) -> None:
        """Make the base ``keys`` (row ``i`` of ``ptr`` over ``cols``); the mapping must be empty."""
        if len(self):
            raise ValueError("packed postings go under an empty mapping")
        self.base = dict(zip(keys, range(len(keys)), strict=True))
        if len(self.base) != len(keys):
            raise ValueError("packed keys repeat")
        self.ptr, self.cols = ptr, cols

    def _value(self, row: int) -> V:
        raise NotImplementedError

    def _columns(self, value: V) -> tuple[array, ...]:
        raise NotImplementedError

    def unpack(self, key: str) -> V | None:
        """The entry of ``key`` taken out of the base and made the dict's own (or the one
        already unpacked), or None when neither holds it. Two readers unpacking one key get the
        same entry: it joins the dict (``setdefault``) before it leaves the base."""
        row = self.base.get(key)
        if row is None:
            return dict.get(self, key)
        value: V = dict.setdefault(self, key, self._value(row))
        self.base.pop(key, None)
        return value

    own = dict.get

    def get(self, key: str, default: Any = None) -> Any:
        value = dict.get(self, key)
        if value is None:
            value = self.unpack(key)
        return default if value is None else value

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or key in self.base

    def __len__(self) -> int:
        return dict.__len__(self) + len(self.base)

    def __iter__(self) -> Iterator[str]:
        yield from dict.__iter__(self)
        yield from self.base

    def items(self) -> dict_items[str, V]:
        self.unpack_all()
        return dict.items(self)

    def keys(self) -> dict_keys[str, V]:
        self.unpack_all()
        return dict.keys(self)

    def values(self) -> dict_values[str, V]:
        self.unpack_all()
        return dict.values(self)

    def unpacked(self) -> list[str]:
        """The keys unpacked so far (the rest are ``base``'s)."""
        return list(dict.__iter__(self))

    def __missing__(self, key: str) -> V:
        value = self.unpack(key)
        if value is None:
            raise KeyError(key)
        return value

    def __delitem__(self, key: str) -> None:
        packed = self.base.pop(key, None) is not None
        if dict.__contains__(self, key):
            dict.__delitem__(self, key)
        elif not packed:
            raise KeyError(key)

    def unpack_all(self) -> None:
        for key in list(self.base):
            self.unpack(key)
        self.ptr, self.cols = np.zeros(1, dtype=np.int64), ()

    def buffers(self, key: str) -> tuple[memoryview | array | np.ndarray, ...]:
        """The columns of ``key`` without unpacking it (views into the base: do not keep them)."""
        row = self.base.get(key)
        if row is None:
            return self._columns(dict.__getitem__(self, key))
        a, b = int(self.ptr[row]), int(self.ptr[row + 1])
        return tuple(c[a:b] for c in self.cols)


class Postings(Packed[tuple[array, array]]):
    """BM25 postings: term -> (ascending slots, term frequencies)."""

    __slots__ = ()

    def _value(self, row: int) -> tuple[array, array]:
        a, b = int(self.ptr[row]), int(self.ptr[row + 1])
        return _unpack(self.cols[0], a, b), _unpack(self.cols[1], a, b)

    def _columns(self, value: tuple[array, array]) -> tuple[array, ...]:
        return value


class GramIds(Packed[array]):
    """The keyword n-gram index: gram -> ascending word ids."""

    __slots__ = ()

    def _value(self, row: int) -> array:
        return _unpack(self.cols[0], int(self.ptr[row]), int(self.ptr[row + 1]))

    def _columns(self, value: array) -> tuple[array, ...]:
        return (value,)
