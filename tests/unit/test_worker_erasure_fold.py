"""A Kafka worker folds an erasure the decider appended on a thread, other events on the loop:
an erasure of a large agent drops every row it names, and the worker's other partitions must
go on answering meanwhile, and the decider must not wait for it to reply to other writes
(docs/erasure.md, "Kafka mode")."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading

from memstream.api.kafka.worker.app import Worker
from memstream.api.kafka.worker.models import PartitionModels
from memstream.streams.deciders.step import NewEvent
from memstream.streams.log.kafka import KafkaConfig
from memstream.streams.release import SWITCH_S


class Recording(PartitionModels):
    """Partition models that note which thread folded each event, and fold nothing."""

    def __init__(self) -> None:
        super().__init__(0, 0)
        self.threads: dict[int, int] = {}
        self.collector: dict[int, tuple[bool, float]] = {}  # offset -> (gc on, switch interval)

    def apply(self, offset: int, value: bytes, vector: bytes | None) -> None:
        self.threads[offset] = threading.get_ident()
        self.collector[offset] = (gc.isenabled(), sys.getswitchinterval())
        self.offset = offset


class PausedTail:
    def pause(self, *partitions: object) -> None:
        pass


def event(offset: int, type_: str) -> NewEvent:
    return NewEvent(offset=offset, partition=0, agent="a", type=type_, value=b"{}", vector=None)


def worker_holding(models: Recording) -> Worker:
    worker = Worker.__new__(Worker)  # only what ``appended`` touches: no broker, no server
    worker.cfg = KafkaConfig(bootstrap="127.0.0.1:1", prefix="unit", partitions=1, replication=1)
    worker.models = {0: models}
    worker.fed = set()
    worker.checkpoint_every = 0
    worker._checkpoints = set()
    worker._consumer = PausedTail()  # type: ignore[assignment]
    return worker


async def folds_done(worker: Worker) -> None:
    """Wait for the erasure folds ``appended`` left running."""
    while worker._checkpoints:
        await asyncio.gather(*worker._checkpoints)


async def test_an_erasure_is_folded_off_the_loop_and_a_store_on_it() -> None:
    models = Recording()
    worker = worker_holding(models)
    loop_thread = threading.get_ident()
    await worker.appended(0, [event(0, "memory.stored")])
    await worker.appended(0, [event(1, "memory.stored"), event(2, "agent.erased")])
    await folds_done(worker)
    await worker.appended(0, [event(3, "record.erased")])
    await folds_done(worker)
    assert models.threads[0] == loop_thread
    assert {models.threads[1], models.threads[2], models.threads[3]}.isdisjoint({loop_thread})
    assert models.offset == 3 and models.folded_by_agent == 4
    # An erasure folds with the cyclic collector paused and short switches, as embedded.
    assert models.collector[2] == (False, SWITCH_S) and models.collector[0] == (True, sys.getswitchinterval())
    assert gc.isenabled()


async def test_the_loop_answers_while_an_erasure_folds() -> None:
    started, release = threading.Event(), threading.Event()

    class Slow(Recording):
        released = False

        def apply(self, offset: int, value: bytes, vector: bytes | None) -> None:
            started.set()
            # Released by the loop below at once, if the loop can run while this waits; folded
            # on the loop itself, this times out instead.
            self.released = release.wait(5)
            super().apply(offset, value, vector)

    models = Slow()
    worker = worker_holding(models)
    fold = asyncio.create_task(worker.appended(0, [event(0, "agent.erased")]))
    async with asyncio.timeout(30):
        while not started.is_set():
            await asyncio.sleep(0.01)  # the poll's step; the timeout bounds the wait
    release.set()  # runs only if the loop is free while the fold is under way
    await fold
    await folds_done(worker)
    assert models.released and models.offset == 0


async def test_the_decider_is_not_held_by_an_erasure_fold() -> None:
    """``appended`` (which the decider awaits before it replies to a batch, and every later
    batch after it) returns while the erasure is still being folded; the partition's lock is
    held until the fold is done, and what the decider appends next goes to the tail."""
    started, release = threading.Event(), threading.Event()

    class Slow(Recording):
        def apply(self, offset: int, value: bytes, vector: bytes | None) -> None:
            started.set()
            release.wait(30)
            super().apply(offset, value, vector)

    models = Slow()
    worker = worker_holding(models)
    tail = Tail()
    worker._consumer = tail  # type: ignore[assignment]
    async with asyncio.timeout(30):
        await worker.appended(0, [event(0, "agent.erased")])  # returns with the fold under way
        assert models.lock.locked() and models.offset == -1
        await worker.appended(0, [event(1, "memory.stored")])  # behind the lock: the tail's
        assert tail.sought == [0] and 1 not in models.threads  # from the models' next offset
        release.set()
        await folds_done(worker)
    assert started.is_set() and models.offset == 0 and not models.lock.locked()
    assert models.folded_by_agent == 1


class Tail(PausedTail):
    """A tail consumer that notes where it is sent."""

    def __init__(self) -> None:
        self.sought: list[int] = []

    def resume(self, *partitions: object) -> None:
        pass

    def seek(self, tp: object, offset: int) -> None:
        self.sought.append(offset)
