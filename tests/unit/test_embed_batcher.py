"""Micro-batching (api/services/embed_batcher.py): requests that arrive while the model is busy
share its next call; a lone request never waits; every caller gets exactly its own vectors."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.api.services.embed_batcher import EmbedBatcher
from memstream.api.services.embedders import Embedders
from memstream.api.services.settings import Settings, SettingsError, load_settings
from tests.support.embedders import HashEmbedder


class GatedModel:
    """A model whose calls are recorded and, while ``gate`` is closed, do not finish: what the
    event loop sees of a slow model call running on a thread."""

    def __init__(self, pool: ThreadPoolExecutor | None = None) -> None:
        self.inner = HashEmbedder()
        self.batches: list[list[str]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail_next: Exception | None = None
        self.pool = pool  # calls run on its thread (else on the loop's, as soon as the gate opens)

    def embed(self, texts: list[str]) -> np.ndarray:
        self.batches.append(list(texts))
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc
        return self.inner.embed(texts)

    async def run_blocking(self, call: Callable[[], np.ndarray]) -> np.ndarray:
        await self.gate.wait()
        if self.pool is not None:
            return await asyncio.get_running_loop().run_in_executor(self.pool, call)
        return call()


def expected(texts: list[str]) -> np.ndarray:
    return HashEmbedder().embed(texts)


async def test_a_lone_request_is_one_call_of_its_own_texts() -> None:
    model = GatedModel()
    batcher = EmbedBatcher(model.embed, model.run_blocking)
    out = await batcher.embed(["alpha beta", "gamma"])
    assert model.batches == [["alpha beta", "gamma"]]
    assert np.array_equal(out, expected(["alpha beta", "gamma"]))


async def test_requests_arriving_during_a_call_share_the_next_one() -> None:
    model = GatedModel()
    batcher = EmbedBatcher(model.embed, model.run_blocking)
    model.gate.clear()
    first = asyncio.create_task(batcher.embed(["first"]))
    await asyncio.sleep(0)  # the first call has started and is held at the gate
    later = [asyncio.create_task(batcher.embed([f"text {i}", f"more {i}"])) for i in range(7)]
    await asyncio.sleep(0)
    model.gate.set()
    results = await asyncio.gather(first, *later)
    assert model.batches[0] == ["first"]
    assert model.batches[1] == [t for i in range(7) for t in (f"text {i}", f"more {i}")]
    assert len(model.batches) == 2
    for i, out in enumerate(results[1:]):
        assert np.array_equal(out, expected([f"text {i}", f"more {i}"]))
    assert (batcher.calls, batcher.texts) == (2, 15)


async def test_a_call_holds_at_most_max_texts_and_a_larger_request_goes_alone() -> None:
    model = GatedModel()
    batcher = EmbedBatcher(model.embed, model.run_blocking, max_texts=4)
    model.gate.clear()
    tasks = [asyncio.create_task(batcher.embed(["a"]))]
    await asyncio.sleep(0)
    tasks += [asyncio.create_task(batcher.embed(texts)) for texts in (["b", "c"], ["d", "e"], ["f"], list("ghijkl"))]
    await asyncio.sleep(0)
    model.gate.set()
    await asyncio.gather(*tasks)
    assert model.batches == [["a"], ["b", "c", "d", "e"], ["f"], list("ghijkl")]


async def test_a_failed_call_fails_its_waiters_and_the_next_call_goes_on() -> None:
    model = GatedModel()
    batcher = EmbedBatcher(model.embed, model.run_blocking, max_texts=2)
    model.gate.clear()
    model.fail_next = RuntimeError("model crashed")
    doomed = [asyncio.create_task(batcher.embed([t])) for t in ("x", "y")]
    await asyncio.sleep(0)
    survivor = asyncio.create_task(batcher.embed(["z"]))
    await asyncio.sleep(0)
    model.gate.set()
    for task in doomed:
        with pytest.raises(RuntimeError, match="model crashed"):
            await task
    assert np.array_equal(await survivor, expected(["z"]))


async def test_a_caller_that_gives_up_before_its_call_costs_the_model_nothing() -> None:
    model = GatedModel()
    batcher = EmbedBatcher(model.embed, model.run_blocking)
    model.gate.clear()
    first = asyncio.create_task(batcher.embed(["first"]))
    await asyncio.sleep(0)
    quitter = asyncio.create_task(batcher.embed(["quitter"]))
    stayer = asyncio.create_task(batcher.embed(["stayer"]))
    await asyncio.sleep(0)
    quitter.cancel()
    model.gate.set()
    await first
    assert np.array_equal(await stayer, expected(["stayer"]))
    assert model.batches == [["first"], ["stayer"]]


async def test_an_idle_model_waits_max_wait_for_company() -> None:
    model = GatedModel()
    waiting, wait_over = asyncio.Event(), asyncio.Event()
    waits: list[float] = []

    async def sleep(seconds: float) -> None:  # the wait, ended by the test instead of the clock
        waits.append(seconds)
        waiting.set()
        await wait_over.wait()

    batcher = EmbedBatcher(model.embed, model.run_blocking, max_wait_s=0.5, sleep=sleep)
    first = asyncio.create_task(batcher.embed(["early"]))
    await asyncio.wait_for(waiting.wait(), 10)  # the idle model is waiting for company
    second = asyncio.create_task(batcher.embed(["late"]))
    await asyncio.sleep(0)  # the late request is queued
    wait_over.set()
    await asyncio.gather(first, second)
    assert model.batches == [["early", "late"]]
    assert waits == [0.5]


async def test_no_texts_make_no_call() -> None:
    model = GatedModel()
    out = await EmbedBatcher(model.embed, model.run_blocking).embed([])
    assert len(out) == 0 and model.batches == []


@settings(max_examples=60, deadline=None)
@given(
    requests=st.lists(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=6), min_size=1, max_size=20),
    held=st.lists(st.booleans(), min_size=20, max_size=20),
    max_texts=st.integers(min_value=1, max_value=8),
    threaded=st.booleans(),
)
def test_every_caller_gets_exactly_its_own_vectors(
    requests: list[list[str]], held: list[bool], max_texts: int, threaded: bool
) -> None:
    """Whatever the sizes and the interleaving (``held``: the model is busy when that request
    arrives), answers are each caller's own, in order, and calls respect ``max_texts``; with
    the model on a thread of its own too (``threaded``)."""

    async def scenario(pool: ThreadPoolExecutor) -> None:
        model = GatedModel(pool if threaded else None)
        batcher = EmbedBatcher(model.embed, model.run_blocking, max_texts=max_texts)
        tasks = []
        for texts, busy in zip(requests, held, strict=False):
            if busy:
                model.gate.clear()
            tasks.append(asyncio.create_task(batcher.embed(texts)))
            await asyncio.sleep(0)
            model.gate.set()
        results = await asyncio.gather(*tasks)
        for texts, out in zip(requests, results, strict=True):
            assert np.array_equal(out, expected(texts))
        for batch in model.batches:
            assert len(batch) <= max_texts or batch in requests
        assert sorted(t for b in model.batches for t in b) == sorted(t for r in requests for t in r)

    with ThreadPoolExecutor(max_workers=1) as pool:  # its thread starts only if ``threaded``
        asyncio.run(scenario(pool))


async def test_concurrent_embeds_through_embedders_share_model_calls() -> None:
    """The engines' path: eight concurrent requests for one model take fewer calls than eight,
    and each gets its own embeddings, tagged with the model."""
    model = HashEmbedder()
    embedders = Embedders(Settings(data_dir=Path("unused")), model)
    try:
        texts = [f"memory number {i}" for i in range(8)]
        results = await asyncio.gather(*(embedders.embed([t], None) for t in texts))
        batcher = embedders.batcher(model)
        assert batcher.texts == 8 and batcher.calls < 8 and model.calls == batcher.calls
        for text, [emb] in zip(texts, results, strict=True):
            assert emb is not None and emb.model == model.model_id
            assert np.array_equal(emb.vector(), expected([text])[0])
    finally:
        embedders.close()


class ThreadedModel:
    """A model on a real thread: each call says it started, and the first holds until released."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.started = [threading.Event() for _ in range(4)]
        self.release_first = threading.Event()

    def embed(self, texts: list[str]) -> np.ndarray:
        n = len(self.batches)
        self.batches.append(list(texts))
        self.started[n].set()
        if n == 0:
            self.release_first.wait(10)
        return HashEmbedder().embed(texts)


