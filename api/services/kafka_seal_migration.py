"""`memstream seal --kafka`: bring a deployment's plaintext topics under sealing (issue 16,
docs/erasure.md "Migration", Kafka subsection).

The old prefix's events and audit topics are replayed, partition by partition and in the order
the decider made them, into a new prefix's topics: each plaintext record sealed as the decider
seals it (the same ``Sealer`` and value format), records already sealed copied as they are,
their keys copied from the old keys topic; the new keys land in the new prefix's keys topic.
Records erased before the migration come out erased (their new keys are destroyed). Only a
verified copy is marked complete; the old topics are deleted by ``--delete-old``. The embedded
twin is api/services/seal_migration.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, Final

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import GroupCoordinatorNotAvailableError
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from memstream.api.services.progress import Progress
from memstream.projections.catalog import ReadModelOptions, read_models
from memstream.projections.runner import digest_of, fold_record
from memstream.streams.decision.state import DecisionState
from memstream.streams.events import decode
from memstream.streams.keys.kafka import (
    CHECK_KEY,
    CHECK_PLAIN,
    ERASED_PREFIX,
    KEY_PREFIX,
    NONCE,
    KafkaKeyStore,
    keys_topic,
)
from memstream.streams.log.kafka import KafkaConfig, ensure_topics, fold_consumer, read_range
from memstream.streams.log.sealed_keys import sealed_binding
from memstream.streams.log.sealing import ERASURE_TYPES, Sealer, is_sealed

CHUNK: Final = 2_000  # records read, sealed and produced at a time
MIGRATION_KEY: Final = b"m:migration"  # in the new keys topic: where it came from, and how far it got
WAIT_S: Final = 60.0  # for topic deletions and the group coordinator


class KafkaSealError(Exception):
    """The migration cannot run (workers still consume the old topics, the new prefix belongs to
    something else, the master key does not fit) or its result did not verify: the old topics
    stay as they are."""


def deployment_topics(cfg: KafkaConfig) -> list[str]:
    """The topics memstream makes for a prefix (exact names: a prefix may begin another's)."""
    return [*cfg.topic_configs(), keys_topic(cfg)]


def deciders_group(cfg: KafkaConfig) -> str:
    """The workers' consumer group (streams/deciders/faust_app.py names the faust app so)."""
    return f"{cfg.prefix}-deciders"


def delete_command(cfg: KafkaConfig) -> str:
    """The kafka-topics.sh command that deletes a prefix's topics (``--topic`` takes a regex)."""
    names = "|".join(t.removeprefix(cfg.prefix + ".") for t in deployment_topics(cfg))
    escaped = cfg.prefix.replace(".", "\\.")
    return f"kafka-topics.sh --bootstrap-server {cfg.bootstrap} --delete --topic '{escaped}\\.({names})'"


# -- the broker's side ------------------------------------------------------------------------


def _admin(cfg: KafkaConfig) -> AIOKafkaAdminClient:
    return AIOKafkaAdminClient(
        bootstrap_servers=cfg.bootstrap, request_timeout_ms=cfg.request_timeout_ms, client_id=f"{cfg.client_id}-seal"
    )


async def active_members(admin: AIOKafkaAdminClient, group: str) -> list[str]:
    """The client ids of the group's members now (none: no worker consumes the commands)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            described = await admin.describe_consumer_groups([group])
            break
        except GroupCoordinatorNotAvailableError:  # a fresh cluster's offsets topic is being made
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
    members: list[str] = []
    for response in described:
        for g in response.to_object()["groups"]:
            members.extend(str(m.get("client_id") or m.get("member_id")) for m in g["members"])
    return members


async def _partition_counts(admin: AIOKafkaAdminClient, topics: Sequence[str]) -> dict[str, int]:
    """Partitions of each topic that exists (absent topics are left out)."""
    present = set(await admin.list_topics())
    wanted = [t for t in topics if t in present]
    if not wanted:
        return {}
    return {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics(wanted) if t["error_code"] == 0}


async def _delete_and_wait(admin: AIOKafkaAdminClient, topics: Sequence[str]) -> list[str]:
    """Delete the topics that exist, and wait until the cluster no longer lists them."""
    doomed = [t for t in topics if t in set(await admin.list_topics())]
    if doomed:
        await admin.delete_topics(doomed)
    deadline = time.monotonic() + WAIT_S
    while set(doomed) & set(await admin.list_topics()):
        if time.monotonic() > deadline:
            raise KafkaSealError(f"topics {doomed} were not deleted within {WAIT_S:.0f} s")
        await asyncio.sleep(0.2)
    return doomed


async def _compacted(consumer: AIOKafkaConsumer, topic: str) -> dict[bytes, bytes]:
    """A one-partition compacted topic read to its end: the latest value of each key (a
    tombstone removes it)."""
    out: dict[bytes, bytes] = {}
    start = 0
    while True:
        chunk = await read_range(consumer, TopicPartition(topic, 0), start, None, None, 50_000)
        for rec in chunk:
            if rec.key is None:
                continue
            if rec.value is None:
                out.pop(rec.key, None)
            else:
                out[rec.key] = rec.value
        if len(chunk) < 50_000:
            return out
        start = chunk[-1].offset + 1


async def _records(consumer: AIOKafkaConsumer, tp: TopicPartition, stop: int) -> AsyncIterator[list[Any]]:
    """The partition's records below ``stop``, in chunks, in offset order."""
    start = 0
    while start < stop:
        chunk = await read_range(consumer, tp, start, stop, None, CHUNK)
        if not chunk:
            raise KafkaSealError(f"{tp.topic}[{tp.partition}] ended at {start}, before {stop}")
        yield chunk
        start = chunk[-1].offset + 1


# -- one partition ----------------------------------------------------------------------------


class _Fold:
    """Read models and decision state of one partition folded from offset 0, as `memstream
    rebuild --kafka` folds them (vector graphs left out: derived data, not in digests)."""

    def __init__(self, partitions: int) -> None:
        self.models = read_models(None, ReadModelOptions(vector_graphs=False))
        self.decision = DecisionState(partitions)

    def event(self, offset: int, value: bytes, vector: bytes | None) -> None:
        self.decision.apply_event(offset, decode(value))
        fold_record(self.models, offset, value, vector)

    def audit(self, offset: int, value: bytes) -> None:
        self.decision.apply_audit(offset, decode(value))

    def digests(self) -> dict[str, str]:
        return {**{p.name: digest_of(p) for p in self.models}, "decision": self.decision.digest()}


def _after(rec: ConsumerRecord[bytes, bytes]) -> int:
    return int(dict(rec.headers).get("after_event", b"-1"))


async def _merged(
    consumer: AIOKafkaConsumer, cfg: KafkaConfig, partition: int, ends: tuple[int, int]
) -> AsyncIterator[tuple[str, ConsumerRecord[bytes, bytes]]]:
    """A partition's events and audit records in the order its decider made them: an audit
    record decided after event k comes before event k + 1 (as the decider's fold reads them)."""
    audits: list[ConsumerRecord[bytes, bytes]] = []
    async for chunk in _records(consumer, TopicPartition(cfg.audit_topic, partition), ends[1]):
        audits.extend(chunk)
    i = 0
    async for chunk in _records(consumer, TopicPartition(cfg.events_topic, partition), ends[0]):
        for rec in chunk:
            while i < len(audits) and _after(audits[i]) < rec.offset:
                yield "audit", audits[i]
                i += 1
            yield "event", rec
    for rec in audits[i:]:
        yield "audit", rec


def _vector(rec: ConsumerRecord[bytes, bytes]) -> bytes | None:
    return dict(rec.headers).get("vector")


def _opened(sealer: Sealer, value: bytes, vector: bytes | None) -> tuple[bytes, bytes | None]:
    return sealer.open(value, vector) if is_sealed(value) else (value, vector)


@dataclasses.dataclass
class _Partition:
    """What the copy of one partition found: for the erasures, and the report."""

    sealed: int = 0
    erasures: list[tuple[int, str, list[str] | None]] = dataclasses.field(default_factory=list)
    # per agent, (offset decided at, key id, scope) of every sealed record written: an erasure
    # at offset e names the keys of its agent's scopes decided before e (streams/log/sealed_keys.py)
    bindings: dict[str, list[tuple[int, bytes, str]]] = dataclasses.field(default_factory=dict)
    digests: dict[str, str] = dataclasses.field(default_factory=dict)

    def bind(self, at: int, value: bytes) -> None:
        bound = sealed_binding(value)
        if bound is not None:
            self.bindings.setdefault(bound[1], []).append((at, bound[0], bound[2]))

    def erased_keys(self) -> list[bytes]:
        out: dict[bytes, None] = {}
        for at, agent, scopes in self.erasures:
            wanted = None if scopes is None else set(scopes)
            for offset, key_id, scope in self.bindings.get(agent, []):
                if offset < at and (wanted is None or scope in wanted):
                    out.setdefault(key_id, None)
        return list(out)


def _sealed_copy(
    sealer: Sealer, kind: str, rec: ConsumerRecord[bytes, bytes], found: _Partition
) -> tuple[bytes, list[tuple[str, bytes]]]:
    """The record's value and headers for the new topic: sealed as the decider seals it."""
    value = rec.value or b""
    headers = list(rec.headers)
    if is_sealed(value):
        return value, headers
    decoded = decode(value)
    if kind == "event":
        if decoded["type"] in ERASURE_TYPES:
            found.erasures.append((rec.offset, decoded["scope"]["agent_id"], decoded["payload"].get("scopes")))
        out = sealer.seal_event(rec.offset, decoded, _vector(rec))
        if out is None:
            return value, headers
        value, vector = out
        headers = [(k, v) for k, v in headers if k != "vector"] + ([("vector", vector)] if vector is not None else [])
    else:
        sealed = sealer.seal_audit(_after(rec) + 1, decoded)
        if sealed is None:
            return value, headers
        value = sealed
    found.sealed += 1
    return value, headers


async def _copy_partition(
    old: KafkaConfig,
    new: KafkaConfig,
    partition: int,
    ends: tuple[int, int],
    sealer: Sealer,
    consumer: AIOKafkaConsumer,
    producer: AIOKafkaProducer,
    tick: Callable[[int], None],
) -> _Partition:
    """Pass 1: every record of the old partition into the new one at the same offset, sealed;
    the old records folded meanwhile (the digests the new topics must reproduce)."""
    found = _Partition()
    fold = _Fold(old.partitions)
    pending: list[tuple[str, int, Any]] = []
    in_flight: list[tuple[str, int, Any]] = []  # the chunk before: acknowledged while this one is made

    async def landed(chunk: list[tuple[str, int, Any]]) -> None:
        metas = await asyncio.gather(*(fut for _, _, fut in chunk))
        for (topic, offset, _), meta in zip(chunk, metas, strict=True):
            if meta.offset != offset:
                raise KafkaSealError(
                    f"{topic}[{partition}]: a record of offset {offset} landed at {meta.offset}; "
                    "the new topic was written to by something else: run memstream seal --kafka again"
                )
        tick(len(chunk))

    async def flush() -> None:
        nonlocal pending, in_flight
        await landed(in_flight)
        in_flight, pending = pending, []

    async for kind, rec in _merged(consumer, old, partition, ends):
        value, headers = _sealed_copy(sealer, kind, rec, found)
        if is_sealed(value):
            found.bind(rec.offset if kind == "event" else _after(rec), value)
        plain, vector = _opened(sealer, rec.value or b"", _vector(rec))
        if kind == "event":
            fold.event(rec.offset, plain, vector)
        else:
            fold.audit(rec.offset, plain)
        topic = new.events_topic if kind == "event" else new.audit_topic
        fut = await producer.send(topic, value=value, key=rec.key, partition=partition, headers=headers)
        pending.append((topic, rec.offset, fut))
        if len(pending) >= CHUNK:
            await flush()
            sealer.take_bindings()  # the embedded log's key_scopes rows: the topics need none
    await flush()
    await landed(in_flight)
    sealer.take_bindings()
    found.digests = fold.digests()
    return found


def _same(old_value: bytes, old_vector: bytes | None, opened: tuple[bytes, bytes | None]) -> bool:
    return bool(orjson.loads(old_value) == orjson.loads(opened[0]) and old_vector == opened[1])


async def _verify_partition(
    old: KafkaConfig,
    new: KafkaConfig,
    partition: int,
    ends: tuple[int, int],
    sealer: Sealer,
    consumers: tuple[AIOKafkaConsumer, AIOKafkaConsumer],
    tick: Callable[[int], None],
) -> None:
    """Pass 2: every record of the new partition, opened with keys read back from the new keys
    topic, equals the old one (offset, key, headers, value, vector)."""
    for topic_of, end in ((lambda c: c.events_topic, ends[0]), (lambda c: c.audit_topic, ends[1])):
        a_chunks = _records(consumers[0], TopicPartition(topic_of(old), partition), end)
        b_chunks = _records(consumers[1], TopicPartition(topic_of(new), partition), end)
        async for a_chunk in a_chunks:
            b_chunk: list[ConsumerRecord[bytes, bytes]] = []
            while len(b_chunk) < len(a_chunk):
                b_chunk.extend(await anext(b_chunks))
            for a, b in zip(a_chunk, b_chunk, strict=True):
                where = f"{topic_of(new)}[{partition}] offset {a.offset}"
                clear_headers = [h for h in a.headers if h[0] != "vector"]
                if (a.offset, a.key, clear_headers) != (b.offset, b.key, [h for h in b.headers if h[0] != "vector"]):
                    raise KafkaSealError(f"{where}: not the old record's place, key or headers")
                old_value, new_value = a.value or b"", b.value or b""
                if old_value == new_value and _vector(a) == _vector(b):
                    continue  # copied as it was (sealed already, or nothing to seal)
                if is_sealed(old_value) or not _same(old_value, _vector(a), sealer.open(new_value, _vector(b))):
                    raise KafkaSealError(f"{where} does not open to the old record")
            tick(len(a_chunk))


async def _rebuild_partition(
    new: KafkaConfig,
    partition: int,
    ends: tuple[int, int],
    sealer: Sealer,
    consumer: AIOKafkaConsumer,
    tick: Callable[[int], None],
) -> dict[str, str]:
    """Pass 3: the new partition folded from offset 0 (erased records read redacted)."""
    fold = _Fold(new.partitions)
    n = 0
    async for kind, rec in _merged(consumer, new, partition, ends):
        value, vector = _opened(sealer, rec.value or b"", _vector(rec))
        if kind == "event":
            fold.event(rec.offset, value, vector)
        else:
            fold.audit(rec.offset, value)
        n += 1
        if n % CHUNK == 0:
            tick(CHUNK)
    tick(n % CHUNK)
    return fold.digests()


# -- the whole migration ----------------------------------------------------------------------


async def _ends(consumer: AIOKafkaConsumer, cfg: KafkaConfig) -> dict[int, tuple[int, int]]:
    """Per partition, (events, audit records) in the deployment's topics now."""
    out: dict[int, list[int]] = {p: [0, 0] for p in range(cfg.partitions)}
    for i, topic in enumerate((cfg.events_topic, cfg.audit_topic)):
        tps = [TopicPartition(topic, p) for p in range(cfg.partitions)]
        for tp, end in (await consumer.end_offsets(tps)).items():
            out[tp.partition][i] = int(end)
    return {p: (e, a) for p, (e, a) in out.items()}


def _check_master(master: bytes, check: bytes | None, topic: str) -> None:
    if check is None:
        return
    try:
        opened = AESGCM(master).decrypt(check[:NONCE], check[NONCE:], b"check")
    except InvalidTag:
        opened = b""
    if opened != CHECK_PLAIN:
        raise KafkaSealError(f"the master key does not open {topic}: it was made under another one")


async def _prepare_new(
    admin: AIOKafkaAdminClient, old: KafkaConfig, new: KafkaConfig, consumer: AIOKafkaConsumer
) -> tuple[str, list[str]]:
    """The new prefix's state: 'fresh', 'complete' (a finished migration from ``old``), or
    recreated after an interrupted run (its topics deleted; returned as the second item)."""
    counts = await _partition_counts(admin, deployment_topics(new))
    if not counts:
        return "fresh", []
    marker = None
    if keys_topic(new) in counts:
        raw = (await _compacted(consumer, keys_topic(new))).get(MIGRATION_KEY)
        marker = orjson.loads(raw) if raw is not None else None
    if marker is not None and marker.get("from") != old.prefix:
        raise KafkaSealError(f"prefix {new.prefix!r} holds a migration from {marker.get('from')!r}, not {old.prefix!r}")
    if marker is not None and marker.get("state") == "complete":
        return "complete", []
    if marker is None:
        # Not ours (or a run that died before its first record): recreate only what holds no event.
        ends: dict[int, int] = {}
        for topic in (new.events_topic, new.audit_topic):
            if topic in counts:
                tps = [TopicPartition(topic, p) for p in range(counts[topic])]
                ends.update({i: int(e) for i, e in enumerate((await consumer.end_offsets(tps)).values()) if e})
        if ends:
            raise KafkaSealError(
                f"topics of prefix {new.prefix!r} exist and hold records, and no migration from {old.prefix!r} "
                "made them: choose another --new-prefix"
            )
    return "recreated", await _delete_and_wait(admin, deployment_topics(new))


async def _copy_keys(
    consumer: AIOKafkaConsumer, producer: AIOKafkaProducer, old: KafkaConfig, new: KafkaConfig, master: bytes
) -> int:
    """The old keys topic's live data keys and erasure progress into the new one: records
    already sealed are copied as they are, so their keys must follow them (same master key,
    and a key's wrapping names only its id)."""
    live = await _compacted(consumer, keys_topic(old))
    _check_master(master, live.get(CHECK_KEY), keys_topic(old))
    copied = [(k, v) for k, v in live.items() if k.startswith(KEY_PREFIX) or k.startswith(ERASED_PREFIX)]
    futures = [await producer.send(keys_topic(new), key=k, value=v, partition=0) for k, v in copied]
    await asyncio.gather(*futures)
    return sum(1 for k, _ in copied if k.startswith(KEY_PREFIX))


async def _mark(producer: AIOKafkaProducer, new: KafkaConfig, key: bytes, value: Any) -> None:
    await producer.send_and_wait(keys_topic(new), key=key, value=orjson.dumps(value), partition=0)


def _quiet(_done: int, _total: int, /) -> None:
    """What a run without a progress display reports to."""


async def seal_topics(
    old: KafkaConfig,
    new_prefix: str,
    master: bytes,
    *,
    delete_old: bool = False,
    old_checkpoints: Path | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Migrate the deployment ``old`` into sealed topics under ``new_prefix``; returns the report
    the CLI prints. ``old_checkpoints``: with ``delete_old``, this machine's worker checkpoints
    of the old topics (a directory), removed too."""
    report_progress = progress or _quiet
    new = dataclasses.replace(old, prefix=new_prefix)
    if new.prefix == old.prefix:
        raise KafkaSealError("--new-prefix must differ from --prefix: the sealed copy is written beside the old topics")
    started = time.perf_counter()
    admin = _admin(old)
    try:
        await admin.start()
    except Exception as exc:
        await admin.close()
        raise KafkaSealError(f"no Kafka cluster answers at {old.bootstrap}: {type(exc).__name__}: {exc}") from exc
    consumer, check = fold_consumer(old, "seal"), fold_consumer(old, "seal")
    producer = AIOKafkaProducer(
        bootstrap_servers=old.bootstrap,
        client_id=f"{old.client_id}-seal",
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
        request_timeout_ms=old.request_timeout_ms,
    )
    await consumer.start()
    await check.start()
    await producer.start()
    try:
        for cfg in (old, new):
            members = await active_members(admin, deciders_group(cfg))
            if members:
                raise KafkaSealError(
                    f"workers are running on prefix {cfg.prefix!r} (consumer group {deciders_group(cfg)!r} has "
                    f"{len(members)} active members: {', '.join(sorted(members))}): stop every worker and router first"
                )
        state, recreated = await _prepare_new(admin, old, new, consumer)
        old_counts = await _partition_counts(admin, [old.events_topic, old.audit_topic])
        if state == "complete":
            deleted = await _retire(admin, old, old_checkpoints) if delete_old else []
            return {"sealed": False, "already_migrated": True, "new_prefix": new.prefix, "deleted": deleted}
        for topic in (old.events_topic, old.audit_topic):
            if topic not in old_counts:
                raise KafkaSealError(f"no topic {topic} at {old.bootstrap}: is --prefix {old.prefix!r} right?")
            if old_counts[topic] != old.partitions:
                raise KafkaSealError(
                    f"topic {topic} has {old_counts[topic]} partitions; --partitions says {old.partitions}"
                )
        ends = await _ends(consumer, old)
        total = sum(e + a for e, a in ends.values())
        done = 0

        def tick(n: int) -> None:
            nonlocal done
            done += n
            report_progress(done, 3 * total)  # copy, verify, rebuild

        await ensure_topics(new)
        writer_keys = await asyncio.to_thread(KafkaKeyStore, new, master)
        phases: dict[str, float] = {}
        try:
            await _mark(producer, new, MIGRATION_KEY, {"from": old.prefix, "state": "started"})
            has_old_keys = keys_topic(old) in set(await admin.list_topics())
            keys_copied = await _copy_keys(consumer, producer, old, new, master) if has_old_keys else 0
            mark = time.perf_counter()
            found: dict[int, _Partition] = {}
            for p in range(old.partitions):
                sealer = Sealer(writer_keys.for_partition(p))
                found[p] = await _copy_partition(old, new, p, ends[p], sealer, consumer, producer, tick)
            phases["copy"] = time.perf_counter() - mark
        finally:
            await asyncio.to_thread(writer_keys.close)  # its unused pooled keys are tombstoned
        # Verification and rebuild open with keys read back from the new keys topic, by a store of their own.
        keys = await asyncio.to_thread(KafkaKeyStore, new, master)
        try:
            mark = time.perf_counter()
            for p in range(old.partitions):
                await _verify_partition(old, new, p, ends[p], Sealer(keys.for_partition(p)), (consumer, check), tick)
            phases["verify"] = time.perf_counter() - mark
            if await _ends(consumer, old) != ends or await _ends(consumer, new) != ends:
                raise KafkaSealError(
                    f"the old and new topics do not hold the same number of records (old {await _ends(consumer, old)}, "
                    f"new {await _ends(consumer, new)}): was something writing? run memstream seal --kafka again"
                )
            erased = [k for f in found.values() for k in f.erased_keys()]
            destroyed = await asyncio.to_thread(keys.destroy_ids, erased) if erased else 0
            mark = time.perf_counter()
            unequal: dict[int, list[str]] = {}
            for p in range(old.partitions):
                rebuilt = await _rebuild_partition(new, p, ends[p], Sealer(keys.for_partition(p)), consumer, tick)
                differ = sorted(n for n, d in found[p].digests.items() if rebuilt.get(n) != d)
                if differ:
                    unequal[p] = differ
            phases["rebuild"] = time.perf_counter() - mark
        finally:
            await asyncio.to_thread(keys.close)
        if unequal:
            raise KafkaSealError(f"a rebuild of the new topics does not digest equal to the old ones: {unequal}")
        ends_report = {str(p): {"events": e, "audit": a} for p, (e, a) in ends.items()}
        await _mark(producer, new, MIGRATION_KEY, {"from": old.prefix, "state": "complete", "ends": ends_report})
        deleted = await _retire(admin, old, old_checkpoints) if delete_old else []
        copy_s = phases["copy"]
        return {
            "sealed": True,
            "old_prefix": old.prefix,
            "new_prefix": new.prefix,
            "events": sum(e for e, _ in ends.values()),
            "audit_records": sum(a for _, a in ends.values()),
            "records_sealed": sum(f.sealed for f in found.values()),
            "keys_copied": keys_copied,
            "erased_keys_destroyed": destroyed,
            "digests_equal": True,
            "recreated_partial_topics": recreated,
            "seconds": round(time.perf_counter() - started, 3),
            "records_per_second": round(total / copy_s) if copy_s > 0 else None,
            "phases_s": {name: round(s, 3) for name, s in phases.items()},
            "deleted": deleted,
            "next": (
                f"point every worker and router at --prefix {new.prefix}"
                + ("" if delete_old else f"; then delete the old topics: {delete_command(old)}")
            ),
        }
    finally:
        await producer.stop()
        await check.stop()
        await consumer.stop()
        await admin.close()


async def _retire(admin: AIOKafkaAdminClient, old: KafkaConfig, checkpoints: Path | None) -> list[str]:
    """Delete the old prefix's topics (every replica drops their segment files) and this
    machine's worker checkpoints of them. Refused while workers consume them."""
    members = await active_members(admin, deciders_group(old))
    if members:
        raise KafkaSealError(f"workers are running on prefix {old.prefix!r}: not deleting its topics")
    internal = [t for t in await admin.list_topics() if t.startswith(deciders_group(old) + "-")]  # faust's own
    deleted = await _delete_and_wait(admin, [*deployment_topics(old), *internal])
    if checkpoints is not None and checkpoints.exists():
        shutil.rmtree(checkpoints)
        deleted.append(str(checkpoints))
    return deleted
