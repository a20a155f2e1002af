"""The master key of the Kafka deployments the tests start (docs/security.md, "Master key").

Kafka mode refuses to start without one, and every process of a deployment must hold the same
key, so each process a test starts gets it unless the caller's environment names one already.
Fixed, so a test can open a topic dump with it.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping

TEST_MASTER_KEY = base64.b64encode(bytes(range(32))).decode()
VARIABLES = ("MEMSTREAM_MASTER_KEY", "MEMSTREAM_MASTER_KEY_FILE")


def with_master_key(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment plus ``extra``, holding the test master key when neither
    names one."""
    env = {**os.environ, **(extra or {})}
    if not any(env.get(name) for name in VARIABLES):
        env["MEMSTREAM_MASTER_KEY"] = TEST_MASTER_KEY
    return env
