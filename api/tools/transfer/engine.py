"""What the transfer tools ask of an engine beyond ``ports.Engine``: the model an agent's vectors are of."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

from memstream.api.services.embedders import Embedders
from memstream.api.services.ports import Engine


class TransferEngine(Engine, Protocol):
    """An engine an import decides records on: the embedded engine, or a Kafka worker's
    engine of one partition (which reads the model from its read models, so it answers
    with an awaitable; ``streams.log.port.resolved`` takes either)."""

    @property
    def embedders(self) -> Embedders: ...

    def agent_model(self, agent_id: str) -> str | Awaitable[str | None] | None:
        """The model of an agent's vectors (None: the agent has none yet)."""
        ...
