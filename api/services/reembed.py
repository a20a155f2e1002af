"""Re-embedding: move agents' vectors to another model while recall keeps answering, as a
loop over the log's own state that can be killed and rerun at any point.
See docs/embedding.md, "Re-embedding".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from memstream.api.services.embedding import Embedder
from memstream.api.services.ports import Engine, ReadModels
from memstream.streams import commands as c
from memstream.streams.decision.keys import content_key
from memstream.streams.events import Actor, Embedding, Scope, new_id, utcnow

log = logging.getLogger(__name__)

# Progress: (records re-embedded so far, records known to need it so far). The second number
# grows when writes land during the job.
Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class Pending:
    ref: str  # mem:<id> / ep:<id>
    text: str
    key: str | None  # content digest of a memory's text (episodes never change)


@dataclass(slots=True)
class AgentReport:
    agent_id: str
    model: str
    reembedded: int = 0
    retried: int = 0  # vectors refused because the record changed or vanished meanwhile
    passes: int = 0
    switched: bool = False
    previous: str | None = None
    error: str | None = None


@dataclass(slots=True)
class ReembedReport:
    model: str
    agents: list[AgentReport] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return all(a.switched for a in self.agents)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "complete": self.complete,
            "reembedded": sum(a.reembedded for a in self.agents),
            "agents": [asdict(a) for a in self.agents],
        }


def pending_for(engine: ReadModels, agent_id: str, model: str) -> list[Pending]:
    """Live records of the agent without a vector of ``model``, oldest first (call under read)."""
    out = []
    for m in engine.memories.of_agent(agent_id):
        ref = f"mem:{m.id}"
        if not engine.vectors.holds(agent_id, ref, model):
            out.append(Pending(ref, m.content, content_key(m.content).hex()))
    for e in engine.episodes.of_agent(agent_id):
        ref = f"ep:{e.id}"
        if not engine.vectors.holds(agent_id, ref, model):
            out.append(Pending(ref, e.summary, None))
    return out


def known_agents(engine: ReadModels) -> list[str]:
    """Every agent with a live memory or episode (call under read)."""
    return sorted(set(engine.memories.by_agent) | set(engine.episodes.by_agent))


class Reembedder:
    """One job: ``target`` is the new model; ``batch`` records are embedded per model call."""

    def __init__(
        self,
        engine: Engine,
        target: Embedder,
        *,
        batch: int = 64,
        max_passes: int = 8,
        progress: Progress | None = None,
        client_id: str = "memstream-reembed",
    ) -> None:
        self.engine = engine
        self.target = target
        self.batch = batch
        self.max_passes = max_passes
        self.progress = progress
        self.client_id = client_id
        self.done = 0
        self.total = 0
        self._later: dict[str, int] = {}  # agents not reached yet -> records they lacked at the start

    async def run(self, agents: Sequence[str] | None = None) -> ReembedReport:
        names = list(agents) if agents else await self.engine.read(lambda: known_agents(self.engine))
        report = ReembedReport(self.target.model_id)
        # The progress total starts as everything missing now, so the bar is honest from the
        # start, and is corrected as each agent's passes find what writes added meanwhile.
        self._later = {name: len(await self._pending(name)) for name in names}
        self.total = sum(self._later.values())
        self._tick()
        for name in names:
            self._later.pop(name)
            report.agents.append(await self._agent(name))
        return report

    async def _pending(self, agent_id: str) -> list[Pending]:
        return await self.engine.read(lambda: pending_for(self.engine, agent_id, self.target.model_id))

    def _tick(self) -> None:
        if self.progress is not None:
            self.progress(self.done, max(self.total, self.done))

    def _envelope(self, agent_id: str, command_id: str) -> dict[str, Any]:
        return {
            "command_id": command_id,
            "scope": Scope(agent_id=agent_id),
            "actor": Actor(client_id=self.client_id, agent_id=agent_id),
            "received_at": utcnow(),
        }

    async def _agent(self, agent_id: str) -> AgentReport:
        model = self.target.model_id
        rep = AgentReport(agent_id, model)
        rep.previous = await self.engine.read(lambda: self.engine.vectors.model_of(agent_id))
        if rep.previous == model and not await self._pending(agent_id):
            rep.switched = True  # already there: nothing to do, nothing to append
            return rep
        while rep.passes < self.max_passes:
            rep.passes += 1
            todo = await self._pending(agent_id)
            self.total = self.done + len(todo) + sum(self._later.values())
            self._tick()
            for i in range(0, len(todo), self.batch):
                await self._batch(agent_id, todo[i : i + self.batch], rep)
            if todo:
                continue  # look again before switching: this pass may have raced with writes
            out = await self.engine.submit(
                c.SwitchEmbedding(**self._envelope(agent_id, f"reembed-switch:{model}:{new_id()}"), model=model)
            )
            if out.outcome.result == "applied":
                rep.switched = True
                return rep
            log.info("switch of %s to %s refused (%s); another pass", agent_id, model, out.outcome.reason)
        rep.error = f"still incomplete after {rep.passes} passes: writes keep arriving faster than they are re-embedded"
        return rep

    async def _batch(self, agent_id: str, items: list[Pending], rep: AgentReport) -> None:
        # Through the model's batcher: live stores and queries of the same model share its calls.
        vectors = await self.engine.embedders.batcher(self.target).embed([p.text for p in items])
        model = self.target.model_id
        commands = []
        for item, vec in zip(items, vectors, strict=True):
            kind, _, ident = item.ref.partition(":")
            # A fresh id per attempt: after a crash the read models are caught up from the log
            # before anything is computed, so nothing already appended is attempted again, and a
            # later job back to this model must not be answered from an old command's memo.
            commands.append(
                c.ReembedMemory(
                    **self._envelope(agent_id, f"reembed:{model}:{new_id()}"),
                    memory_id=int(ident),
                    kind=kind,  # type: ignore[arg-type]
                    embedding=Embedding.from_vector(model, vec),
                    content_key=item.key,
                )
            )
        for committed in await asyncio.gather(*(self.engine.submit(cmd) for cmd in commands)):
            if committed.outcome.result == "applied":
                rep.reembedded += 1
                self.done += 1
            else:
                rep.retried += 1
        self._tick()
