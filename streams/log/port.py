"""The log port: what the rest of memstream may assume about any log, embedded or Kafka, so
either adapter serves the same callers. See docs/architecture.md, "The log".
"""

from __future__ import annotations

import inspect
import zlib
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar, cast

from memstream.streams.commands import Command
from memstream.streams.decision.outcome import Outcome
from memstream.streams.events import AuditRecord

T = TypeVar("T")


class LogUnavailable(Exception):
    """The log could not take the write (disk full, I/O error, no decider answering). Nothing
    was appended, or (for a timed-out Kafka command) it is unknown: retry with the same command id."""


@dataclass(frozen=True, slots=True)
class LogRecord:
    offset: int
    partition: int
    agent_id: str
    type: str
    value: bytes
    vector: bytes | None = None  # the event's attached embedding (raw little-endian f32)


@dataclass(frozen=True, slots=True)
class Committed:
    """A decided command: its outcome and, when it appended, the offset of its last event."""

    outcome: Outcome
    offset: int | None = None


def partition_for(agent_id: str, num_partitions: int) -> int:
    """The partition of an agent. A stable hash (not Python's salted ``hash``), so every
    process and every adapter agrees where an agent's commands are decided."""
    return zlib.crc32(agent_id.encode("utf-8", "surrogatepass")) % num_partitions


async def resolved(answer: T | Awaitable[T]) -> T:
    """A log read's answer, for code that serves both modes: the embedded log answers at once,
    the Kafka workers' partition log (``api/kafka/worker/partition_log.py``) with an awaitable, because
    it reads the topics over the network."""
    if inspect.isawaitable(answer):
        return cast(T, await answer)
    return answer


class EventLog(Protocol):
    num_partitions: int

    def end_offset(self) -> int:
        """The offset the next event will get (0 on an empty log)."""
        ...

    def read(
        self,
        start: int = 0,
        stop: int | None = None,
        *,
        agent_id: str | None = None,
        limit: int = 10_000,
        vectors: bool = True,
        types: Sequence[str] | None = None,
    ) -> list[LogRecord]:
        """Events with ``start <= offset < stop`` in offset order, at most ``limit``; without
        their attached vectors when ``vectors`` is false (folds that never look at them); only
        of the given event ``types`` when those are named."""
        ...

    def read_offsets(self, offsets: Sequence[int]) -> list[LogRecord]: ...

    def audit_end_offset(self) -> int: ...

    def read_audit(
        self,
        start: int = 0,
        stop: int | None = None,
        *,
        agent_id: str | None = None,
        kind: str | None = None,
        limit: int = 10_000,
    ) -> list[LogRecord]: ...

    def close(self) -> None: ...


class CommandBus(Protocol):
    async def submit(self, command: Command) -> Committed:
        """Decide and, when accepted, durably append. Returns only after the outcome is safe:
        an acknowledged write survives a kill -9 of the process that acknowledged it."""
        ...

    async def record_refusal(self, record: AuditRecord) -> None:
        """Audit a request refused before it became a command (bad input, permission)."""
        ...

    async def close(self) -> None: ...
