"""The Kafka command path against a real broker and real `memstream worker` processes: decisions
match the embedded bus's rules, racing writers never both land (W3), a retried command id gets
its first answer and appends nothing (W9), and a worker killed with SIGKILL mid-stream loses no
acknowledged write and applies none twice once its partitions have moved."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from memstream.streams import commands as c
from memstream.streams.buses.kafka import KafkaCommandBus
from memstream.streams.events import Actor, AuditRecord, Scope, new_id
from memstream.streams.log.kafka import KafkaConfig
from memstream.streams.log.port import LogUnavailable
from tests.support.broker import stop_processes
from tests.support.kafka_commands import T0, all_events, env, store

pytestmark = [pytest.mark.kafka]

PARTITIONS = 3


class Workers:
    """`memstream worker` subprocesses on the test's topics; all stopped at the end."""

    def __init__(self, cfg: KafkaConfig) -> None:
        self.cfg = cfg
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        args = [
            sys.executable, "-m", "memstream.api.cli", "--log-level", "WARNING", "worker",
            "--kafka", self.cfg.bootstrap, "--prefix", self.cfg.prefix,
            "--partitions", str(self.cfg.partitions), "--replication", str(self.cfg.replication),
            "--session-timeout", "6",
        ]  # fmt: skip
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        stop_processes(self.procs)


@pytest.fixture
def workers(cfg: KafkaConfig) -> Iterator[Workers]:
    w = Workers(cfg)
    try:
        yield w
    finally:
        w.stop()


async def started_bus(cfg: KafkaConfig, timeout_s: float = 60.0) -> KafkaCommandBus:
    bus = KafkaCommandBus(cfg, reply_timeout_s=timeout_s)
    await bus.start()
    return bus


async def test_decisions_over_kafka_follow_the_rules(cfg: KafkaConfig, workers: Workers) -> None:
    workers.start()
    bus = await started_bus(cfg)
    try:
        async with asyncio.timeout(120):
            first = await bus.submit(store("alice", "green tea in the morning", msg_id="m1", command_id="c1"))
            assert first.outcome.result == "applied" and first.outcome.id is not None
            assert first.offset is not None
            # W1: the same msg_id is skipped with the existing id
            dup = await bus.submit(store("alice", "something else", msg_id="m1"))
            assert (dup.outcome.result, dup.outcome.id) == ("skipped", first.outcome.id)
            # W9: a retried command id gets its first answer back and appends nothing
            again = await bus.submit(store("alice", "green tea in the morning", msg_id="m1", command_id="c1"))
            assert again.outcome == first.outcome
            # a refusal by the decider (not found) is audited and answered
            missing = await bus.submit(c.DeleteMemory(memory_id=999_999, **env("alice")))
            assert (missing.outcome.result, missing.outcome.error) == ("rejected", "not_found")
            # a refusal decided by the API process travels the same path into the audit topic
            refusal = AuditRecord(
                id=new_id(),
                kind="refused",
                command="store",
                command_id="bad-input-1",
                scope=Scope(agent_id="bob"),
                actor=Actor(client_id="it"),
                occurred_at=T0,
                outcome={"result": "rejected", "reason": "content is empty", "error": "invalid"},
            )
            await bus.record_refusal(refusal)
            # ids are allocated per partition exactly as the embedded log does
            bob = store("bob", "printer paper jam")
            other = await bus.submit(bob)
            assert other.outcome.result == "applied"
            events = await all_events(cfg)
            assert sorted(e["command_id"] for e in events if e["type"] == "memory.stored") == sorted(
                ["c1", bob.command_id]
            )
    finally:
        await bus.close()


async def test_racing_writers_in_two_api_processes_never_both_land(cfg: KafkaConfig, workers: Workers) -> None:
    workers.start()
    buses = [await started_bus(cfg), await started_bus(cfg)]
    try:
        async with asyncio.timeout(120):
            await buses[0].submit(store("warmup", "the workers are up"))
            racers = [
                bus.submit(store("shared", f"writer {i} version of message {k}", msg_id=f"msg-{k}"))
                for k in range(10)
                for i, bus in enumerate(buses * 4)
            ]
            answers = await asyncio.gather(*racers)
        by_msg: dict[int, list[Any]] = {}
        for n, a in enumerate(answers):
            by_msg.setdefault(n // 8, []).append(a.outcome)
        for outcomes in by_msg.values():
            applied = [o for o in outcomes if o.result == "applied"]
            assert len(applied) == 1, outcomes
            assert {o.id for o in outcomes} == {applied[0].id}
        stored = [e for e in await all_events(cfg) if e["type"] == "memory.stored"]
        assert len(stored) == 11
    finally:
        for bus in buses:
            await bus.close()


async def test_a_worker_killed_mid_stream_loses_and_duplicates_nothing(cfg: KafkaConfig, workers: Workers) -> None:
    first = workers.start()
    workers.start()
    bus = await started_bus(cfg, timeout_s=10)
    acknowledged: dict[str, int] = {}
    agents = [f"agent-{i}" for i in range(9)]  # spread over all partitions

    async def writer(n: int) -> None:
        for i in range(40):
            cmd = store(agents[(n + i) % len(agents)], f"writer {n} note {i}")
            for _ in range(12):  # retried with the same command id until a decider answers
                try:
                    out = await bus.submit(cmd)
                except LogUnavailable:
                    continue
                assert out.outcome.result == "applied", out.outcome
                acknowledged[cmd.command_id] = out.outcome.id  # type: ignore[assignment]
                break
            else:
                pytest.fail(f"command {cmd.command_id} never answered")

    try:
        async with asyncio.timeout(300):
            warmup = store("warmup", "both workers are up")
            for _ in range(12):  # the two workers' first rebalances can outlast one 10 s reply timeout
                try:
                    await bus.submit(warmup)  # retried under the same command id, as the writers do
                    break
                except LogUnavailable:
                    continue
            else:
                pytest.fail("no worker answered the warm-up")
            tasks = [asyncio.create_task(writer(n)) for n in range(4)]
            while len(acknowledged) < 40:
                await asyncio.sleep(0.05)
            first.send_signal(signal.SIGKILL)  # mid-stream: writes keep coming
            first.wait(timeout=30)
            await asyncio.gather(*tasks)
        events = [e for e in await all_events(cfg) if e["type"] == "memory.stored"]
        by_command = Counter(e["command_id"] for e in events)
        assert not [cid for cid, n in by_command.items() if n > 1], "a command was applied twice"
        assert set(acknowledged) <= set(by_command), "an acknowledged write is missing"
        assert len(acknowledged) == 160
        ids = {e["command_id"]: e["payload"]["id"] for e in events}
        assert all(ids[cid] == mid for cid, mid in acknowledged.items())
    finally:
        await bus.close()


def test_worker_without_a_broker_fails_clearly() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "memstream.api.cli", "worker", "--kafka", "127.0.0.1:1", "--prefix", "x"],
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode != 0
    assert b"no Kafka cluster answers at 127.0.0.1:1" in proc.stderr
