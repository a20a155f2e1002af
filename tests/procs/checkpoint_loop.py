"""Write snapshots without pause until killed: store a few memories (so every fold, the vector
sidecars included, changes), then checkpoint every read model and the decision state; repeat.
Prints ``ready`` once started, then one JSON line per acknowledged store (its msg_id and id).

Usage: python tests/procs/checkpoint_loop.py DATA_DIR TAG
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


async def main(data_dir: str, tag: str) -> None:
    engine = EmbeddedEngine(load_settings(data_dir=Path(data_dir), sync="NORMAL"), embedder=HashEmbedder())
    await engine.start()
    caller = Caller(client_id="checkpointer")
    loop = asyncio.get_running_loop()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for round_ in range(1_000_000):
        for i in range(3):
            msg = f"{tag}-{round_}-{i}"
            args = {"agent_id": f"agent-{i}", "content": f"checkpoint round {round_} item {i}", "id": msg}
            answer = await dispatch(engine, caller, "store", args)
            sys.stdout.write(orjson.dumps({"msg": msg, "answer": answer}).decode() + "\n")
        sys.stdout.flush()
        await engine.read(lambda: None)  # fold the new events
        await loop.run_in_executor(None, engine.runner.checkpoint)
        await loop.run_in_executor(engine.bus._executor, engine.bus._save_snapshot)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
