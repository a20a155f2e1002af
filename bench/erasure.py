"""What sealing and erasure cost (issue 16), in process, embedding excluded (a random-vector
embedder of the default model's size stands in for the model).

    python bench/erasure.py                 # default sizes
    python bench/erasure.py --quick         # a smoke run
    python bench/erasure.py --erase-memories 100000
    python bench/erasure.py --skip-cost --ab --ab-rounds 2   # the erase as before and as now, same run
    python bench/erasure.py --kafka-seal 50000   # memstream seal --kafka of plaintext topics (a broker)

1. Store throughput and recall latency with sealing on and off (MEMSTREAM_SEALING), in the
   same run, alternating the order round by round; the ratio on/off is the cost.
2. erase_agent_data of one agent holding --erase-memories memories: how long it takes, and
   the latency of another agent's stores issued during it (the erasure must not block them).
3. --kafka-seal N: N plaintext stores written to a throwaway deployment's topics by the decider
   with sealing off, then migrated by ``seal_topics`` (memstream seal --kafka); its report.
Results: bench/results/erasure.json (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import erasure_trace  # noqa: E402  (bench/, beside this file)

from memstream.api.services.engine import EmbeddedEngine  # noqa: E402
from memstream.api.services.settings import load_settings  # noqa: E402
from memstream.api.tools.dispatch import dispatch  # noqa: E402
from memstream.api.tools.registry import Caller  # noqa: E402
from memstream.streams.commands import EraseAgentData  # noqa: E402

CALLER = Caller(client_id="bench")
WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
]


class RandomEmbedder:
    """Unit vectors of the default model's size, seeded by the text: no model cost."""

    model_id = "bench-random-384"
    dim = 384

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            v = np.random.default_rng(abs(hash(t)) % 2**32).standard_normal(self.dim).astype(np.float32)
            out[i] = v / np.linalg.norm(v)
        return out


def text(i: int, agent: str) -> str:
    rng = np.random.default_rng(i)
    words = " ".join(WORDS[j] for j in rng.integers(0, len(WORDS), 12))
    return f"{agent} note {i}: {words}"


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.array(xs), q)) if xs else float("nan")


async def open_engine(data: Path, sealing: bool) -> EmbeddedEngine:
    data.mkdir(parents=True, exist_ok=True)
    os.environ["MEMSTREAM_SEALING"] = "on" if sealing else "off"
    eng = EmbeddedEngine(load_settings(env={}, data_dir=data), embedder=RandomEmbedder())
    await eng.start()
    return eng


async def store_many(eng: EmbeddedEngine, agent: str, start: int, n: int, concurrency: int) -> float:
    """Store n memories with ``concurrency`` callers; returns stores per second."""
    next_i = start
    end = start + n

    async def caller() -> None:
        nonlocal next_i
        while next_i < end:
            i = next_i
            next_i += 1
            out = await dispatch(eng, CALLER, "store", {"agent_id": agent, "content": text(i, agent)})
            assert out.get("result") == "stored", out

    t0 = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return n / (time.perf_counter() - t0)


async def recall_latencies(eng: EmbeddedEngine, agent: str, queries: int, first: int = 0) -> list[float]:
    out = []
    for q in range(first, first + queries):
        t0 = time.perf_counter()
        await dispatch(eng, CALLER, "recall", {"agent_id": agent, "query": text(10_000_000 + q, agent), "limit": 10})
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def sealing_cost(root: Path, rounds: int, stores: int, concurrency: int, queries: int) -> dict[str, Any]:
    rates: dict[str, list[float]] = {"on": [], "off": []}
    recall: dict[str, list[float]] = {"on": [], "off": []}
    for r in range(rounds):
        order = ("off", "on") if r % 2 == 0 else ("on", "off")
        for mode in order:
            eng = await open_engine(root / f"cost-{mode}-{r}", mode == "on")
            try:
                rates[mode].append(await store_many(eng, "a", 0, stores, concurrency))
            finally:
                await eng.close()
            print(f"round {r} sealing {mode}: {rates[mode][-1]:.0f} stores/s", flush=True)
    # Recall: both stores open at once (each re-opened, so each folds its sealed or clear log
    # from its checkpoint), queries alternating between them one by one.
    engines = {m: await open_engine(root / f"cost-{m}-0", m == "on") for m in ("off", "on")}
    try:
        for q in range(queries):
            for mode in ("off", "on") if q % 2 == 0 else ("on", "off"):
                recall[mode].extend(await recall_latencies(engines[mode], "a", 1, q))
    finally:
        for eng in engines.values():
            await eng.close()
    med = {m: statistics.median(v) for m, v in rates.items()}
    return {
        "stores_per_round": stores,
        "concurrency": concurrency,
        "rounds": rounds,
        "stores_per_s": {m: [round(x, 1) for x in v] for m, v in rates.items()},
        "stores_per_s_median": {m: round(v, 1) for m, v in med.items()},
        "store_throughput_ratio_on_off": round(med["on"] / med["off"], 4),
        "recall_ms": {
            m: {"p50": round(pct(v, 50), 3), "p99": round(pct(v, 99), 3), "n": len(v)} for m, v in recall.items()
        },
        "recall_p50_ratio_on_off": round(pct(recall["on"], 50) / pct(recall["off"], 50), 4),
    }


