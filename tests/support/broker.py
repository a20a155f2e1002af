"""Finding the Kafka broker the integration tests run against, shared by every Kafka test.

``MEMSTREAM_TEST_KAFKA_BOOTSTRAP`` (default ``127.0.0.1:9092``), e.g. the broker of
``infra/kafka-local.sh start``. When no broker answers, the tests are skipped, unless
``MEMSTREAM_REQUIRE_KAFKA=1`` (CI), where they fail with the reason.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient

BOOTSTRAP = os.environ.get("MEMSTREAM_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
REQUIRE_KAFKA = os.environ.get("MEMSTREAM_REQUIRE_KAFKA", "").strip().lower() in {"1", "true", "yes"}
# Replication of the test topics: 1 works on any cluster; set 3 to exercise a 3-broker cluster.
TEST_REPLICATION = int(os.environ.get("MEMSTREAM_TEST_KAFKA_REPLICATION", "1"))

PROBE_TIMEOUT_S = 10.0  # to decide "no broker here"
TEST_TIMEOUT_S = 60.0  # whole-test deadline
STEP_TIMEOUT_S = 30.0  # one produce / consume / admin phase
_probe_outcome: dict[str, str | None] = {}


def _bootstrap_hosts() -> list[tuple[str, int]]:
    hosts = []
    for part in BOOTSTRAP.split(","):
        host, _, port = part.strip().rpartition(":")
        hosts.append((host.strip("[]") or "127.0.0.1", int(port or 9092)))
    return hosts


def local_broker_logs() -> Path:
    """The log directory of the broker infra/kafka-local.sh started for BOOTSTRAP on this
    machine (its data directory follows the port, or ``MEMSTREAM_KAFKA_DATA``): where tests that
    scan the broker's segment files look."""
    data = os.environ.get("MEMSTREAM_KAFKA_DATA") or f"/tmp/memstream-kafka-{_bootstrap_hosts()[0][1]}"
    return Path(data) / "kraft-logs"


async def _probe() -> str | None:
    """None when a broker answers metadata at BOOTSTRAP, else the reason it does not."""
    reasons = []
    for host, port in _bootstrap_hosts():
        try:
            with socket.create_connection((host, port), timeout=3):
                break
        except OSError as exc:
            reasons.append(f"{host}:{port}: {exc}")
    else:
        return "no TCP connection: " + "; ".join(reasons)
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP, request_timeout_ms=5000)
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            await admin.start()
            cluster = await admin.describe_cluster()
        if not cluster.get("brokers"):
            return "metadata lists no broker"
        return None
    except Exception as exc:
        return f"metadata request failed: {type(exc).__name__}: {exc}"
    finally:
        await admin.close()


async def require_broker() -> None:
    """Skip (or, with MEMSTREAM_REQUIRE_KAFKA=1, fail) when no broker answers; probed once."""
    if BOOTSTRAP not in _probe_outcome:
        _probe_outcome[BOOTSTRAP] = await _probe()
    reason = _probe_outcome[BOOTSTRAP]
    if reason is None:
        return
    message = (
        f"no Kafka broker answers at MEMSTREAM_TEST_KAFKA_BOOTSTRAP={BOOTSTRAP} ({reason}). "
        "Start one with `infra/kafka-local.sh start`, or point MEMSTREAM_TEST_KAFKA_BOOTSTRAP at a cluster."
    )
    if REQUIRE_KAFKA:
        pytest.fail(f"MEMSTREAM_REQUIRE_KAFKA=1 but {message}", pytrace=False)
    pytest.skip(message)


async def wait_until(what: str, check: Callable[[], Awaitable[bool]], timeout: float = STEP_TIMEOUT_S) -> None:
    """Poll ``check`` until it returns True; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    while not await check():
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting until {what}")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.5)


def deployment_config(partitions: int) -> Any:
    """A deployment of its own for one test: a unique topic prefix on the test broker."""
    from memstream.streams.log.kafka import KafkaConfig

    return KafkaConfig(
        bootstrap=BOOTSTRAP,
        prefix=f"memstream-it-{uuid.uuid4().hex[:10]}",
        partitions=partitions,
        replication=TEST_REPLICATION,
    )


async def drop_topics(prefix: str) -> None:
    """Delete every topic a test's deployment created."""
    from memstream.streams.log.kafka import delete_topics_with_prefix

    await delete_topics_with_prefix(BOOTSTRAP, prefix)


def stop_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every process still running, wait, and kill what does not stop in 30 s."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
