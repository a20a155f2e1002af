"""Fixtures every Kafka test module shares."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from integration.broker import deployment_config, drop_topics, require_broker
from memstream.streams.kafka_log import KafkaConfig


@pytest.fixture
async def cfg(request: pytest.FixtureRequest) -> AsyncIterator[KafkaConfig]:
    """A deployment of the test's own on the test broker (the module's ``PARTITIONS``), whose
    topics are deleted afterwards."""
    await require_broker()
    config = deployment_config(getattr(request.module, "PARTITIONS", 3))
    yield config
    await drop_topics(config.prefix)
