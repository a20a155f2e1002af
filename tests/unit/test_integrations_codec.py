"""The adapters' JSON content survives what the server does to stored text: any JSON value,
encoded, cleaned as ``store`` and ``update_memory`` clean content (annotations stripped, the
ends trimmed), decodes to the value that was put."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.api.tools.sanitize import clean_text
from memstream.integrations.codec import decode, encode

# Text that looks like the annotations the server strips, mixed with anything else.
texts = st.one_of(
    st.text(),
    st.builds(lambda a, b: f"{a}[Memory from {b}]{a}", st.text(max_size=8), st.text(max_size=8)),
    st.sampled_from(["[Memory from x]", "\\[Memory from y]", "[Memory from", " padded "]),
)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), texts
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(texts, values, max_size=5))
def test_a_value_survives_the_servers_cleaning(value: dict[str, Any]) -> None:
    assert decode(clean_text(encode(value))) == value


def test_annotation_text_is_kept_verbatim() -> None:
    value = {"note": "[Memory from bob] stays", "k[Memory from c]": ["[Memory from d]"]}
    assert "[Memory from" not in encode(value)
    assert decode(clean_text(encode(value))) == value


@pytest.mark.parametrize("bad", [math.nan, math.inf, {1, 2}, object()])
def test_what_json_cannot_hold_is_refused(bad: Any) -> None:
    with pytest.raises((ValueError, TypeError)):
        encode({"v": bad})
