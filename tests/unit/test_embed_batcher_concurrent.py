"""Two model calls at once (``EmbedBatcher(concurrent_calls=N)``, MEMSTREAM_EMBED_CONCURRENT_CALLS):
requests that find fewer than N calls running start another, never more than N run, a lone
caller's path is unchanged, and each caller gets its own vectors or its own call's failure."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from memstream.api.services.embed_batcher import EmbedBatcher
from memstream.api.services.embedders import Embedders
from memstream.api.services.embedding import EmbeddingError
from memstream.api.services.embedding.onnx_backend import default_threads
from memstream.api.services.settings import Settings, SettingsError, load_settings
from tests.support.embedders import HashEmbedder


def expected(texts: list[str]) -> np.ndarray:
    return HashEmbedder().embed(texts)


class HeldModel:
    """A model on real threads whose calls each hold until the test releases them, counting the
    calls in flight: what two callers' groups look like to the batcher."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: list[list[str]] = []
        self.entered = threading.Semaphore(0)  # one release per call started
        self.releases: list[threading.Event] = []
        self.failures: dict[int, Exception] = {}  # call number -> what it raises
        self.running = 0
        self.most = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        with self.lock:
            n = len(self.batches)
            self.batches.append(list(texts))
            self.releases.append(threading.Event())
            self.running += 1
            self.most = max(self.most, self.running)
        self.entered.release()
        self.releases[n].wait(10)
        with self.lock:
            self.running -= 1
        if n in self.failures:
            raise self.failures[n]
        return HashEmbedder().embed(texts)

    async def started(self) -> None:
        """Until one more call has started (a bounded wait: a missing call fails the test)."""
        assert await asyncio.to_thread(self.entered.acquire, True, 10), "no model call started"

    def release(self, n: int) -> None:
        self.releases[n].set()


def batcher_on(pool: ThreadPoolExecutor, model: HeldModel, calls: int) -> EmbedBatcher:
    loop = asyncio.get_running_loop()
    return EmbedBatcher(model.embed, lambda call: loop.run_in_executor(pool, call), concurrent_calls=calls)


async def test_callers_arriving_during_a_call_start_a_second_call_at_once() -> None:
    """The second group does not wait for the first group's call to end; a third group waits
    for one of the two, and then takes what is queued."""
    model = HeldModel()
    with ThreadPoolExecutor(max_workers=4) as pool:
        batcher = batcher_on(pool, model, 2)
        first = asyncio.create_task(batcher.embed(["a0"]))
        await model.started()
        group = [asyncio.create_task(batcher.embed([f"b{i}"])) for i in range(7)]
        await model.started()  # the second call runs while the first is held
        assert model.batches == [["a0"], [f"b{i}" for i in range(7)]] and model.running == 2
        third = [asyncio.create_task(batcher.embed([f"c{i}", f"d{i}"])) for i in range(8)]
        await asyncio.sleep(0.05)  # time for a third call to start, if the batcher allowed one
        assert len(model.batches) == 2
        model.release(1)
        await model.started()  # the second call's thread takes the queue
        assert model.batches[2] == [t for i in range(8) for t in (f"c{i}", f"d{i}")]
        model.release(0)
        model.release(2)
        assert np.array_equal(await first, expected(["a0"]))
        for i, out in enumerate(await asyncio.gather(*group)):
            assert np.array_equal(out, expected([f"b{i}"]))
        for i, out in enumerate(await asyncio.gather(*third)):
            assert np.array_equal(out, expected([f"c{i}", f"d{i}"]))
    assert model.most == 2 and batcher.most_at_once == 2
    assert (batcher.calls, batcher.texts) == (3, 24)


async def test_one_concurrent_call_keeps_the_callers_waiting_for_the_call_to_end() -> None:
    """The default (1): the second group waits for the first call, as before."""
    model = HeldModel()
    with ThreadPoolExecutor(max_workers=4) as pool:
        batcher = batcher_on(pool, model, 1)
        first = asyncio.create_task(batcher.embed(["a0"]))
        await model.started()
        group = [asyncio.create_task(batcher.embed([f"b{i}"])) for i in range(7)]
        await asyncio.sleep(0.05)
        assert model.batches == [["a0"]]
        model.release(0)
        await model.started()
        model.release(1)
        await asyncio.gather(first, *group)
    assert model.batches == [["a0"], [f"b{i}" for i in range(7)]] and model.most == 1


