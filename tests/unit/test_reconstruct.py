"""Reconstruct's pure budget cut: a larger budget only lengthens the prefix. Reconstruct on an
in-process engine (golden outputs, rebuild, declare-then-retract): tests/system/test_reconstruct_engine.py."""

from __future__ import annotations

from typing import Any

from memstream.api.query.reconstruct import core

# -- the pure budget cut --------------------------------------------------------------------------


def _entries(sizes: list[tuple[int, list[int]]]) -> list[core.Entry]:
    return [
        (
            {"head_ref": f"mem:{i}", "claims": []},
            {"content": "h" * h},
            [{"ref": f"x{i}{j}", "content": "e" * e} for j, e in enumerate(ex)],
        )
        for i, (h, ex) in enumerate(sizes)
    ]


def test_budget_only_lengthens_the_prefix() -> None:
    entries = _entries([(300, [100, 50]), (200, [80]), (400, [])])
    assert core.sequence(entries) == [(0, -1), (1, -1), (2, -1), (0, 0), (1, 0), (0, 1)]
    previous: list[dict[str, Any]] = []
    for budget in range(0, 1300, 25):
        items, used = core.allocate(entries, core.steps_within(entries, budget))
        assert len(items) >= 1 and (used <= budget or len(items) == 1)
        assert len(items) >= len(previous)
        for old, new in zip(previous, items, strict=False):
            assert len(new.get("excerpts", [])) >= len(old.get("excerpts", []))
        previous = items
    assert core.largest_fitting(6, lambda n: n <= 4) == 4 and core.largest_fitting(6, lambda n: False) == 0
