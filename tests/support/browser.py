"""Headless Chromium for the browser tests (the audit page, the console): Debian's Chromium at
/usr/bin/chromium driven by playwright. A test skips without them, unless
MEMSTREAM_REQUIRE_BROWSER is set, when it fails instead; nothing is installed here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")


def browser_or_skip() -> None:
    """Skip unless playwright and Chromium are there (fail instead with MEMSTREAM_REQUIRE_BROWSER)."""
    required = bool(os.environ.get("MEMSTREAM_REQUIRE_BROWSER"))
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        if required:
            raise
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    if not CHROMIUM.exists():
        if required:
            pytest.fail(f"MEMSTREAM_REQUIRE_BROWSER is set but {CHROMIUM} is missing (infra/install-chromium.sh)")
        pytest.skip(f"{CHROMIUM} is missing: run infra/install-chromium.sh (or set MEMSTREAM_REQUIRE_BROWSER)")


def launch(pw: Any) -> Any:
    """A headless Chromium that talks to nothing but the pages it is sent to."""
    return pw.chromium.launch(
        executable_path=str(CHROMIUM),
        headless=True,
        args=[
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ],
    )