async def test_the_model_starts_its_next_call_while_the_loop_is_busy() -> None:
    """A loop held elsewhere (a fan-out to many subscribers, say) does not keep the model idle:
    the thread that ran a call takes the queued batch itself; the answers wait for the loop."""
    model = ThreadedModel()
    with ThreadPoolExecutor(max_workers=1) as pool:
        loop = asyncio.get_running_loop()
        batcher = EmbedBatcher(model.embed, lambda call: loop.run_in_executor(pool, call))
        first = asyncio.create_task(batcher.embed(["first"]))
        assert await asyncio.to_thread(model.started[0].wait, 10)
        second = asyncio.create_task(batcher.embed(["second", "third"]))
        await asyncio.sleep(0)  # queued while the first call runs
        model.release_first.set()
        # The loop is held right here, by this blocking wait.
        second_call_started = model.started[1].wait(10)
        assert second_call_started, "the second call waited for the loop"
        assert np.array_equal(await first, expected(["first"]))
        assert np.array_equal(await second, expected(["second", "third"]))
    assert model.batches == [["first"], ["second", "third"]]


def test_a_loop_closing_mid_call_ends_the_run_and_a_later_loop_starts_afresh() -> None:
    """A loop that closes while the model runs cancels the queued callers, and the model's
    thread takes nothing more; the batcher then serves the next loop as new."""
    model = ThreadedModel()
    with ThreadPoolExecutor(max_workers=1) as pool:
        batcher = EmbedBatcher(model.embed, lambda call: asyncio.get_running_loop().run_in_executor(pool, call))
        cancelled: list[bool] = []

        async def closing() -> None:
            first = asyncio.create_task(batcher.embed(["first"]))
            assert await asyncio.to_thread(model.started[0].wait, 10)
            queued = asyncio.create_task(batcher.embed(["queued"]))
            await asyncio.sleep(0)
            first.add_done_callback(lambda t: cancelled.append(t.cancelled()))
            queued.add_done_callback(lambda t: cancelled.append(t.cancelled()))
            # returning closes the loop: asyncio.run cancels what is still running

        asyncio.run(closing())
        assert cancelled == [True, True]
        model.release_first.set()
        out = asyncio.run(batcher.embed(["again"]))
    assert np.array_equal(out, expected(["again"]))
    assert model.batches == [["first"], ["again"]]


