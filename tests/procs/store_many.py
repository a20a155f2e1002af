"""One of several processes sharing a data directory: store the given msg_ids for one agent
and print every answer as a JSON line.

Usage: python tests/procs/store_many.py DATA_DIR WORKER_NUMBER COUNT
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from memstream.api import tools as _tools  # noqa: F401
from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import load_settings
from memstream.api.tools.dispatch import dispatch
from memstream.api.tools.registry import Caller
from tests.support.embedders import HashEmbedder


async def main(data_dir: str, worker: int, count: int) -> None:
    engine = EmbeddedEngine(load_settings(data_dir=Path(data_dir)), embedder=HashEmbedder())
    await engine.start()
    try:
        caller = Caller(client_id=f"worker-{worker}")
        calls = [
            dispatch(
                engine, caller, "store", {"agent_id": "shared", "id": f"msg-{i}", "content": f"w{worker} says {i}"}
            )
            for i in range(count)
        ]
        for answer in await asyncio.gather(*calls):
            sys.stdout.write(orjson.dumps(answer).decode() + "\n")
    finally:
        await engine.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
