"""A rebuild's second process that fails (tests/system/test_rebuild_live.py): with
``REBUILD_WORKER_FAILS=raise`` its work raises inside the real ``serve``; with ``die`` it exits
before answering, as a killed process would."""

from __future__ import annotations

import os
import sys
from multiprocessing.connection import Connection
from typing import Any

from memstream.api.services import rebuild_worker


def _fails(*_args: Any) -> rebuild_worker.Outcome:
    raise RuntimeError("the worker's fold failed")


if __name__ == "__main__":
    if os.environ.get("REBUILD_WORKER_FAILS") == "die":
        os._exit(3)
    rebuild_worker.run = _fails
    sys.exit(rebuild_worker.serve(Connection(int(sys.argv[1]))))
