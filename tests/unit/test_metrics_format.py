"""The metrics text format, without a server."""

from __future__ import annotations

import io
import logging

import pytest


def test_text_format_stays_quiet_per_call() -> None:
    from memstream.api.services.logs import CALLS, configure

    root = logging.getLogger()
    saved = (list(root.handlers), root.level, CALLS.level)
    for h in saved[0]:
        root.removeHandler(h)
    try:
        configure("INFO", fmt="text", stream=io.StringIO())
        assert not CALLS.isEnabledFor(logging.INFO)
        with pytest.raises(ValueError, match="MEMSTREAM_LOG_FORMAT"):
            configure("INFO", fmt="xml")
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])
        CALLS.setLevel(saved[2])
