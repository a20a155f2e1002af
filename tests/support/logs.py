"""The process's logging set-up, taken apart for a test and put back as it was."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from memstream.api.services.logs import CALLS


@contextlib.contextmanager
def isolated_logging() -> Iterator[None]:
    """Root handlers and levels (and the call logger's) are removed for the block and restored
    after it, so a test can run the CLI's ``configure`` without leaking handlers into others."""
    root = logging.getLogger()
    handlers, level, calls_level = list(root.handlers), root.level, CALLS.level
    for h in handlers:
        root.removeHandler(h)
    try:
        yield
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in handlers:
            root.addHandler(h)
        root.setLevel(level)
        CALLS.setLevel(calls_level)