async def test_the_model_s_idle_time_counts_only_while_a_request_waits() -> None:
    """``idle_waiting_s``: from a request's arrival (or the previous call's end, if later) to the
    call that takes it; ``busy_s``: inside calls. On an injected clock each call takes 2."""
    now = [1.0]
    model = GatedModel()

    def embed(texts: list[str]) -> np.ndarray:
        now[0] += 2
        return model.embed(texts)

    batcher = EmbedBatcher(embed, model.run_blocking, clock=lambda: now[0])
    model.gate.clear()
    early = asyncio.create_task(batcher.embed(["early"]))  # arrives at 1
    await asyncio.sleep(0)
    now[0] = 2.0
    during = asyncio.create_task(batcher.embed(["during"]))  # arrives at 2; the first call starts at 3
    await asyncio.sleep(0)
    now[0] = 3.0
    model.gate.set()
    await asyncio.gather(early, during)  # calls 3-5 (2 idle) and 5-7 (none: it followed at once)
    now[0] = 10.0
    await batcher.embed(["alone"])  # the model was free: it starts at once (10-12)
    assert (batcher.idle_waiting_s, batcher.busy_s) == (2.0, 6.0)
    assert model.batches == [["early"], ["during"], ["alone"]]


async def test_closing_the_embedders_logs_what_the_batching_did(caplog: pytest.LogCaptureFixture) -> None:
    """An operator reads the mean call size and the model's busy and idle-waiting time in the
    log when the process stops (INFO); a model never called logs nothing."""
    model = HashEmbedder()
    embedders = Embedders(Settings(data_dir=Path("unused")), model)
    await asyncio.gather(*(embedders.embed([f"memory {i}"], None) for i in range(4)))
    embedders.batcher(HashEmbedder())  # made, never called
    with caplog.at_level("INFO", logger="memstream.api.services.embedders"):
        embedders.close()
    lines = [r.getMessage() for r in caplog.records]
    calls = embedders.batcher(model).calls
    assert lines == [
        f"embedder {model.model_id}: 4 texts in {calls} model calls ({4 / calls:.2f} per call); "
        f"{embedders.batcher(model).busy_s:.1f} s in calls, {embedders.batcher(model).idle_waiting_s:.1f} s idle "
        f"while a request waited; {embedders.batcher(model).regroup_waits} waits for callers to come back, "
        f"{embedders.batcher(model).regroup_wait_s:.1f} s"
    ]