async def fill_big_agent(data: Path, memories: int, concurrency: int) -> float:
    """``memories`` stores of agent "big" and 200 of "other" into a new data directory; seconds."""
    eng = await open_engine(data, True)
    try:
        t0 = time.perf_counter()
        # In slices with a read between them, as a served store has: the read models stay
        # folded (a store looks for embedding switches in the log past them).
        for start in range(0, memories, 5000):
            await store_many(eng, "big", start, min(5000, memories - start), concurrency)
            await eng.read(lambda: None)
        fill_s = time.perf_counter() - t0
        await store_many(eng, "other", 0, 200, 8)
        return fill_s
    finally:
        await eng.close()


async def erase_big_agent(
    root: Path,
    memories: int,
    concurrency: int,
    baseline_s: float = 3.0,
    trace: bool = False,
    filled: Path | None = None,
) -> dict[str, Any]:
    """With ``filled`` (a data directory ``fill_big_agent`` made): erase in a copy of it, so
    an A/B's two sides start from the same store and the fill is paid once."""
    fill_s = 0.0
    if filled is None:
        fill_s = await fill_big_agent(root / "erase", memories, concurrency)
    else:
        shutil.copytree(filled, root / "erase")
    eng = await open_engine(root / "erase", True)
    try:
        await eng.read(lambda: None)  # the read models caught up, as after a fill
        latencies: list[float] = []
        done = asyncio.Event()
        tl = erasure_trace.Timeline()

        async def other_writer() -> None:
            i = 1_000
            while not done.is_set():
                s = time.perf_counter()
                out = await dispatch(eng, CALLER, "store", {"agent_id": "other", "content": text(i, "other")})
                assert out.get("result") == "stored", out
                e = time.perf_counter()
                latencies.append((e - s) * 1000)
                tl.stores.append((s, e))
                i += 1
                await asyncio.sleep(0.005)

        commits = time_writer_commits(eng)
        tracing = ExitStack()
        if trace:
            sampler = erasure_trace.Sampler(tl)
            sampler.start()
            tracing.callback(sampler.stop.set)
            tracing.enter_context(erasure_trace.phases(tl, eng))
            ticker = asyncio.create_task(erasure_trace.loop_ticker(tl, done))
        writer = asyncio.create_task(other_writer())
        # The other agent's stores before the erase, in the same run: the baseline of "during".
        await asyncio.sleep(baseline_s)
        baseline = list(latencies)
        latencies.clear()
        t0 = time.perf_counter()
        commits.clear()
        tl.t0 = time.perf_counter()
        out = await dispatch(eng, CALLER, "erase_agent_data", {"agent_id": "big", "reason": "benchmark"})
        erase_s = time.perf_counter() - t0
        others = [ms for ms, erasing in commits if not erasing]
        during = list(latencies)
        erase_end = time.perf_counter()
        await asyncio.sleep(1.0 if trace else 0)  # what the erasure left running (release thread)
        done.set()
        await writer
        if trace:
            await ticker
            tracing.close()
        after = [(e - s) * 1000 for s, e in tl.stores if s >= erase_end]
        assert out["ok"] and out["erased_memories"] == memories, out
        return {
            "memories": memories,
            "fill_seconds": round(fill_s, 2),
            "erase_seconds": round(erase_s, 3),
            "keys_destroyed": out["keys_destroyed"],
            "other_agent_store_ms_before": {
                "p50": round(pct(baseline, 50), 2),
                "p99": round(pct(baseline, 99), 2),
                "max": round(max(baseline), 2) if baseline else None,
                "n": len(baseline),
            },
            "other_agent_store_ms_during": {
                "p50": round(pct(during, 50), 2),
                "p99": round(pct(during, 99), 2),
                "max": round(max(during), 2) if during else None,
                "n": len(during),
            },
            # What every write queued behind it waits for: the writer thread's commit of the erasure
            # (deciding it, folding it into the decision state, appending it), and of the others.
            **(
                {
                    "other_agent_store_ms_1s_after": {
                        "p99": round(pct(after, 99), 2),
                        "max": round(max(after), 2) if after else None,
                        "n": len(after),
                    },
                    "trace": erasure_trace.report(tl),
                }
                if trace
                else {}
            ),
            "writer_erasure_commit_ms": [round(ms, 2) for ms, erasing in commits if erasing],
            "writer_other_commits_ms_during": {
                "p50": round(pct(others, 50), 2),
                "max": round(max(others), 2) if others else None,
                "n": len(others),
            },
        }
    finally:
        await eng.close()


