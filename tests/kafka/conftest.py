"""Fixtures every Kafka test module shares."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Iterator

import pytest

from memstream.streams.log.kafka import KafkaConfig
from tests.support.broker import deployment_config, drop_topics, require_broker
from tests.support.deployment import Deployment
from tests.support.master_key import TEST_MASTER_KEY, VARIABLES


@pytest.fixture(scope="package", autouse=True)
def master_key() -> Iterator[str]:
    """Set in this process's environment for the Kafka tests only (what they run in process
    reads it too), and restored after them (embedded tests keep their own)."""
    saved = {k: os.environ.get(k) for k in VARIABLES}
    os.environ.pop("MEMSTREAM_MASTER_KEY_FILE", None)
    os.environ["MEMSTREAM_MASTER_KEY"] = TEST_MASTER_KEY
    try:
        yield TEST_MASTER_KEY
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(autouse=True)
def no_leaked_key_store() -> Iterator[None]:
    """A key store a test opened in this process is closed by the end of the test (its fixtures'
    included): one left open reads the keys topic of a deployment whose topics are dropped, for
    the rest of the session, logging an error a few hundred times a second into every later
    test's captured log (and costing this process a tenth of a core)."""
    before = set(threading.enumerate())
    yield
    left = [t for t in threading.enumerate() if t not in before and t.name == "memstream-keys" and t.is_alive()]
    if left:
        pytest.fail(f"{len(left)} key store(s) opened by this test still run: close them (KafkaFeed.close, "
                    "LazySealing.close, KafkaKeyStore.close)", pytrace=False)  # fmt: skip


@pytest.fixture
async def cfg(request: pytest.FixtureRequest) -> AsyncIterator[KafkaConfig]:
    """A deployment of the test's own on the test broker (the module's ``PARTITIONS``), whose
    topics are deleted afterwards."""
    await require_broker()
    config = deployment_config(getattr(request.module, "PARTITIONS", 3))
    yield config
    await drop_topics(config.prefix)


@pytest.fixture
def shared_cfg() -> Iterator[KafkaConfig]:
    """Topics of the test's own (2 partitions) for tests that run no event loop of their own
    (the key store runs its own), deleted afterwards."""
    asyncio.run(require_broker())
    config = deployment_config(2)
    try:
        yield config
    finally:
        asyncio.run(drop_topics(config.prefix))


@pytest.fixture
def deployment(cfg: KafkaConfig) -> Iterator[Deployment]:
    """Real worker and router processes of the test's own deployment (the test starts what it
    needs), stopped after it."""
    d = Deployment(cfg)
    try:
        yield d
    finally:
        d.stop()