# -- the wait for a call's callers to come back (``regroup``) --------------------------------


class Waits:
    """An injected ``wait_for`` that records each wait (its bound) and returns at once, as if
    the bound had passed: the tests read when the model would wait and for how long, no clock."""

    def __init__(self) -> None:
        self.bounds: list[float] = []

    def __call__(self, cond: threading.Condition, predicate: Callable[[], bool], timeout: float) -> bool:
        self.bounds.append(timeout)
        return predicate()


async def alone_then_together(
    batcher: EmbedBatcher, model: GatedModel, pair: tuple[str, str]
) -> tuple[asyncio.Task[np.ndarray], list[asyncio.Task[np.ndarray]]]:
    """A call of one caller, and two callers who arrive during it and so share the next call."""
    model.gate.clear()
    first = asyncio.create_task(batcher.embed(["first"]))
    await asyncio.sleep(0)
    together = [asyncio.create_task(batcher.embed([t])) for t in pair]
    await asyncio.sleep(0)
    model.gate.set()
    return first, together


def test_the_default_settings_wait_for_a_calls_callers() -> None:
    """On by default (regroup 1): 8 clients' calls of 8 texts beat two groups taking turns
    (docs/embedding.md, "Spinning within a call"); ``MEMSTREAM_EMBED_BATCH_REGROUP=0`` turns it off."""
    assert Embedders(Settings(data_dir=Path("unused")), HashEmbedder()).batcher(HashEmbedder()).regroup == 1.0
    assert load_settings({}).embed_batch_regroup == 1.0
    assert load_settings({"MEMSTREAM_EMBED_BATCH_REGROUP": "0"}).embed_batch_regroup == 0.0


async def test_a_lone_caller_never_waits_for_company() -> None:
    """One client in turn: every call has one caller, and the model never waits after it."""
    model, waits = GatedModel(), Waits()
    batcher = EmbedBatcher(model.embed, model.run_blocking, regroup=1.0, wait_for=waits)
    for i in range(5):
        assert np.array_equal(await batcher.embed([f"text {i}"]), expected([f"text {i}"]))
    assert model.batches == [[f"text {i}"] for i in range(5)]
    assert waits.bounds == [] and batcher.regroup_waits == 0


async def waits_after_a_slow_shared_call(
    regroup: float, regroup_max_s: float
) -> tuple[EmbedBatcher, GatedModel, Waits]:
    """A lone caller's call that takes 1 (injected clock), then a call of two callers that takes
    3: the batcher, the model and the waits the model's thread would make."""
    now = [0.0]
    model, waits = GatedModel(), Waits()

    def embed(texts: list[str]) -> np.ndarray:
        now[0] += 3 if len(texts) > 1 else 1
        return model.embed(texts)

    batcher = EmbedBatcher(
        embed, model.run_blocking, regroup=regroup, regroup_max_s=regroup_max_s, clock=lambda: now[0], wait_for=waits
    )
    first, pair = await alone_then_together(batcher, model, ("b", "c"))
    await asyncio.gather(first, *pair)
    return batcher, model, waits


async def test_the_wait_after_a_shared_call_is_bounded_by_that_call_s_duration() -> None:
    """A call of two callers that took 3 is followed by a wait of at most ``regroup`` x 3; a
    call of one caller by none."""
    batcher, model, waits = await waits_after_a_slow_shared_call(0.5, 10.0)
    assert model.batches == [["first"], ["b", "c"]]
    assert waits.bounds == [1.5]
    assert batcher.regroup_waits == 1


