"""The unit tier stays pure: collection fails when a unit test asks, directly or through another
fixture, for a fixture that does I/O (a temporary directory, settings on a data directory, an
in-process engine, a server or a face). Such a test belongs in tests/system/."""

from __future__ import annotations

from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent
# tmp dirs (pytest's own), and tests/conftest.py's settings -> engine, http_server -> face.
IO_FIXTURES = frozenset(
    {"tmp_path", "tmp_path_factory", "tmpdir", "tmpdir_factory", "settings", "engine", "http_server", "face"}
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    impure = []
    for item in items:
        if not item.path.resolve().is_relative_to(UNIT):
            continue  # this hook sees every item of the session
        asked = IO_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if asked:
            impure.append(f"{item.nodeid} asks for {', '.join(sorted(asked))}")
    if impure:
        raise pytest.UsageError(
            "unit tests must not do I/O; move these to tests/system/ (tests/README.md):\n  " + "\n  ".join(impure)
        )
