"""A Kafka worker's store asks the decider for the agent's model instead of the partition's
read models: an erasure's fold holds those (the partition's lock) for seconds at 100k
memories, and a store of another agent of the partition embeds first (issue 16)."""

from __future__ import annotations

import asyncio

from memstream.api.kafka.worker.engine import PartitionEngine
from memstream.api.kafka.worker.models import PartitionModels
from memstream.api.services.named_models import NamedModels
from memstream.streams.deciders.kafka import KafkaDecider
from memstream.streams.decision.state import DecisionState


class Side:
    """The worker as a partition's engine sees it, holding a decider (or none)."""

    def __init__(self, decider: KafkaDecider | None) -> None:
        self.decider = decider
        self.acked: dict[int, int] = {}


def decider_with(partition: int, state: DecisionState | None) -> KafkaDecider:
    decider = KafkaDecider.__new__(KafkaDecider)  # only what decided_model reads: no broker
    decider.failure = None
    decider.owned = {partition}
    decider.states = {} if state is None else {partition: state}
    return decider


def engine_of(side: Side, models: PartitionModels) -> PartitionEngine:
    engine = PartitionEngine.__new__(PartitionEngine)
    engine.worker = side  # type: ignore[assignment]
    engine.models = models
    NamedModels.__init__(engine, models.projections)  # what reads use: the vectors among them
    return engine


async def test_the_model_comes_from_the_decider_while_the_read_models_are_held() -> None:
    state = DecisionState(1)
    state.agent("a").saw_model(("minilm",))
    models = PartitionModels(0, 0)
    engine = engine_of(Side(decider_with(0, state)), models)
    async with models.lock:  # an erasure folding on the partition
        assert await asyncio.wait_for(engine.agent_model("a"), 10) == "minilm"
        assert await asyncio.wait_for(engine.agent_model("b"), 10) is None  # decided nothing yet


async def test_without_the_decider_s_state_the_read_models_answer() -> None:
    models = PartitionModels(0, 0)
    for side in (Side(None), Side(decider_with(0, None))):
        engine = engine_of(side, models)
        assert await asyncio.wait_for(engine.agent_model("a"), 10) is None
        async with models.lock:
            waiting = asyncio.ensure_future(engine.agent_model("a"))
            for _ in range(20):  # loop turns, no clock: nothing here waits on I/O
                await asyncio.sleep(0)
            assert not waiting.done()  # it reads the read models, so it waits for their lock
        assert await asyncio.wait_for(waiting, 10) is None
