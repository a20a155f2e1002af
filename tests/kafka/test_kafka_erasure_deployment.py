"""Erasure on a Kafka deployment (issue 16; docs/erasure.md, "Kafka mode"): two real workers and a
router on the test broker, erasing through the router on both faces. Afterwards no read returns
the record, ``history`` shows the erasure without content, a rebuild from offset 0 digests equal
to the workers' live read models, and a raw-bytes scan finds neither the text nor the vector in
the workers' checkpoint files nor in the broker's segment files of the events, audit, commands
and keys topics; the destroyed keys' wrapped bytes leave the keys topic's files within the bound.
"""

from __future__ import annotations

import asyncio
import base64
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memstream.api.kafka.worker.replay import rebuild_partitions
from memstream.streams import commands as c
from memstream.streams.buses.kafka import KafkaCommandBus
from memstream.streams.deciders.kafka import KafkaDecider
from memstream.streams.deciders.sealing import KafkaSealing
from memstream.streams.keys.kafka import KeyTopicBounds, keys_topic
from memstream.streams.log.kafka import KafkaConfig, KafkaLog, ensure_topics, matching
from memstream.streams.log.port import partition_for
from memstream.streams.log.sealing import is_sealed
from tests.support.broker import local_broker_logs
from tests.support.deployment import Deployment
from tests.support.digests import live_digests
from tests.support.embedders import HashEmbedder
from tests.support.faces import HttpFace, McpFace
from tests.support.file_hits import files_holding
from tests.support.kafka_commands import env
from tests.support.kafka_commands import store as clear_store

pytestmark = [pytest.mark.kafka]

PARTITIONS = 2
SECRET = "Zebulon Quartermaine's allergy is to saffron-pistachio nougat"
FRANK = "Frank Quillbottom keeps the spare key under the blue heron statue"
OTHER = "the weekly standup moved to thursday mornings"
# Test-sized cleaning of the keys topic (the bound is these plus the broker's cleaner backoff).
FAST = KeyTopicBounds(
    segment_ms=1_000, max_compaction_lag_ms=1_000, delete_retention_ms=1_000, file_delete_delay_ms=500, filler_ms=500
)
CLEANER_BACKOFF_MS = 15_000  # the broker's log.cleaner.backoff.ms (not set by kafka-local.sh)
BROKER_LOGS = local_broker_logs()  # the test broker infra/kafka-local.sh runs for this bootstrap


def needles(text: str) -> list[bytes]:
    """The text, its first words, and its vector's bytes (f32 as sealed, f16, and as exported)."""
    v = HashEmbedder().embed([text])[0].astype("<f4")
    return [text.encode(), text.split(" ")[0].encode(), v.tobytes(), v.astype("<f2").tobytes(),
            base64.b64encode(v.tobytes())]  # fmt: skip


def hits(root: Path, wanted: list[bytes], pattern: str = "*") -> list[str]:
    return [f"{path}: needle {i}" for path, i in files_holding(root, wanted, pattern)]


def topic_dirs(cfg: KafkaConfig) -> str:
    return f"{cfg.prefix}.*"


async def wrapped_keys_of(cfg: KafkaConfig, agent: str, text: str) -> dict[bytes, bytes]:
    """Key id -> wrapped data key (as the keys topic stores it) of the keys sealing ``agent``'s
    events that open to hold ``text``."""
    sealing = await asyncio.to_thread(KafkaSealing.from_env, cfg)
    kafka = KafkaLog(cfg)
    await kafka.start()
    out: dict[bytes, bytes] = {}
    try:
        for p in range(cfg.partitions):
            for rec in await kafka.read_records(cfg.events_topic, p, 0, None, matching(agent), raw=True):
                value = rec.value or b""
                if is_sealed(value) and text.encode() in sealing.open(p, value, None)[0]:
                    out[value[4:20]] = sealing.store._wrapped[value[4:20]]
    finally:
        await kafka.close()
        await asyncio.to_thread(sealing.close)
    return out


