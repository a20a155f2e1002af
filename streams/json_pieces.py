"""``orjson.dumps`` of a large body in pieces, byte for byte the same, so other threads run between.

One ``orjson.dumps`` call holds the interpreter lock from start to end: a checkpoint's body
is megabytes (the decision state's 50,000 command memos of an agent, a read model's rows),
and while an erasure rewrote its checkpoints the other agents' stores, which need the lock
on the event loop and the writer thread, waited 50-80 ms at a time behind the dump of one
(bench/erasure.py --trace). Here each call serialises at most about ``PIECE`` items (of all the
containers in what it is given); between calls the interpreter hands the lock over as usual.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

import orjson

PIECE = 2_000  # items of one list or dict serialised by one call
CHARS = 64  # characters of a string that weigh as much as one item
SAMPLE = 3  # items of a long container whose weight stands for all of them
FEW = 64  # a container of at most this many items has each weighed


def dumps_in_pieces(body: Any, piece: int = PIECE) -> bytes:
    """What ``orjson.dumps(body)`` returns (plain JSON types, string keys), built in pieces."""
    return b"".join(pieces(body, piece))


def pieces(body: Any, piece: int = PIECE) -> Iterator[bytes]:
    """The pieces ``dumps_in_pieces`` joins, made one at a time (a writer can take each as it comes)."""
    return _pieces(body, piece)


def _weight(v: Any, budget: int) -> int:
    """How many items the containers in ``v`` hold, a long string counting as one per ``CHARS``
    characters, counted up to just past ``budget``."""
    n = 0
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, dict)):
            n += len(x)
            stack.extend(x.values() if isinstance(x, dict) else x)
        elif isinstance(x, str):
            n += len(x) // CHARS
        if n > budget:
            return n
    return n


def _per_item(v: list[Any] | dict[str, Any], piece: int) -> float:
    """The weight of one of ``v``'s items, judged by its first few (bodies are uniform: rows,
    columns, memos); a wrong guess only makes a piece larger or smaller, never other bytes."""
    first = v[:SAMPLE] if isinstance(v, list) else list(islice(v.values(), SAMPLE))
    return 1 + sum(_weight(x, piece) for x in first) / max(1, len(first))


def _pieces(v: Any, piece: int) -> Iterator[bytes]:
    if isinstance(v, str) and len(v) > piece * CHARS:
        yield from _string(v, piece * CHARS)
        return
    if not isinstance(v, (list, dict)) or _light(v, piece):
        yield orjson.dumps(v)
        return
    open_, close = (b"{", b"}") if isinstance(v, dict) else (b"[", b"]")
    yield open_
    if len(v) <= FEW:  # a body's upper levels: few items, of any size; each weighed
        yield from _few(v, piece)
    elif (per := int(piece // _per_item(v, piece))) < 1:  # many large items: one at a time
        yield from _few(v, piece, each=True)
    elif isinstance(v, dict):
        items = iter(v.items())
        sep = b""
        while batch := dict(islice(items, per)):
            yield sep + orjson.dumps(batch)[1:-1]
            sep = b","
    else:  # each slice its own piece: joined, a 1M-row list was one 100 MB piece
        for i in range(0, len(v), per):
            yield (b"," if i else b"") + orjson.dumps(v[i : i + per])[1:-1]
    yield close


def _string(v: str, chars: int) -> Iterator[bytes]:
    """A long string (a snapshot's base64 column: 21 MB at 1M memories) ``chars`` at a time:
    JSON escapes each character on its own, so the escaped parts join into the escaped whole."""
    last = len(v) - 1
    for i in range(0, len(v), chars):
        part = orjson.dumps(v[i : i + chars])
        yield part[: None if i + chars > last else -1][0 if i == 0 else 1 :]


def _light(v: list[Any] | dict[str, Any], piece: int) -> bool:
    if len(v) <= FEW:
        return _weight(v, piece) <= piece
    return len(v) * _per_item(v, piece) <= piece


def _few(v: list[Any] | dict[str, Any], piece: int, *, each: bool = False) -> Iterator[bytes]:
    """The items of ``v`` (without its brackets): the light ones together, each heavy one in pieces."""
    items: Iterable[tuple[str | None, Any]] = v.items() if isinstance(v, dict) else ((None, x) for x in v)
    light: list[tuple[str | None, Any]] = []
    held = 0
    sep = b""
    for k, x in items:
        w = piece + 1 if each else _weight(x, piece) + 1
        if held + w > piece and light:
            yield sep + _dump_items(light, isinstance(v, dict))
            sep, light, held = b",", [], 0
        if w > piece:
            yield sep + (b"" if k is None else orjson.dumps(k) + b":")
            yield from _pieces(x, piece)
            sep = b","
        else:
            light.append((k, x))
            held += w
    if light:
        yield sep + _dump_items(light, isinstance(v, dict))


def _dump_items(items: list[tuple[Any, Any]], keyed: bool) -> bytes:
    return orjson.dumps(dict(items) if keyed else [x for _, x in items])[1:-1]
