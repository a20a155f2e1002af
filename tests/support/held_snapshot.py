"""A decision snapshot held while it is being built: what runs beside it shows what waits for it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from memstream.streams.decision.state import DecisionState


class HeldDecisionSnapshot:
    """``DecisionState.to_snapshot`` patched to wait for ``release`` (10 s at most) once it has
    set ``started``; ``returned`` gains an entry each time one is built."""

    def __init__(self) -> None:
        self.started, self.release = threading.Event(), threading.Event()
        self.returned: list[bool] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = DecisionState.to_snapshot

        def held(state: DecisionState) -> dict[str, Any]:
            self.started.set()
            self.release.wait(10)
            self.returned.append(True)
            return real(state)

        monkeypatch.setattr(DecisionState, "to_snapshot", held)
