"""The docs' path check (infra/check_paths.py): which strings of prose count as repository paths."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "check_paths", Path(__file__).resolve().parents[2] / "infra" / "check_paths.py"
)
assert _spec is not None and _spec.loader is not None
check_paths = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_paths)


def test_paths_in_prose_are_found_without_their_punctuation() -> None:
    text = "See `api/services/engine.py`, and docs/eval.md.\nThe tree: streams/log/ (port)."
    assert check_paths.references(text) == [
        (1, "api/services/engine.py"),
        (1, "docs/eval.md"),
        (2, "streams/log/"),
    ]


def test_globs_templates_and_embedded_words_are_not_paths() -> None:
    text = "tests/*.py bench/results/<name>.json memstream.api/x my_api/services.py ./api/x"
    assert check_paths.references(text) == []
