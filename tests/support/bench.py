"""Loading a bench script (bench/*.py) as a module, for the tests of its own logic."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def bench_module(name: str, path: Path) -> Any:
    """The script at ``path`` as module ``name``, loaded once per session, with bench/ on
    ``sys.path`` for the helpers the bench scripts import (corpora, agent_notes)."""
    if str(REPO / "bench") not in sys.path:
        sys.path.insert(0, str(REPO / "bench"))
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