def time_writer_commits(eng: EmbeddedEngine) -> list[tuple[float, bool]]:
    """(ms, whether it held an erase_agent_data) of each of the bus's commits on its writer thread."""
    bus = eng.bus
    commit = bus._commit
    out: list[tuple[float, bool]] = []

    def timed(items: list[Any]) -> list[Any]:
        t = time.perf_counter()
        try:
            return commit(items)
        finally:
            out.append(((time.perf_counter() - t) * 1000, any(isinstance(i, EraseAgentData) for i in items)))

    bus._commit = timed  # type: ignore[method-assign]
    return out


@contextmanager
def erase_path(variant: str, changes: str = "vectors") -> Iterator[None]:
    """``before``: the erase without ``changes`` (--ab-of): ``vectors``, the vector read model
    removing an erased agent's rows one at a time (``_forget`` per row; its graphs are dropped
    first either way, so this "before" is a little faster than the code before that change);
    ``checkpoint``, the decision snapshot built on the writer thread; ``ewait``, both; ``kmig``,
    the four changes before those; ``eemb``, the four after them (``_before_eemb``);
    ``writer``, the erasure's step on the writer thread with its Python passes over the agent's
    records (``_before_writer``); ``listed``, the agent erasure's event listing every memory
    and episode id (``_before_listed``); ``stalls``, the decision capture copying every facts
    object and memo on the writer and checkpoints dumped in one call (``_before_stalls``).
    ``now``: as it is."""
    if variant == "now":
        yield
        return
    if changes == "kmig":
        with _before_kmig():
            yield
        return
    if changes == "eemb":
        with _before_eemb():
            yield
        return
    if changes == "writer":
        with _before_writer():
            yield
        return
    if changes == "listed":
        with _before_listed():
            yield
        return
    if changes == "stalls":
        with _before_stalls():
            yield
        return
    with ExitStack() as undone:
        if changes in ("vectors", "ewait"):
            undone.enter_context(_vectors_one_by_one())
        if changes in ("checkpoint", "ewait"):
            undone.enter_context(_snapshot_on_the_writer())
        yield


@contextmanager
def _snapshot_on_the_writer() -> Iterator[None]:
    """The erasure's decision snapshot built on the bus's writer thread, every write waiting."""
    from memstream.streams.buses import embedded
    from memstream.streams.decision.state import DecisionState

    class Built:
        def __init__(self, state: DecisionState) -> None:
            self.body = state.to_snapshot()

        def to_snapshot(self) -> dict[str, Any]:
            return self.body

    kept = embedded.capture
    embedded.capture = Built  # type: ignore[assignment]
    try:
        yield
    finally:
        embedded.capture = kept


@contextmanager
def _vectors_one_by_one() -> Iterator[None]:
    """The vector read model removing an erased agent's rows one at a time."""
    from memstream.projections.vectors.projection import VectorProjection

    def vectors_one_by_one(self: VectorProjection, ag: Any, keys: list[int]) -> None:
        for key in keys:
            self._forget(ag, key)

    kept_forget_many = VectorProjection._forget_many
    VectorProjection._forget_many = vectors_one_by_one  # type: ignore[method-assign]
    try:
        yield
    finally:
        VectorProjection._forget_many = kept_forget_many  # type: ignore[method-assign]


