"""The metrics text format, without a server."""

from __future__ import annotations

import io
import logging

import pytest

from memstream.api.services.logs import CALLS, configure
from tests.support.logs import isolated_logging


def test_text_format_stays_quiet_per_call() -> None:
    with isolated_logging():
        configure("INFO", fmt="text", stream=io.StringIO())
        assert not CALLS.isEnabledFor(logging.INFO)
        with pytest.raises(ValueError, match="MEMSTREAM_LOG_FORMAT"):
            configure("INFO", fmt="xml")
