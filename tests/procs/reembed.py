"""``memstream reembed`` as a user runs it, with a test model registered first.

Usage: python tests/procs/reembed.py DATA_DIR [SECONDS_PER_BATCH]

Registers ``test-hash-b`` (a second hash model, 48-d, so its vectors differ from the stores'
64-d ``test-hash-64``), optionally slowed down per model call so a test can kill the process
mid-job, then runs the real CLI command.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from memstream.api.cli.commands import main
from memstream.api.services.embedding import register_embedder
from tests.support.embedders import SecondHashEmbedder


class Slow(SecondHashEmbedder):
    def __init__(self, pause: float) -> None:
        super().__init__()
        self.pause = pause

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        time.sleep(self.pause)  # a slow model, so the job can be killed part-way: the thing under test
        return super().embed(texts)


if __name__ == "__main__":
    pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    register_embedder(SecondHashEmbedder.model_id, lambda: Slow(pause))
    main(["--log-level", "WARNING", "reembed", "--data-dir", sys.argv[1], "--model", "test-hash-b", "--batch", "8"])