@contextmanager
def _before_eemb() -> Iterator[None]:
    """The erase as it was before four changes (``--ab-of eemb``): what an erasure drops (the
    sealer's cached keys, the decision facts) freed at once on the writer thread instead of in
    slices on the release thread; a take() of a pooled key waiting for the key store's
    connection (held by each destruction transaction, of 2,000 keys then) instead of the
    pool's own lock; the cyclic collector on during the erasure's steps; the interpreter's
    switch interval left at its default."""
    from memstream.api.services import erasure as erasure_service
    from memstream.streams.decision import facts
    from memstream.streams.keys import sqlite as sqlite_keys
    from memstream.streams.log import sealing

    def freed_at_once(*containers: Any) -> None:
        """The caller drops the last reference: freed where it stands, as before."""

    def take_under_the_connection_lock(self: sqlite_keys.SqliteKeyStore) -> tuple[bytes, bytes]:
        with self._lock:
            if not self._pool:
                self._refill()
            return self._pool.pop()

    kept = (sealing.release_later, facts.release_later, sqlite_keys.SqliteKeyStore.take, sqlite_keys.DESTROY_CHUNK)
    paused, switches = erasure_service.collector_paused, erasure_service.short_switches
    sealing.release_later = facts.release_later = freed_at_once
    sqlite_keys.SqliteKeyStore.take = take_under_the_connection_lock  # type: ignore[method-assign]
    sqlite_keys.DESTROY_CHUNK = 2_000
    erasure_service.collector_paused = erasure_service.short_switches = nullcontext  # type: ignore[assignment]
    try:
        yield
    finally:
        sealing.release_later, facts.release_later, sqlite_keys.SqliteKeyStore.take, sqlite_keys.DESTROY_CHUNK = kept  # type: ignore[method-assign]
        erasure_service.collector_paused, erasure_service.short_switches = paused, switches


@contextmanager
def _before_writer() -> Iterator[None]:
    """The erasure's step on the writer thread as it was before (``--ab-of writer``): the
    decider finding the locks it overrides by reading every memory's facts; the decision state
    forgetting all of an agent's memories by filtering each index in Python; the agent's command
    memos scanned for reports to redact whether it declared anything or not; the sealer dropping
    its opening keys one by one in Python on the writer; the answer looking up every erased
    ref's history on the event loop whatever the log."""
    from memstream.streams.decision import dispatch
    from memstream.streams.decision.facts import AgentDecisionState
    from memstream.streams.decision.state import DecisionState
    from memstream.streams.log.sealing import Sealer
    from memstream.streams.release import release_later

    decide_now, erase_now, forget_now = dispatch.decide_erase_agent, DecisionState._erase, Sealer.forget
    forget_memories_now = AgentDecisionState.forget_memories

    def decide_by_scan(state: Any, st: AgentDecisionState, cmd: Any, ctx: Any) -> Any:
        ids = sorted(st.memories)
        sorted(mid for mid in ids if st.memories[mid].locked)  # what the payload's locks cost then
        return decide_now(state, st, cmd, ctx)

    def forget_memories_filtered(self: AgentDecisionState, memory_ids: list[int]) -> None:
        gone = set(memory_ids)
        if 2 * len(gone) <= len(self.memories):
            for mid in memory_ids:
                self.forget_memory(mid)
            return
        old = (self.memories, self.by_msg, self.by_content)
        self.memories = {mid: f for mid, f in self.memories.items() if mid not in gone}
        self.by_msg = {k: mid for k, mid in self.by_msg.items() if mid not in gone}
        self.by_content = {k: mid for k, mid in self.by_content.items() if mid not in gone}
        self.locked -= gone
        release_later(*old)

    def erase_redacting_always(st: AgentDecisionState, p: dict[str, Any]) -> None:
        if p.get("agent_scope"):
            st.redact_reports()
        erase_now(st, p)

    def forget_one_by_one(self: Sealer, agent: str, scopes: list[str] | None = None) -> None:
        with self._lock:  # the Python loop of then; what is left for forget_now is then the same
            current = self._current.get(agent, {})
            for key_id, _ in current.values() if scopes is None else [current[s] for s in scopes if s in current]:
                self._open.pop(key_id, None)
        forget_now(self, agent, scopes)

    erase_engine_now = EmbeddedEngine.erase

    async def erase_looking_up_history(self: EmbeddedEngine, command: Any) -> dict[str, Any]:
        out = await erase_engine_now(self, command)
        if out.get("payload") is not None:
            offsets: list[int] = []
            memory_ids, episode_ids = out["dropped"] or ((), ())
            refs = [f"mem:{i}" for i in memory_ids] + [f"ep:{i}" for i in episode_ids]
            await self.read(lambda: offsets.extend(o for r in refs for o in self.history.of(r)))
        return out

    EmbeddedEngine.erase = erase_looking_up_history  # type: ignore[method-assign]
    dispatch.decide_erase_agent = decide_by_scan
    AgentDecisionState.forget_memories = forget_memories_filtered  # type: ignore[method-assign]
    DecisionState._erase = staticmethod(erase_redacting_always)  # type: ignore[method-assign,assignment]
    Sealer.forget = forget_one_by_one  # type: ignore[method-assign]
    try:
        yield
    finally:
        EmbeddedEngine.erase = erase_engine_now  # type: ignore[method-assign]
        dispatch.decide_erase_agent = decide_now
        AgentDecisionState.forget_memories = forget_memories_now  # type: ignore[method-assign]
        DecisionState._erase = staticmethod(erase_now)  # type: ignore[method-assign,assignment]
        Sealer.forget = forget_now  # type: ignore[method-assign]


