"""Fixtures every Kafka test module shares."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from memstream.streams.log.kafka import KafkaConfig
from tests.support.broker import deployment_config, drop_topics, require_broker


@pytest.fixture
async def cfg(request: pytest.FixtureRequest) -> AsyncIterator[KafkaConfig]:
    """A deployment of the test's own on the test broker (the module's ``PARTITIONS``), whose
    topics are deleted afterwards."""
    await require_broker()
    config = deployment_config(getattr(request.module, "PARTITIONS", 3))
    yield config
    await drop_topics(config.prefix)


@pytest.fixture
def deployment(cfg: KafkaConfig) -> Iterator[Any]:
    """Real worker and router processes of the test's own deployment
    (``tests.kafka.test_kafka_mode.Deployment``; the test starts what it needs), stopped after it."""
    from tests.kafka.test_kafka_mode import Deployment

    d = Deployment(cfg)
    try:
        yield d
    finally:
        d.stop()