def without_echo(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer without the query it echoes (traverse names the entity asked for)."""
    return {k: v for k, v in answer.items() if k != "entity"}


async def reads(face: Any, agent: str, query: str, mid: int | None = None) -> str:
    answers = [
        await face.call("recall", {"agent_id": agent, "query": query}),
        await face.call("list_memories", {"agent_id": agent}),
        await face.call("get_profile", {"agent_id": agent}),
        await face.call("reconstruct", {"agent_id": agent, "query": query}),
        without_echo(await face.call("traverse", {"agent_id": agent, "entity": "Zebulon Quartermaine"})),
        await face.call("audit_log", {"agent_id": agent}),
    ]
    if mid is not None:
        answers.append(await face.call("get_contents", {"agent_id": agent, "refs": [f"mem:{mid}"]}))
    return repr(answers)


async def stored(face: Any, agent: str, content: str, **extra: Any) -> int:
    out = await face.call("store", {"agent_id": agent, "content": content, **extra})
    assert out["result"] == "stored", out
    return int(out["id"])


async def test_erasure_through_the_router_reaches_every_copy(
    deployment: Deployment, cfg: KafkaConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert BROKER_LOGS.is_dir(), f"the test broker's log directory {BROKER_LOGS} (infra/kafka-local.sh) is not here"
    data = tmp_path / "workers"
    exports = tmp_path / "exports"
    monkeypatch.setenv("MEMSTREAM_DATA_DIR", str(data))  # the workers' checkpoints go here
    monkeypatch.setenv("MEMSTREAM_KAFKA_CHECKPOINT_EVERY", "1")
    for name in FAST.__dataclass_fields__:
        monkeypatch.setenv(f"MEMSTREAM_KAFKA_KEYS_{name.upper()}", str(getattr(FAST, name)))
    deployment.worker()
    deployment.worker()
    deployment.router(MEMSTREAM_EXPORT_DIR=str(exports))
    await deployment.ready()
    http, mcp = HttpFace(deployment.url), McpFace(deployment.url)
    try:
        async with asyncio.timeout(300):
            mid = await stored(http, "alice", SECRET, source={"type": "user", "id": "zq"}, metadata={"who": "Zebulon"})
            await stored(http, "alice", OTHER)
            verified = await http.call("verify_memory", {"memory_id": mid, "note": "Zebulon confirmed"})
            assert verified.get("ok") is not False, verified
            frank_mid = await stored(http, "frank", FRANK, lock=True)
            await http.call("update_profile", {"agent_id": "frank", "profile": "Frank Quillbottom, likes herons"})
            assoc = {"entities": [{"name": "Zebulon Quartermaine"}]}
            await http.call("declare_associations", {"agent_id": "frank", "associations": assoc})
            refused = await http.call("store", {"agent_id": "frank", "content": FRANK, "timestamp": "not-a-time"})
            assert refused.get("result") != "stored", refused
            assert "Zebulon" in await reads(http, "alice", "saffron nougat allergy", mid)
            before = datetime.now(UTC).isoformat()  # a point in time when the record was there
            secret_keys = list((await wrapped_keys_of(cfg, "alice", "Zebulon")).values())
            assert secret_keys, "the secret's events are not sealed"
            keys_dir = f"{keys_topic(cfg)}-*"
            assert hits(BROKER_LOGS, secret_keys, keys_dir), "the secret's keys are not in the keys topic's files"
            # Sealed from the first event: the text never reached any topic's segment files.
            everything = needles(SECRET) + needles(FRANK)
            assert hits(BROKER_LOGS, everything, topic_dirs(cfg)) == []
            deadline = time.monotonic() + 60  # the checkpoints knew the record: the erasure must rewrite them
            while not hits(data, [SECRET.encode()]) and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            assert hits(data, [SECRET.encode()]), "no checkpoint held the record before the erasure"

            request = {"agent_id": "alice", "memory_id": mid, "reason": "data subject request"}
            erased = await http.call("erase_memory", request)
            assert erased["ok"] is True, erased
            erased_at = time.monotonic()
            assert erased["erased"] == [f"mem:{mid}"] and erased["keys_destroyed"] >= 1 and erased["unreachable"] == []
            frank = await mcp.call("erase_agent_data", {"agent_id": "frank", "reason": "account closed"})
            assert frank["ok"] is True, frank
            assert frank["erased_memories"] == 1 and frank["erased_profile"] is True
            assert frank["locked_overridden"]  # the lock did not stop it
            # Its event names no record: the answer's refs are what the partition's read models
            # dropped, and the memory's history lists the erasure (streams/decision/whole_agent.py).
            assert frank["erased"] == [f"mem:{frank_mid}"], frank
            told = await http.call("history", {"ref": f"mem:{frank_mid}"})
            last = told["events"][-1]
            assert last["type"] == "agent.erased" and last["change"]["reason"] == "account closed", told
            assert "memory_ids" not in last["change"]

            for face in (http, mcp):
                text = await reads(face, "alice", "saffron nougat allergy", mid)
                assert "Zebulon" not in text and "saffron" not in text
                assert OTHER in text  # the rest of the agent is untouched
                text = await reads(face, "frank", "spare key heron")
                assert "Quillbottom" not in text and "Zebulon" not in text
            # A point-in-time read before the erasure answers as if the record had never existed.
            past = repr(await http.call("list_memories", {"agent_id": "alice", "as_of": before}))
            assert "Zebulon" not in past and OTHER in past
            history = repr(await http.call("history", {"ref": f"mem:{mid}"}))
            assert "Zebulon" not in history and "saffron" not in history
            assert "record.erased" in history and "data subject request" in history
            out = await http.call("export_memories", {"agent_id": "alice", "output_path": "a.jsonl",
                                                       "include_embeddings": True})  # fmt: skip
            assert out.get("ok") is not False, out
            exported = (exports / "a.jsonl").read_bytes()
            assert OTHER.encode() in exported and not [n for n in needles(SECRET) if n in exported]
            again = await http.call("erase_memory", {"agent_id": "alice", "memory_id": mid, "reason": "again"})
            assert again["ok"] is False  # erased: there is nothing of it left to name

            live = await live_digests(cfg)
            rebuilt = await rebuild_partitions(cfg, jobs=1)
            assert {p: v["digests"] for p, v in rebuilt["partitions"].items()} == {
                p: v["digests"] for p, v in live.items()
            }
            assert hits(data, everything) == []  # every checkpoint rewritten
            assert hits(BROKER_LOGS, everything, topic_dirs(cfg)) == []
        # The destroyed keys' wrapped values leave the keys topic's files within the bound.
        bound_s = FAST.bound_ms(CLEANER_BACKOFF_MS) / 1000
        left = hits(BROKER_LOGS, secret_keys, keys_dir)
        while left and time.monotonic() - erased_at < bound_s + 15:
            await asyncio.sleep(0.5)
            left = hits(BROKER_LOGS, secret_keys, keys_dir)
        assert left == [], f"destroyed keys still in the keys topic's files {bound_s + 15:.0f} s after: {left}"
        print(f"destroyed keys left the keys topic's files {time.monotonic() - erased_at:.1f} s after the erasure")
    finally:
        await http.close()


async def test_an_erasure_left_pending_is_completed_by_the_next_owner(deployment: Deployment, cfg: KafkaConfig) -> None:
    """An erasure whose event is in the topic but whose keys were never destroyed (its worker
    died after the append) is completed by the worker that takes the partition next."""
    first = deployment.worker()
    deployment.router()
    await deployment.ready()
    http = HttpFace(deployment.url)
    bus = KafkaCommandBus(cfg, reply_timeout_s=60)
    sealing = await asyncio.to_thread(KafkaSealing.from_env, cfg)
    try:
        async with asyncio.timeout(240):
            mid = await stored(http, "alice", SECRET)
            keys = await wrapped_keys_of(cfg, "alice", "Zebulon")
            assert keys
            # Decided, never completed: on the commands topic as a router sends it, and no
            # worker's erase runs for it.
            await bus.start()
            cmd = c.EraseMemory(**env("alice"), kind="mem", record_id=mid, reason="left pending")
            committed = await bus.submit(cmd)
            assert committed.outcome.result == "applied" and committed.offset is not None
            partition = partition_for("alice", cfg.partitions)
            assert sealing.store.for_partition(partition).erased_through() == (-1, -1)
            assert all(sealing.store.get(k) is not None for k in keys)  # not destroyed yet
            first.kill()  # the worker dies; the next owner of the partition completes it
            first.wait()
            deployment.worker()
            while sealing.store.for_partition(partition).erased_through()[0] < committed.offset:
                await asyncio.sleep(0.2)
            assert all(sealing.store.get(k) is None for k in keys)
            history = repr(await http.call("history", {"ref": f"mem:{mid}"}))
            assert "Zebulon" not in history and "record.erased" in history
    finally:
        await bus.close()
        await http.close()
        await asyncio.to_thread(sealing.close)


async def test_an_erasure_names_what_topics_written_before_sealing_hold(
    deployment: Deployment, cfg: KafkaConfig
) -> None:
    """A record written clear (by a decider without a key store, as before the Kafka path
    sealed) cannot be crypto-shredded: the erasure still drops it from every read model, and
    says in ``unreachable`` which topic partition holds it in the clear."""
    await ensure_topics(cfg)
    p = partition_for("olga", cfg.partitions)
    clear = KafkaDecider(KafkaLog(cfg))
    clear.owned = {p}
    try:
        async with asyncio.timeout(60):
            written = await clear.submit_local(p, clear_store("olga", SECRET))
    finally:
        await clear.kafka.close()
    mid = written.outcome.id
    assert mid is not None
    deployment.worker()
    deployment.router()
    await deployment.ready()
    http = HttpFace(deployment.url)
    try:
        async with asyncio.timeout(120):
            assert SECRET in repr(await http.call("list_memories", {"agent_id": "olga"}))
            erased = await http.call("erase_memory", {"agent_id": "olga", "memory_id": mid, "reason": "request"})
            assert erased["ok"] is True, erased
            assert erased["keys_destroyed"] == 0
            assert erased["unreachable"] == [
                f"partition {p} of {cfg.events_topic} holds 1 record(s) of this data written before sealing: "
                "migrate the topics"
            ]
            assert SECRET not in repr(await http.call("list_memories", {"agent_id": "olga"}))
    finally:
        await http.close()