@contextmanager
def _before_listed() -> Iterator[None]:
    """The erase as it was before its event stopped naming the records (``--ab-of listed``):
    ``agent.erased`` of everything of an agent lists every memory and episode id (sorted on
    the writer thread; encoded there, parsed by the decision fold, the sealer and, in Kafka
    mode, the key map), and every fold drops the ids it lists (streams/decision/whole_agent.py)."""
    from memstream.streams.decision import dispatch
    from memstream.streams.decision.erasure import decide_erase_agent_listing

    decide_now = dispatch.decide_erase_agent
    dispatch.decide_erase_agent = decide_erase_agent_listing
    try:
        yield
    finally:
        dispatch.decide_erase_agent = decide_now


@contextmanager
def _before_stalls() -> Iterator[None]:
    """The erase as it was before wave 7 (``--ab-of stalls``): the capture of the decision
    state for its snapshot copying every memory's facts and each agent's command memo as an
    OrderedDict on the bus's writer thread, each checkpoint serialised by one
    ``orjson.dumps`` call that holds the interpreter lock throughout, and the versions read
    model compacting its columns each time half its slots are dropped during an erasure."""
    from collections import OrderedDict
    from dataclasses import replace

    from memstream.projections.versions import VersionsProjection
    from memstream.streams import snapshots
    from memstream.streams.buses import embedded
    from memstream.streams.decision.associations.index import AssocIndex
    from memstream.streams.decision.facts import AgentDecisionState
    from memstream.streams.decision.state import DecisionState

    def capture_copying(state: DecisionState) -> DecisionState:
        out = type(state)(state.num_partitions)
        out.next_seq = list(state.next_seq)
        out.event_offset, out.audit_offset = state.event_offset, state.audit_offset
        for name, st in state.agents.items():
            out.agents[name] = AgentDecisionState(
                memories={mid: replace(f) for mid, f in st.memories.items()},
                episodes=dict(st.episodes),
                has_profile=st.has_profile,
                model=st.model,
                assoc=None if st.assoc is None else AssocIndex.from_snapshot(st.assoc.to_snapshot()),
                commands=OrderedDict(st.commands.items()),  # type: ignore[arg-type]
            )
        return out

    def drop_compacting(self: VersionsProjection, ref: str, *, compact: bool = True) -> None:
        drop_now(self, ref, compact=True)

    kept = embedded.capture, snapshots.payload_pieces
    drop_now = VersionsProjection._drop
    embedded.capture, snapshots.payload_pieces = capture_copying, lambda body: [orjson.dumps(body)]
    VersionsProjection._drop = drop_compacting  # type: ignore[method-assign]
    try:
        yield
    finally:
        embedded.capture, snapshots.payload_pieces = kept
        VersionsProjection._drop = drop_now  # type: ignore[method-assign]


