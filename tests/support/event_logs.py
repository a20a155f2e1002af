"""Stand-ins for the EventLog port, for runners over logs the test makes up."""

from __future__ import annotations

from memstream.streams.log.port import LogRecord


class EmptyLog:
    """Enough of the EventLog port for a runner over a log with no events."""

    def end_offset(self) -> int:
        return 0

    def read(self, start: int = 0, stop: int | None = None, **_: object) -> list[LogRecord]:
        return []
