"""Comparing answers of two deployments of one script (embedded vs Kafka mode)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memstream.streams.log.port import partition_for
from tests.support.faces import HttpFace

# The embedded default, so ids are allocated identically in both modes. A test module comparing
# the two imports it: conftest's ``cfg`` sizes the module's deployment by its ``PARTITIONS``.
PARTITIONS = 16


def sharing(agent: str) -> str:
    """Another agent name in ``agent``'s partition (deterministic), so a script covers two
    agents of one partition."""
    return next(
        name
        for name in (f"{agent}-peer{i}" for i in range(1000))
        if partition_for(name, PARTITIONS) == partition_for(agent, PARTITIONS)
    )


def stable_without(volatile: set[str]) -> Callable[[Any], Any]:
    """``stable(body)``: the answer without the keys in ``volatile`` (clock readings, random
    ids) at any depth. A command id the script did not give (``cmd-…``) is one the server drew
    or derived from clock readings: it is replaced by a placeholder, as it differs per run."""

    def stable(body: Any) -> Any:
        if isinstance(body, dict):
            out = {k: stable(v) for k, v in body.items() if k not in volatile}
            if isinstance(out.get("command_id"), str) and not out["command_id"].startswith("cmd-"):
                out["command_id"] = "<not the script's>"
            return out
        if isinstance(body, list):
            return [stable(v) for v in body]
        return body

    return stable


class CommandIds:
    """Calls through ``face`` with a command id on every write, so that two runs of one script
    (embedded and Kafka mode) write the same records."""

    def __init__(self, face: HttpFace) -> None:
        self.face = face
        self.n = 0

    async def write(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        self.n += 1
        body: dict[str, Any] = await self.face.call(tool, {**args, "command_id": f"cmd-{self.n}"})
        return body