@contextmanager
def _before_kmig() -> Iterator[None]:
    """The erase as it was before four changes (``--ab-of kmig``, the A/B of them): the lexical
    index removing an erased agent's rows one at a time (no ``AgentIndex.remove_many``), the
    key store destroying all its keys in one transaction, the decision state forgetting the
    memories one by one (no bulk ``forget_memories``), the sealer dropping an agent's cached
    keys by a pass over every agent's (as its flat cache did); ``now``: as it is."""
    from memstream.projections.lexical.index import AgentIndex
    from memstream.streams.decision.facts import AgentDecisionState
    from memstream.streams.keys import sqlite as sqlite_keys
    from memstream.streams.log.sealing import Sealer

    def rows_one_by_one(self: AgentIndex, refs: Iterable[str]) -> None:
        for ref in refs:
            self.remove(ref)

    def memories_one_by_one(self: AgentDecisionState, memory_ids: list[int]) -> None:
        for mid in memory_ids:
            self.forget_memory(mid)

    def forget_by_scan(self: Sealer, agent: str, scopes: list[str] | None = None) -> None:
        with self._lock:
            flat = [(a, s) for a, current in self._current.items() for s in current]
            for a, s in [(a, s) for a, s in flat if a == agent and (scopes is None or s in scopes)]:
                key_id, _ = self._current[a].pop(s)
                self._open.pop(key_id, None)

    kept = (AgentIndex.remove_many, AgentDecisionState.forget_memories, Sealer.forget)
    chunk, pause = sqlite_keys.DESTROY_CHUNK, sqlite_keys.DESTROY_PAUSE_S
    AgentIndex.remove_many = rows_one_by_one  # type: ignore[method-assign]
    AgentDecisionState.forget_memories = memories_one_by_one  # type: ignore[method-assign]
    Sealer.forget = forget_by_scan  # type: ignore[method-assign]
    sqlite_keys.DESTROY_CHUNK, sqlite_keys.DESTROY_PAUSE_S = 1 << 40, 0.0
    try:
        yield
    finally:
        AgentIndex.remove_many, AgentDecisionState.forget_memories, Sealer.forget = kept  # type: ignore[method-assign]
        sqlite_keys.DESTROY_CHUNK, sqlite_keys.DESTROY_PAUSE_S = chunk, pause


