"""Background admin jobs an engine keeps across calls (today: a re-embed), and their status."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class ReembedJob:
    model: str
    agents: list[str] | None
    started_at: float = field(default_factory=time.time)
    done: int = 0
    total: int = 0
    task: asyncio.Task[Any] | None = None
    result: dict[str, Any] | None = None
    error: str | None = None

    def status(self) -> dict[str, Any]:
        state = "running" if self.task is not None and not self.task.done() else "failed" if self.error else "finished"
        body: dict[str, Any] = {
            "state": state,
            "model": self.model,
            "agents": self.agents,
            "done": self.done,
            "total": self.total,
            "elapsed_s": round(time.time() - self.started_at, 3),
        }
        if self.result is not None:
            body["result"] = self.result
        if self.error is not None:
            body["error"] = self.error
        return body
