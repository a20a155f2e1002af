"""A Kafka worker's partition checkpoints (api/kafka/worker/checkpoints.py) keep only the sidecars
their last snapshots name, as the embedded checkpoints do: a deleted memory's vector and text
linger in no older sidecar, and the partition restores from what is left."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memstream.api.kafka.worker import checkpoints
from memstream.api.kafka.worker.models import PartitionModels
from memstream.projections.catalog import ReadModelOptions
from memstream.projections.runner import digest_of
from memstream.streams import commands as c
from memstream.streams.deciders.step import NewAudit, NewEvent, decide_and_fold
from memstream.streams.decision.limits import Limits
from memstream.streams.decision.state import DecisionState
from memstream.streams.events import Actor, Embedding, Scope, decode, utcnow
from memstream.streams.snapshots import SnapshotStore

OPTIONS = ReadModelOptions(vector_graphs=False)


def decided(state: DecisionState, cmd: c.Command) -> list[NewEvent]:
    out: list[NewEvent] = []
    audits: list[NewAudit] = []
    decide_and_fold(state, cmd, Limits(), out, audits)
    return out


def command(kind: type[c.Command], i: int, **fields: object) -> c.Command:
    scope = Scope(agent_id="agent-a")
    return kind(command_id=f"c{i}", scope=scope, actor=Actor(client_id="t"), received_at=utcnow(), **fields)


def checkpoint(models: PartitionModels, store: SnapshotStore) -> None:
    """What ``Worker.checkpoint`` does once its anchor is read: capture, write, drop stale."""
    checkpoints.write(store, checkpoints.capture(models.projections), models.offset, "anchor")
    checkpoints.drop_stale(models.projections)


def test_worker_checkpoints_drop_the_sidecars_of_older_checkpoints(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / "p0")
    models = PartitionModels(0, 0, store, OPTIONS)
    state = DecisionState(1)
    rng = np.random.default_rng(3)
    events: list[NewEvent] = []
    for i, text in enumerate(["a secret plan for the launch", "kept note about lunch"]):
        vec = Embedding.from_vector("m8", rng.standard_normal(8).astype(np.float32))
        events += decided(state, command(c.StoreMemory, i, content=text, embedding=vec))
    for e in events:
        models.apply(e.offset, e.value, e.vector)
    checkpoint(models, store)
    first = store.blob_names()
    assert any(n.startswith("vectors-") for n in first) and any(n.startswith("lexical-") for n in first)

    secret_id = int(decode(events[0].value)["payload"]["id"])
    for e in decided(state, command(c.DeleteMemory, 9, memory_id=secret_id)):
        models.apply(e.offset, e.value, e.vector)
    checkpoint(models, store)

    named = {
        body["state"]["blob"]
        for name in ("vectors", "lexical")
        if (body := store.load(name)) is not None and "blob" in body["state"]
    }
    left = store.blob_names()
    assert {n.split(".")[0] for n in left} == named  # one sidecar per read model, the last snapshot's
    assert not set(first) & set(left)
    assert all(b"secret" not in store.blob_path(n).read_bytes() for n in left)

    restored = PartitionModels(0, 0, SnapshotStore(tmp_path / "p0"), OPTIONS)
    meta = checkpoints.marker(store)
    assert meta is not None and meta["offset"] == models.offset
    assert checkpoints.restore(store, restored.projections, models.offset)
    assert {p.name: digest_of(p) for p in restored.projections} == {p.name: digest_of(p) for p in models.projections}
