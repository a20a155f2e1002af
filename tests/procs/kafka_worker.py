"""``memstream worker`` as a deployment runs it, with the tests' hash embedder registered.

Usage: python tests/procs/kafka_worker.py WORKER_ARGS...
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from memstream.api.cli.commands import main
from memstream.api.services.embedding import register_embedder
from tests.support.embedders import HashEmbedder, SecondHashEmbedder

if __name__ == "__main__":
    register_embedder(HashEmbedder.model_id, HashEmbedder)
    register_embedder(SecondHashEmbedder.model_id, SecondHashEmbedder)  # a model to re-embed to
    os.environ["MEMSTREAM_EMBEDDER"] = HashEmbedder.model_id
    main(["--log-level", "WARNING", "worker", *sys.argv[1:]])
