"""A checkpoint's body serialised in pieces is byte for byte ``orjson.dumps`` of it."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.streams.json_pieces import dumps_in_pieces

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(),
)
bodies = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=9), st.dictionaries(st.text(max_size=4), inner, max_size=9)),
    max_leaves=80,
)


@settings(max_examples=200, deadline=None)
@given(bodies, st.integers(min_value=1, max_value=4))
def test_pieces_are_the_same_bytes(body: Any, piece: int) -> None:
    assert dumps_in_pieces(body, piece) == orjson.dumps(body)


@settings(max_examples=150, deadline=None)
@given(bodies, st.integers(min_value=1, max_value=6))
def test_long_containers_judged_by_their_first_items_are_the_same_bytes(body: Any, piece: int) -> None:
    from memstream.streams import json_pieces

    few = json_pieces.FEW
    json_pieces.FEW = 1  # every container past one item takes the path of long ones
    try:
        assert dumps_in_pieces(body, piece) == orjson.dumps(body)
    finally:
        json_pieces.FEW = few


def test_a_large_body_is_cut_into_pieces_of_at_most_the_bound() -> None:
    """Each orjson call (each piece) serialises at most ``piece`` items of a container."""
    body = {"agents": {"big": {"commands": [[f"c{i}", ["memory.stored", i]] for i in range(5_000)]}}, "n": 1}
    out = dumps_in_pieces(body, 100)
    assert out == orjson.dumps(body)
    from memstream.streams import json_pieces

    sizes: list[int] = []
    real = json_pieces.orjson.dumps

    class Counting:
        @staticmethod
        def dumps(v: Any) -> bytes:
            sizes.append(len(v) if isinstance(v, (list, dict)) else 1)
            return real(v)

    json_pieces.orjson = Counting  # type: ignore[assignment]
    try:
        assert dumps_in_pieces(body, 100) == out
    finally:
        json_pieces.orjson = orjson
    assert max(sizes) <= 100
    assert len(sizes) >= 50


def test_a_long_list_of_rows_comes_out_as_many_small_pieces() -> None:
    """A writer takes the pieces as they come (a checkpoint hashes and writes each): a list of
    many light rows must not come out as one piece, which held a 1M-row read model's JSON whole."""
    from memstream.streams.json_pieces import pieces

    body = {"agents": {"a": [[f"mem:{i}", "", "", i, f"text {i}"] for i in range(20_000)]}}
    out = list(pieces(body, 600))
    assert b"".join(out) == orjson.dumps(body)
    assert len(out) >= 20_000 * 6 // 600
    assert max(map(len, out)) < 0.02 * sum(map(len, out))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=700), max_size=4), st.integers(min_value=1, max_value=3))
def test_long_strings_cut_into_pieces_are_the_same_bytes(texts: list[str], piece: int) -> None:
    body = {"columns": texts, "one": texts[0] if texts else ""}
    assert dumps_in_pieces(body, piece) == orjson.dumps(body)


def test_long_strings_come_out_in_small_pieces() -> None:
    """A snapshot's base64 columns are strings of megabytes (the decision state's content keys:
    21 MB at 1M memories); weighed as nothing, they all went into one piece together."""
    from memstream.streams.json_pieces import CHARS, pieces

    body = {"n": 3, "ids": "A" * 400_000, "keys": "B" * 600_000, "more": {"x": "C" * 200_000}}
    out = list(pieces(body, 100))
    assert b"".join(out) == orjson.dumps(body)
    assert max(map(len, out)) <= 100 * CHARS + 16