async def test_the_wait_is_never_longer_than_its_cap_however_slow_the_call() -> None:
    """A call that took 3 (a slow /embed server's) is followed by a wait of at most the cap,
    not 3: callers that come back do so within the server's own turnaround."""
    _, _, waits = await waits_after_a_slow_shared_call(1.0, 0.02)
    assert waits.bounds == [0.02]
    with pytest.raises(ValueError, match="regroup_max_s"):
        EmbedBatcher(HashEmbedder().embed, GatedModel().run_blocking, regroup=1.0, regroup_max_s=-1)


def test_the_default_settings_cap_the_wait_at_20_ms() -> None:
    embedders = Embedders(Settings(data_dir=Path("unused")), HashEmbedder())
    assert embedders.batcher(HashEmbedder()).regroup_max_s == 0.02
    assert load_settings({"MEMSTREAM_EMBED_BATCH_REGROUP_MAX_MS": "5"}).embed_batch_regroup_max_ms == 5.0
    with pytest.raises(SettingsError, match="MEMSTREAM_EMBED_BATCH_REGROUP_MAX_MS"):
        load_settings({"MEMSTREAM_EMBED_BATCH_REGROUP_MAX_MS": "-1"})


async def test_a_failed_shared_call_fails_its_callers_without_a_wait() -> None:
    """Callers of a failed call learn it at once, and the model does not wait for them."""
    model, waits = GatedModel(), Waits()

    def embed(texts: list[str]) -> np.ndarray:
        if texts == ["x", "y"]:
            raise RuntimeError("model crashed")
        return model.embed(texts)

    batcher = EmbedBatcher(embed, model.run_blocking, regroup=1.0, wait_for=waits)
    first, doomed = await alone_then_together(batcher, model, ("x", "y"))
    assert np.array_equal(await first, expected(["first"]))
    for task in doomed:
        with pytest.raises(RuntimeError, match="model crashed"):
            await task
    assert waits.bounds == [] and batcher.regroup_waits == 0


async def test_regroup_zero_never_waits() -> None:
    model, waits = GatedModel(), Waits()
    batcher = EmbedBatcher(model.embed, model.run_blocking, regroup=0.0, wait_for=waits)
    await asyncio.gather(*(batcher.embed([f"t{i}"]) for i in range(4)))
    await asyncio.gather(*(batcher.embed([f"u{i}"]) for i in range(4)))
    assert waits.bounds == []


async def test_after_a_shared_call_the_next_call_takes_its_callers_back_together() -> None:
    """Two callers answered together come back one after the other (closed-loop clients): the
    model waits for both and embeds them in one call, where it used to embed each alone. The
    wait counts those already queued: it is for the call's callers on top of them."""
    model = ThreadedModel()
    entered = threading.Event()
    wants: list[bool] = []

    def wait_for(cond: threading.Condition, predicate: Callable[[], bool], timeout: float) -> bool:
        wants.append(predicate())
        if entered.is_set():  # after the last shared call: nobody comes back, the bound passes
            return predicate()
        entered.set()
        return cond.wait_for(predicate, 30)  # not the bound: the callers come back well before

    with ThreadPoolExecutor(max_workers=1) as pool:
        loop = asyncio.get_running_loop()
        batcher = EmbedBatcher(
            model.embed, lambda call: loop.run_in_executor(pool, call), regroup=1.0, wait_for=wait_for
        )
        first = asyncio.create_task(batcher.embed(["first"]))
        assert await asyncio.to_thread(model.started[0].wait, 10)
        pair = [asyncio.create_task(batcher.embed([t])) for t in ("b", "c")]
        await asyncio.sleep(0)  # both queued while the first call runs
        model.release_first.set()
        await asyncio.gather(first, *pair)  # the shared call ["b", "c"] answered
        assert await asyncio.to_thread(entered.wait, 10), "the model did not wait for its callers"
        back_b = asyncio.create_task(batcher.embed(["b again"]))
        for _ in range(5):
            await asyncio.sleep(0)  # b is queued; the model goes on waiting for c
        back_c = asyncio.create_task(batcher.embed(["c again"]))
        assert np.array_equal(await back_b, expected(["b again"]))
        assert np.array_equal(await back_c, expected(["c again"]))
    assert model.batches == [["first"], ["b", "c"], ["b again", "c again"]]
    assert wants == [False, False]