class SleepyModel:
    """A model whose calls take a little real time, counting the calls in flight."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.002)
        with self.lock:
            self.running -= 1
        return HashEmbedder().embed(texts)


@pytest.mark.parametrize("calls", [1, 2, 3])
async def test_eight_closed_loop_callers_never_run_more_than_n_calls(calls: int) -> None:
    """Eight clients each storing one text at a time, on a pool with room for more calls than
    allowed: never more than N calls at once, and each client gets its own vectors in order."""
    model = SleepyModel()
    with ThreadPoolExecutor(max_workers=6) as pool:
        loop = asyncio.get_running_loop()
        batcher = EmbedBatcher(model.embed, lambda call: loop.run_in_executor(pool, call), concurrent_calls=calls)

        async def client(c: int) -> None:
            for i in range(25):
                for _ in range((7 * c + i) % 5):  # the clients' turns spread their arrivals
                    await asyncio.sleep(0)
                texts = [f"client {c} store {i}"] * (1 + (c + i) % 3)
                assert np.array_equal(await batcher.embed(texts), expected(texts))

        await asyncio.gather(*(client(c) for c in range(8)))
    assert model.most <= calls and batcher.most_at_once <= calls
    assert batcher.texts == sum(1 + (c + i) % 3 for c in range(8) for i in range(25))


async def test_a_lone_caller_is_one_call_at_once_without_waiting() -> None:
    """With N = 2 a lone caller's path is the one it had: one call of its own texts, started at
    once (the wait for company is never taken), one call after another."""
    model = HeldModel()
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    with ThreadPoolExecutor(max_workers=4) as pool:
        loop = asyncio.get_running_loop()
        batcher = EmbedBatcher(
            model.embed, lambda call: loop.run_in_executor(pool, call), concurrent_calls=2, sleep=sleep
        )
        for i in range(3):
            pending = asyncio.create_task(batcher.embed([f"alone {i}", "again"]))
            await model.started()
            model.release(i)
            assert np.array_equal(await pending, expected([f"alone {i}", "again"]))
    assert model.batches == [[f"alone {i}", "again"] for i in range(3)]
    assert slept == [] and model.most == 1 and batcher.idle_waiting_s < 1


async def test_a_failed_call_fails_only_its_own_callers_while_the_other_call_answers() -> None:
    model = HeldModel()
    model.failures[0] = EmbeddingError("the model broke")
    with ThreadPoolExecutor(max_workers=4) as pool:
        batcher = batcher_on(pool, model, 2)
        failing = [asyncio.create_task(batcher.embed([f"f{i}"])) for i in range(2)]
        await model.started()
        fine = [asyncio.create_task(batcher.embed([f"ok{i}"])) for i in range(3)]
        await model.started()
        model.release(0)
        for task in failing:
            with pytest.raises(EmbeddingError, match="the model broke"):
                await task
        model.release(1)
        for i, out in enumerate(await asyncio.gather(*fine)):
            assert np.array_equal(out, expected([f"ok{i}"]))
        later = asyncio.create_task(batcher.embed(["later"]))
        await model.started()
        model.release(2)
        assert np.array_equal(await later, expected(["later"]))
    assert model.batches == [["f0", "f1"], ["ok0", "ok1", "ok2"], ["later"]]
    assert batcher.calls == 2  # the failed call is not counted


def test_the_setting_is_validated_and_names_its_variable() -> None:
    base = {"MEMSTREAM_DATA_DIR": "unused"}
    assert load_settings(base).embed_concurrent_calls == 1
    assert load_settings({**base, "MEMSTREAM_EMBED_CONCURRENT_CALLS": "2"}).embed_concurrent_calls == 2
    for bad in ("0", "-1", "two", "9"):
        with pytest.raises(SettingsError, match="MEMSTREAM_EMBED_CONCURRENT_CALLS"):
            load_settings({**base, "MEMSTREAM_EMBED_CONCURRENT_CALLS": bad})
    with pytest.raises(ValueError, match="concurrent_calls"):
        EmbedBatcher(HashEmbedder().embed, HeldModel().embed, concurrent_calls=0)  # type: ignore[arg-type]


async def test_embedders_give_the_batcher_the_setting() -> None:
    model = HashEmbedder()
    embedders = Embedders(Settings(data_dir=Path("unused"), embed_concurrent_calls=2), model)
    try:
        assert embedders.batcher(model).concurrent_calls == 2
    finally:
        embedders.close()


def test_the_onnx_threads_follow_the_concurrent_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each call gets its share of the cores (at least one); an explicit thread count wins."""
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    monkeypatch.delenv("MEMSTREAM_EMBEDDING_THREADS", raising=False)
    monkeypatch.delenv("MEMSTREAM_EMBED_CONCURRENT_CALLS", raising=False)
    assert default_threads() == 2
    monkeypatch.setenv("MEMSTREAM_EMBED_CONCURRENT_CALLS", "2")
    assert default_threads() == 1
    monkeypatch.setenv("MEMSTREAM_EMBED_CONCURRENT_CALLS", "3")
    assert default_threads() == 1
    monkeypatch.setenv("MEMSTREAM_EMBEDDING_THREADS", "2")
    assert default_threads() == 2
    monkeypatch.setenv("MEMSTREAM_EMBEDDING_THREADS", "")
    monkeypatch.setenv("MEMSTREAM_EMBED_CONCURRENT_CALLS", "x")
    with pytest.raises(EmbeddingError, match="MEMSTREAM_EMBED_CONCURRENT_CALLS"):
        default_threads()


async def test_a_second_call_waits_until_as_many_texts_are_queued_as_the_running_call_holds() -> None:
    """Callers coming back one by one do not each start a call of their own (8 clients' calls
    then fell to ~2 texts): the second call starts with a running call's worth of texts."""
    model = HeldModel()
    with ThreadPoolExecutor(max_workers=4) as pool:
        batcher = batcher_on(pool, model, 2)
        first = asyncio.create_task(batcher.embed([f"a{i}" for i in range(4)]))
        await model.started()
        group = []
        for i in range(3):
            group.append(asyncio.create_task(batcher.embed([f"b{i}"])))
            await asyncio.sleep(0.02)  # time for a second call to start, if one did
            assert len(model.batches) == 1
        group.append(asyncio.create_task(batcher.embed(["b3"])))
        await model.started()
        assert model.batches[1] == ["b0", "b1", "b2", "b3"]
        model.release(0)
        model.release(1)
        assert np.array_equal(await first, expected([f"a{i}" for i in range(4)]))
        for i, out in enumerate(await asyncio.gather(*group)):
            assert np.array_equal(out, expected([f"b{i}"]))