async def kafka_seal(bootstrap: str, events: int, partitions: int) -> dict[str, Any]:
    """``memstream seal --kafka`` of a throwaway deployment whose topics hold ``events`` plaintext
    stores (384-d vectors) of 8 agents, written by the decider with sealing off."""
    import secrets
    import uuid

    from memstream.api.services.kafka_seal_migration import seal_topics
    from memstream.streams.commands import StoreMemory
    from memstream.streams.deciders.kafka import KafkaDecider
    from memstream.streams.events import Actor, Embedding, Scope, new_id
    from memstream.streams.log.kafka import KafkaConfig, KafkaLog, delete_topics_with_prefix, ensure_topics
    from memstream.streams.log.port import partition_for

    cfg = KafkaConfig(bootstrap=bootstrap, prefix=f"bench-kseal-{uuid.uuid4().hex[:8]}", partitions=partitions)
    embedder = RandomEmbedder()
    agents = [f"agent-{i}" for i in range(8)]

    def store(i: int) -> tuple[int, StoreMemory]:
        agent = agents[i % len(agents)]
        content = text(i, agent)
        cmd = StoreMemory(
            content=content,
            embedding=Embedding.from_vector(embedder.model_id, embedder.embed([content])[0]),
            command_id=new_id(),
            scope=Scope(agent_id=agent),
            actor=Actor(client_id="bench"),
            received_at=datetime.now(UTC),
        )
        return partition_for(agent, partitions), cmd

    decider = KafkaDecider(KafkaLog(cfg))  # no sealing: the topics of a deployment before it sealed
    decider.owned = set(range(partitions))
    try:
        await ensure_topics(cfg)
        t0 = time.perf_counter()
        for start in range(0, events, 500):
            await asyncio.gather(*(decider.submit_local(*store(i)) for i in range(start, min(start + 500, events))))
        if decider._completing is not None:
            await decider._completing
        write_s = time.perf_counter() - t0
        await decider.kafka.close()
        report = await seal_topics(cfg, f"{cfg.prefix}-sealed", secrets.token_bytes(32))
        return {"events": events, "partitions": partitions, "write_seconds": round(write_s, 2), "migration": report}
    finally:
        await decider.kafka.close()
        await delete_topics_with_prefix(bootstrap, cfg.prefix)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--stores", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--erase-memories", type=int, default=100_000)
    ap.add_argument("--skip-cost", action="store_true", help="Only the erase_agent_data measurement.")
    ap.add_argument(
        "--ab",
        action="store_true",
        help="Erase twice, each on a store of its own: as before a change (--ab-of) and as now.",
    )
    ap.add_argument(
        "--ab-of",
        choices=("vectors", "checkpoint", "ewait", "kmig", "eemb", "writer", "listed", "stalls"),
        default="vectors",
        help="With --ab: which change 'before' undoes: the vector read model's bulk drop of an erased "
        "agent's rows (vectors), the decision snapshot built off the writer thread (checkpoint), "
        "both (ewait), the four earlier ones (kmig: lexical, decision state, key store, sealer), or the four "
        "after them (eemb: dropped structures freed in slices off the writer, the key pool's own lock, the "
        "collector paused and a short switch interval during the erasure), or the passes over the agent's "
        "records its step on the writer thread made (writer), or the event listing every id (listed), or "
        "wave 7's (stalls: the decision capture copying every facts object and memo on the writer, each "
        "checkpoint dumped by one call).",
    )
    ap.add_argument(
        "--trace",
        action="store_true",
        help="Record where the erase stalls other stores (bench/erasure_trace.py): phases, lock holds, loop lag.",
    )
    ap.add_argument("--ab-rounds", type=int, default=1, help="With --ab: rounds, the order alternating by round.")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "erasure.json")
    ap.add_argument("--kafka-seal", type=int, default=0, metavar="N", help="Only the Kafka migration, of N stores.")
    ap.add_argument("--kafka", default="127.0.0.1:9092", help="With --kafka-seal: the broker.")
    ap.add_argument("--partitions", type=int, default=4, help="With --kafka-seal: the topics' partitions.")
    a = ap.parse_args()
    if a.kafka_seal:
        started = os.getloadavg()
        result = await kafka_seal(a.kafka, a.kafka_seal, a.partitions)
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode(), flush=True)
        out = {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "load_average": {"start": started, "end": os.getloadavg()},
            "command": " ".join(["python", "bench/erasure.py", *sys.argv[1:]]),
            "kafka_seal": result,
        }
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
        return
    if a.quick:
        a.rounds, a.stores, a.queries, a.erase_memories = 2, 500, 50, 2000
    with tempfile.TemporaryDirectory(prefix="memstream-erasure-bench-") as tmp:
        root = Path(tmp)
        cost = None if a.skip_cost else await sealing_cost(root, a.rounds, a.stores, a.concurrency, a.queries)
        print(orjson.dumps(cost, option=orjson.OPT_INDENT_2).decode(), flush=True)
        erase: dict[str, Any]
        if a.ab:
            erase = {"before": [], "now": []}
            filled = root / "filled"
            erase["fill_seconds"] = await fill_big_agent(filled, a.erase_memories, a.concurrency)
            for r in range(a.ab_rounds):  # the order alternates by round
                for variant in ("before", "now") if r % 2 == 0 else ("now", "before"):
                    with erase_path(variant, a.ab_of):
                        one = await erase_big_agent(
                            root / f"{variant}-{r}", a.erase_memories, a.concurrency, trace=a.trace, filled=filled
                        )
                    one["load_average_after"] = os.getloadavg()
                    erase[variant].append(one)
                    print(variant, r, orjson.dumps(one, option=orjson.OPT_INDENT_2).decode(), flush=True)
        else:
            erase = await erase_big_agent(root, a.erase_memories, a.concurrency, trace=a.trace)
            print(orjson.dumps(erase, option=orjson.OPT_INDENT_2).decode(), flush=True)
    report = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "load_average": os.getloadavg(),  # the machine is shared: read levels against it
        "command": " ".join(["python", "bench/erasure.py", *sys.argv[1:]]),
        "sealing_cost": cost,
        "erase_agent_data": erase,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    asyncio.run(main())
