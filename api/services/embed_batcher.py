"""Concurrent embed requests to one model, coalesced into one model call: a model embeds a batch
at about twice its one-by-one rate (docs/embedding.md, "Micro-batching")."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

# Runs a blocking model call off the event loop (an executor), returning its vectors.
RunBlocking = Callable[[Callable[[], np.ndarray]], Awaitable[np.ndarray]]


@dataclass(slots=True)
class _Request:
    texts: list[str]
    done: asyncio.Future[np.ndarray] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class EmbedBatcher:
    """Requests that arrive while a model call runs wait for it to end and then go together in
    the next call, up to ``max_texts`` texts (a larger request goes alone). A request that finds
    the model idle is embedded at once: a lone caller waits for nothing but its own call.
    ``max_wait_s`` > 0 makes an idle model wait that long for company before a call."""

    def __init__(
        self,
        embed: Callable[[list[str]], np.ndarray],
        run_blocking: RunBlocking,
        *,
        max_texts: int = 64,
        max_wait_s: float = 0.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if max_texts < 1:
            raise ValueError("max_texts must be at least 1")
        self._embed = embed
        self._run_blocking = run_blocking
        self.max_texts = max_texts
        self.max_wait_s = max_wait_s
        self._sleep = sleep  # the wait for company (a test drives it without the clock)
        self._queue: list[_Request] = []
        self._drainer: asyncio.Task[None] | None = None
        self.calls = 0  # model calls made
        self.texts = 0  # texts embedded

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors of ``texts``, one row each, in order."""
        request = _Request(list(texts))
        if not request.texts:
            return np.zeros((0, 0), dtype=np.float32)
        self._queue.append(request)
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.get_running_loop().create_task(self._drain())
        return await request.done

    async def _drain(self) -> None:
        while self._queue:
            self._queue = [r for r in self._queue if not r.done.done()]  # callers that gave up
            if not self._queue:
                break
            if self.max_wait_s > 0 and self._size(self._queue) < self.max_texts:
                await self._sleep(self.max_wait_s)
            batch = self._take()
            texts = [t for r in batch for t in r.texts]
            try:
                vectors = await self._run_blocking(functools.partial(self._embed, texts))
            except asyncio.CancelledError:  # the loop is closing: so are the waiters
                for r in batch:
                    r.done.cancel()
                raise
            except Exception as exc:  # every waiter learns why its texts were not embedded
                for r in batch:
                    if not r.done.done():
                        r.done.set_exception(exc)
                continue
            self.calls += 1
            self.texts += len(texts)
            start = 0
            for r in batch:
                end = start + len(r.texts)
                if not r.done.done():
                    r.done.set_result(vectors[start:end])
                start = end

    def _take(self) -> list[_Request]:
        """The oldest requests that fit in one call (at least one, whatever its size)."""
        batch = [self._queue.pop(0)]
        size = len(batch[0].texts)
        while self._queue and size + len(self._queue[0].texts) <= self.max_texts:
            size += len(self._queue[0].texts)
            batch.append(self._queue.pop(0))
        return batch

    @staticmethod
    def _size(queue: Sequence[_Request]) -> int:
        return sum(len(r.texts) for r in queue)
