"""Concurrent embed requests to one model, coalesced into one model call: a model embeds a batch
at about twice its one-by-one rate (docs/embedding.md, "Micro-batching")."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

# Runs a blocking model call off the event loop (an executor), returning its vectors.
RunBlocking = Callable[[Callable[[], np.ndarray]], Awaitable[np.ndarray]]
# Blocks the model's thread on the condition until the predicate holds or the timeout (seconds)
# passes (``threading.Condition.wait_for``; a test drives it without the clock).
WaitFor = Callable[[threading.Condition, Callable[[], bool], float], object]


def _wait_for(cond: threading.Condition, predicate: Callable[[], bool], timeout: float) -> object:
    return cond.wait_for(predicate, timeout)


@dataclass(slots=True)
class _Request:
    texts: list[str]
    queued: float  # when it arrived (the batcher's clock)
    done: asyncio.Future[np.ndarray] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


@dataclass(eq=False, slots=True)
class _Run:
    """One stretch of model work, from a request finding the model idle until the queue is empty."""

    loop: asyncio.AbstractEventLoop
    texts: int = 0  # in its current call


class EmbedBatcher:
    """Requests that arrive while a model call runs wait for it to end and then go together in
    the next call, up to ``max_texts`` texts (a larger request goes alone). A request that finds
    the model idle is embedded at once: a lone caller waits for nothing but its own call.
    ``max_wait_s`` > 0 makes an idle model wait that long for company before a call.

    With ``regroup`` > 0, after a call that had company (two callers or more), the model waits
    for that call's callers to come back before its next call, at most ``regroup`` times that
    call's duration and never more than ``regroup_max_s``: callers that come back do so within
    the server's own turnaround (about 6 ms measured), whatever the model's speed, and a longer
    wait (a slow /embed server's call) would only delay a newcomer when they do not come back.
    Closed-loop clients otherwise split into groups that take turns, and the
    model runs many small calls (about 3 texts for 8 clients, 40% of them single), each dearer
    per text than one call of all. It never waits after a lone caller's call, nor after a failed
    call. Settings turn it on by default (1): with the model's threads spinning within a call,
    8 clients' stores/s rose by a median 8 % over two groups taking turns (docs/embedding.md,
    "Spinning within a call"; before that the idle wait cost about what the larger calls saved).

    With ``concurrent_calls`` N > 1, once as many texts are queued as the smallest running call
    holds, and fewer than N calls run, another call starts with them instead of waiting for a
    call to end: the groups that take turns at a model that runs calls in parallel (an ONNX
    session: its ``run`` releases the interpreter lock) are embedded side by side
    (docs/embedding.md, "Two model calls at once"). Starting one for each early arrival instead
    split 8 clients' calls into ~2 texts each. Each running call's thread, when done, takes
    what is queued; never more than N run at once.

    The thread that ran a call takes the next batch itself and posts each call's results to the
    event loop: a loop busy elsewhere (a fan-out to many subscribers, parsing requests) delays
    the callers' answers, never the model's next call."""

    def __init__(
        self,
        embed: Callable[[list[str]], np.ndarray],
        run_blocking: RunBlocking,
        *,
        max_texts: int = 64,
        max_wait_s: float = 0.0,
        regroup: float = 0.0,
        regroup_max_s: float = 0.02,
        concurrent_calls: int = 1,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.perf_counter,
        wait_for: WaitFor = _wait_for,
    ) -> None:
        if max_texts < 1:
            raise ValueError("max_texts must be at least 1")
        if regroup < 0:
            raise ValueError("regroup must not be negative")
        if regroup_max_s < 0:
            raise ValueError("regroup_max_s must not be negative")
        if concurrent_calls < 1:
            raise ValueError("concurrent_calls must be at least 1")
        self._embed = embed
        self._run_blocking = run_blocking
        self.max_texts = max_texts
        self.max_wait_s = max_wait_s
        self.regroup = regroup
        self.regroup_max_s = regroup_max_s
        self.concurrent_calls = concurrent_calls
        self._sleep = sleep  # the wait for company (a test drives it without the clock)
        self._clock = clock
        self._wait_for = wait_for
        # The queue is shared by the loop (which appends) and the model's threads (which take):
        # ``_runs`` are the runs under way (at most ``concurrent_calls``), each taking what is
        # queued until it is empty; a run no longer among them (its loop closed) takes nothing more.
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)  # a request was queued
        self._queue: list[_Request] = []
        self._runs: set[_Run] = set()
        self._starters: set[asyncio.Task[None]] = set()  # held: the loop keeps only weak references
        self.calls = 0  # model calls made
        self.texts = 0  # texts embedded
        self.busy_s = 0.0  # time inside model calls
        # Time the model sat idle while a request waited for it: from the later of the oldest
        # waiting request's arrival and the previous call's end, to the next call's start.
        self.idle_waiting_s = 0.0
        self._last_end = float("-inf")
        self.regroup_waits = 0  # waits for a call's callers to come back
        self.regroup_wait_s = 0.0  # the time they took
        self._running = 0  # model calls under way
        self.most_at_once = 0  # the most model calls that ran at once

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors of ``texts``, one row each, in order."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        request = _Request(list(texts), self._clock())
        loop = asyncio.get_running_loop()
        with self._lock:
            self._queue.append(request)
            run = _Run(loop) if self._room() else None
            if run is not None:
                self._runs.add(run)
            else:
                self._arrived.notify()  # a model's thread may be waiting for its callers
        if run is not None:
            starter = loop.create_task(self._run(run))
            self._starters.add(starter)
            starter.add_done_callback(self._starters.discard)
        return await request.done

    async def _run(self, run: _Run) -> None:
        """Start the model on what is queued; its thread goes on until the queue is empty."""
        first: list[_Request] = []
        try:
            if self.max_wait_s > 0:
                with self._lock:
                    lonely = self._size(self._queue) < self.max_texts
                if lonely:
                    await self._sleep(self.max_wait_s)
            batch = self._take(run)
            if batch is None:
                return
            first = batch
            await self._run_blocking(lambda: self._work(run, first))
        except BaseException as exc:  # the loop is closing, or the model could not be started
            waiting = self._end(run)
            for r in (*first, *waiting):
                if r.done.done():
                    continue
                if isinstance(exc, Exception):  # every waiter learns why it was not embedded
                    r.done.set_exception(exc)
                else:
                    r.done.cancel()
            if not isinstance(exc, Exception):
                raise

    def _work(self, run: _Run, batch: list[_Request]) -> np.ndarray:
        """On the model's thread: embed ``batch``, then each batch queued meanwhile, until none
        is. The result is not used: the answers go through the loop."""
        next_batch: list[_Request] | None = batch
        while next_batch is not None:
            texts = [t for r in next_batch for t in r.texts]
            with self._lock:
                start = self._clock()
                self.idle_waiting_s += max(0.0, start - max(next_batch[0].queued, self._last_end))
                self._running += 1
                self.most_at_once = max(self.most_at_once, self._running)
            outcome: np.ndarray | Exception
            try:
                outcome = self._embed(texts)
            except Exception as exc:  # every waiter learns why its texts were not embedded
                outcome = exc
            with self._lock:  # counted before the answers go: none of this call's callers is back
                self._running -= 1
                end = self._clock()
                self._last_end = max(self._last_end, end)
                self.busy_s += end - start
                if not isinstance(outcome, Exception):
                    self.calls += 1
                    self.texts += len(texts)
                others = len(self._pending())
            try:
                run.loop.call_soon_threadsafe(self._answer, next_batch, outcome)
            except RuntimeError:  # its loop closed without stopping the run: nobody is left to answer
                self._end(run)
            if len(next_batch) > 1 and not isinstance(outcome, Exception) and self.regroup > 0:
                bound = min(self.regroup * (end - start), self.regroup_max_s)
                self._await_callers(run, others + len(next_batch), bound)
            next_batch = self._take(run)
        return np.zeros((0, 0), dtype=np.float32)

    def _await_callers(self, run: _Run, want: int, bound_s: float) -> None:
        """On the model's thread: wait until ``want`` requests are queued (the call's callers
        back, besides those already waiting), a call's worth of texts is, or ``run`` is over;
        at most ``bound_s``."""

        def enough() -> bool:
            if run not in self._runs:
                return True
            pending = self._pending()
            return len(pending) >= want or self._size(pending) >= self.max_texts

        started = self._clock()
        with self._lock:
            if enough():
                return
            self._wait_for(self._arrived, enough, bound_s)
        self.regroup_waits += 1
        self.regroup_wait_s += self._clock() - started

    def _room(self) -> bool:
        """Whether a request just queued starts a call (under the lock): the model is idle, or
        another call may run and the queue holds as many texts as the smallest running call."""
        if not self._runs:
            return True
        if len(self._runs) >= self.concurrent_calls:
            return False
        return self._size(self._pending()) >= min(self.max_texts, min(r.texts for r in self._runs))

    def _pending(self) -> list[_Request]:
        """The queued requests whose callers still wait (under the lock)."""
        return [r for r in self._queue if not r.done.done()]

    @staticmethod
    def _answer(batch: list[_Request], outcome: np.ndarray | Exception) -> None:
        """On the loop: each waiter of ``batch`` gets its rows (or the call's failure)."""
        start = 0
        for r in batch:
            end = start + len(r.texts)
            if not r.done.done():  # not a caller that gave up
                if isinstance(outcome, Exception):
                    r.done.set_exception(outcome)
                else:
                    r.done.set_result(outcome[start:end])
            start = end

    def _take(self, run: _Run) -> list[_Request] | None:
        """The oldest requests that fit in one call (at least one, whatever its size), skipping
        callers that gave up; None when ``run`` is over: nothing is left, or its loop closed."""
        with self._lock:
            if run not in self._runs:  # the queue, if any, is a newer run's
                return None
            self._queue = self._pending()
            if not self._queue:
                self._runs.discard(run)
                return None
            batch = [self._queue.pop(0)]
            size = len(batch[0].texts)
            while self._queue and size + len(self._queue[0].texts) <= self.max_texts:
                size += len(self._queue[0].texts)
                batch.append(self._queue.pop(0))
            run.texts = size
            return batch

    def _end(self, run: _Run) -> list[_Request]:
        """Stop ``run`` early; what it had yet to take: nothing if it was over already, or if
        another run goes on (it takes the queue)."""
        with self._lock:
            if run not in self._runs:
                return []
            self._runs.discard(run)
            self._arrived.notify_all()  # a wait for callers ends with the run
            if self._runs:
                return []
            waiting, self._queue = self._queue, []
            return waiting

    @staticmethod
    def _size(queue: Sequence[_Request]) -> int:
        return sum(len(r.texts) for r in queue)
