"""Fixtures every Kafka test module shares."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from memstream.streams.log.kafka import KafkaConfig
from tests.support.broker import deployment_config, drop_topics, require_broker
from tests.support.deployment import Deployment


@pytest.fixture
async def cfg(request: pytest.FixtureRequest) -> AsyncIterator[KafkaConfig]:
    """A deployment of the test's own on the test broker (the module's ``PARTITIONS``), whose
    topics are deleted afterwards."""
    await require_broker()
    config = deployment_config(getattr(request.module, "PARTITIONS", 3))
    yield config
    await drop_topics(config.prefix)


@pytest.fixture
def deployment(cfg: KafkaConfig) -> Iterator[Deployment]:
    """Real worker and router processes of the test's own deployment (the test starts what it
    needs), stopped after it."""
    d = Deployment(cfg)
    try:
        yield d
    finally:
        d.stop()
