"""The Kafka log: memstream's topics on a real Apache Kafka cluster, partitioned by agent as the
embedded log is (``partition_for``), created explicitly and appended to idempotently. The
topics, their records and why: docs/kafka-operations.md, "Topics"."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, runtime_checkable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from memstream.streams.keys.kafka import env_ms
from memstream.streams.log.port import LogRecord, partition_for

DAY_MS: Final = 24 * 3600 * 1000
WEEK_MS: Final = 7 * DAY_MS
HOUR_MS: Final = 3600 * 1000
COMMANDS_ENV: Final = "MEMSTREAM_KAFKA_COMMANDS_"


def _env_ms(name: str, default: int) -> int:
    """``MEMSTREAM_KAFKA_COMMANDS_<name>``: a whole number of milliseconds, at least 1."""
    value = env_ms(os.environ, f"{COMMANDS_ENV}{name}")
    return default if value is None else value


Keep = Callable[[ConsumerRecord[bytes, bytes]], bool]


class Opener(Protocol):
    """Opens a sealed record of the events or audit topics (``KafkaSealing``,
    streams/deciders/sealing.py): its plaintext value and vector, or its redacted form."""

    def open(self, partition: int, value: bytes, vector: bytes | None) -> tuple[bytes, bytes | None]: ...


@runtime_checkable
class DecodingOpener(Protocol):
    """An opener that opens straight into decoded events, a batch's keys looked up at once
    (``KafkaSealing``): no opened record encoded again for a fold to parse, no key lookup per
    record. Folds use it where the opener offers it (the worker's tail, the decider's fold)."""

    def fetch(self, partition: int, values: Iterable[bytes]) -> None: ...

    def open_decoded(
        self, partition: int, value: bytes, vector: bytes | None
    ) -> tuple[dict[str, Any], bytes | None]: ...


class KafkaLogError(RuntimeError):
    """The cluster is unreachable, or its topics are not what memstream needs."""


@dataclass(frozen=True, slots=True)
class KafkaConfig:
    bootstrap: str = "127.0.0.1:9092"
    prefix: str = "memstream"
    partitions: int = 16
    # 3 with min.insync.replicas 2 in production (docs/kafka-operations.md); 1 on one broker.
    replication: int = 1
    min_insync_replicas: int | None = None
    # The commands topic carries content (sealed under the deployment's transport key, which no
    # erasure destroys): how long an erased record's command stays readable to a master-key
    # holder is bounded by these (``commands_bound_ms``; docs/erasure.md, "Kafka mode"). A
    # command is decided within moments; one older than this has long been retried by its
    # submitter. MEMSTREAM_KAFKA_COMMANDS_RETENTION_MS / _SEGMENT_MS.
    commands_retention_ms: int = field(default_factory=lambda: _env_ms("RETENTION_MS", HOUR_MS))
    commands_segment_ms: int = field(default_factory=lambda: _env_ms("SEGMENT_MS", 10 * 60 * 1000))
    replies_retention_ms: int = DAY_MS
    request_timeout_ms: int = 30_000
    client_id: str = "memstream"

    def commands_bound_ms(self, retention_check_ms: int = 300_000) -> int:
        """How long after its append a command's record may stay in the broker's files: its
        segment rolls within ``segment.ms``, is deleted once its newest record is older than
        ``retention.ms`` at the broker's next retention check (``log.retention.check.interval.ms``,
        5 min by default), and unlinked after ``file.delete.delay.ms``."""
        return self.commands_segment_ms + self.commands_retention_ms + retention_check_ms + 1000

    @property
    def events_topic(self) -> str:
        return f"{self.prefix}.events"

    @property
    def audit_topic(self) -> str:
        return f"{self.prefix}.audit"

    @property
    def commands_topic(self) -> str:
        return f"{self.prefix}.commands"

    @property
    def replies_topic(self) -> str:
        return f"{self.prefix}.replies"

    @property
    def owners_topic(self) -> str:
        return f"{self.prefix}.owners"

    def topic_configs(self) -> dict[str, dict[str, str]]:
        """Per topic, the configs memstream sets at creation and checks afterwards."""
        durable = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
        if self.min_insync_replicas is not None:
            durable["min.insync.replicas"] = str(self.min_insync_replicas)
        commands = {
            **durable,
            "retention.ms": str(self.commands_retention_ms),
            # Retention deletes closed segments only: the active one rolls this often.
            "segment.ms": str(self.commands_segment_ms),
            "file.delete.delay.ms": "1000",
        }
        replies = {**durable, "retention.ms": str(self.replies_retention_ms)}
        return {
            self.events_topic: durable,
            self.audit_topic: durable,
            self.commands_topic: commands,
            self.replies_topic: replies,
            # which worker answers for each partition, and where (the latest record per key)
            self.owners_topic: {**durable, "cleanup.policy": "compact"},
        }


@dataclass(slots=True)
class TopicReport:
    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)


async def ensure_topics(cfg: KafkaConfig) -> TopicReport:
    """Create memstream's topics where missing; check the partition count and the durability
    settings of the ones that exist. Safe to call from every process at every start."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=cfg.bootstrap, request_timeout_ms=cfg.request_timeout_ms, client_id=cfg.client_id
    )
    try:
        await admin.start()
    except Exception as exc:
        await admin.close()
        raise KafkaLogError(f"no Kafka cluster answers at {cfg.bootstrap}: {type(exc).__name__}: {exc}") from exc
    report = TopicReport()
    try:
        wanted = cfg.topic_configs()
        present = set(await admin.list_topics())
        missing = [name for name in wanted if name not in present]
        if missing:
            response = await admin.create_topics(
                [NewTopic(n, cfg.partitions, cfg.replication, topic_configs=wanted[n]) for n in missing],
                timeout_ms=cfg.request_timeout_ms,
            )
            for err in response.to_object()["topic_errors"]:
                # 36 = TOPIC_ALREADY_EXISTS: another process created it between list and create.
                if err["error_code"] not in (0, 36):
                    raise KafkaLogError(f"could not create topic {err['topic']}: {err}")
            report.created = missing
        report.existing = [n for n in wanted if n not in missing]
        await _wait_for_leaders(admin, cfg, list(wanted))
        if cfg.commands_topic in report.existing:
            await _align_configs(admin, cfg.commands_topic, wanted[cfg.commands_topic], cfg.request_timeout_ms / 1000)
        await _check_configs(admin, wanted)
        return report
    finally:
        await admin.close()


async def _wait_for_leaders(admin: AIOKafkaAdminClient, cfg: KafkaConfig, topics: list[str]) -> None:
    deadline = asyncio.get_running_loop().time() + cfg.request_timeout_ms / 1000
    while True:
        described = await admin.describe_topics(topics)
        ready = True
        for topic in described:
            parts = topic["partitions"] if topic["error_code"] == 0 else []
            if parts and len(parts) != cfg.partitions:
                raise KafkaLogError(
                    f"topic {topic['topic']} has {len(parts)} partitions, this deployment uses {cfg.partitions}: "
                    "agents would land on other partitions than their deciders; use another prefix or fix the config"
                )
            ready = ready and len(parts) == cfg.partitions and all(p["leader"] >= 0 for p in parts)
        if ready:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise KafkaLogError(f"topics {topics} have no leader for every partition after {cfg.request_timeout_ms} ms")
        await asyncio.sleep(0.1)


async def _align_configs(admin: AIOKafkaAdminClient, topic: str, wanted: dict[str, str], timeout_s: float) -> None:
    """Set a topic's configs to this deployment's when they differ (the commands topic: its
    retention is a setting, so a restart with another value applies it rather than refuse),
    and wait (within the request timeout) until the broker describes them so."""

    async def aligned() -> bool:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, dict.fromkeys(wanted))
        actual: dict[str, str] = {}
        for response in await admin.describe_configs([resource]):
            for res in response.to_object()["resources"]:
                actual.update({e["config_names"]: e["config_value"] for e in res["config_entries"]})
        return all(actual.get(k) == v for k, v in wanted.items())

    if await aligned():
        return
    responses = await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, wanted)])
    for response in responses:
        for res in response.to_object()["resources"]:
            if res["error_code"] != 0:
                raise KafkaLogError(f"could not set the configs of topic {topic}: {res}")
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await aligned():  # a config just altered may be described with its old value a moment
        if asyncio.get_running_loop().time() > deadline:
            raise KafkaLogError(f"topic {topic}: the broker still describes other configs than {wanted}")
        await asyncio.sleep(0.1)


async def _check_configs(admin: AIOKafkaAdminClient, wanted: dict[str, dict[str, str]]) -> None:
    resources = [ConfigResource(ConfigResourceType.TOPIC, name, dict.fromkeys(conf)) for name, conf in wanted.items()]
    described = await admin.describe_configs(resources)
    actual: dict[str, dict[str, str]] = {}
    for response in described:
        for res in response.to_object()["resources"]:
            actual[res["resource_name"]] = {e["config_names"]: e["config_value"] for e in res["config_entries"]}
    for name, conf in wanted.items():
        for key in ("retention.ms", "retention.bytes", "cleanup.policy"):
            if actual.get(name, {}).get(key) != conf[key]:
                raise KafkaLogError(
                    f"topic {name}: {key} is {actual.get(name, {}).get(key)!r}, memstream needs {conf[key]!r} "
                    "(the events and audit topics are the source of truth and must never expire or compact)"
                )


@dataclass(frozen=True, slots=True)
class Appended:
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class OutRecord:
    """A record to send: the partition is always explicit (see the module docstring)."""

    partition: int
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]


class KafkaLog:
    """Append to and read from memstream's topics. One producer per process; readers use a
    consumer without a group (assigned partitions, explicit seeks), so reading from any offset
    never disturbs the workers' consumer group."""

    def __init__(self, cfg: KafkaConfig, opener: Opener | None = None) -> None:
        self.cfg = cfg
        self.opener = opener  # sealed records read are opened with it (None: read as stored)
        self.num_partitions = cfg.partitions
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._read_lock = asyncio.Lock()

    @property
    def started(self) -> bool:
        return self._producer is not None

    async def start(self) -> None:
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.cfg.bootstrap,
            client_id=self.cfg.client_id,
            enable_idempotence=True,
            acks="all",
            linger_ms=2,
            request_timeout_ms=self.cfg.request_timeout_ms,
        )
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.cfg.bootstrap,
            client_id=self.cfg.client_id,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_uncommitted",
            request_timeout_ms=self.cfg.request_timeout_ms,
            # Reads re-assign and seek per call: a fetch left waiting for data on the previous
            # assignment would hold the next read for the broker's whole wait.
            fetch_max_wait_ms=10,
        )
        try:
            await self._producer.start()
            await self._consumer.start()
        except Exception as exc:
            await self.close()
            why = f"{type(exc).__name__}: {exc}"
            raise KafkaLogError(f"cannot connect to Kafka at {self.cfg.bootstrap}: {why}") from exc

    async def close(self) -> None:
        for client in (self._producer, self._consumer):
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.stop()
        self._producer = self._consumer = None

    def partition_of(self, agent_id: str) -> int:
        return partition_for(agent_id, self.num_partitions)

    async def enqueue(self, topic: str, records: Sequence[OutRecord]) -> list[asyncio.Future[Any]]:
        """Queue records in order in the producer; each future resolves when its record is
        acknowledged by all in-sync replicas (to its metadata: partition and offset)."""
        if self._producer is None:
            raise KafkaLogError("KafkaLog.start() was not called")
        return [
            await self._producer.send(topic, value=r.value, key=r.key, partition=r.partition, headers=r.headers)
            for r in records
        ]

    async def send(self, topic: str, records: Sequence[OutRecord], *, wait: bool = True) -> list[Appended]:
        """Send records in order; returns where each landed once every one is acknowledged by
        all in-sync replicas (``wait=False``: once they are queued in the producer, for records
        whose loss a retry repairs, such as replies)."""
        if self._producer is None:
            raise KafkaLogError("KafkaLog.start() was not called")
        futures = [
            await self._producer.send(topic, value=r.value, key=r.key, partition=r.partition, headers=r.headers)
            for r in records
        ]
        if not wait:
            return []
        metas = await asyncio.gather(*futures)
        return [Appended(m.partition, m.offset) for m in metas]

    async def append(
        self, records: Sequence[tuple[str, str, bytes, bytes | None]], *, topic: str | None = None
    ) -> list[Appended]:
        """Append ``(agent_id, type, value, vector)`` records to the agents' partitions."""
        out = []
        for agent_id, type_, value, vector in records:
            headers = [("type", type_.encode())]
            if vector is not None:
                headers.append(("vector", vector))
            key = agent_id.encode("utf-8", "surrogatepass")
            out.append(OutRecord(self.partition_of(agent_id), key, value, headers))
        return await self.send(topic or self.cfg.events_topic, out)

    async def end_offsets(self, *, topic: str | None = None) -> dict[int, int]:
        """Per partition, the offset the next record will get."""
        consumer = self._need_consumer()
        name = topic or self.cfg.events_topic
        tps = [TopicPartition(name, p) for p in range(self.num_partitions)]
        ends = await consumer.end_offsets(tps)
        return {tp.partition: int(off) for tp, off in ends.items()}

    async def read(
        self,
        partition: int,
        start: int = 0,
        stop: int | None = None,
        *,
        topic: str | None = None,
        agent_id: str | None = None,
        types: Sequence[str] | None = None,
        limit: int = 10_000,
        vectors: bool = True,
    ) -> list[LogRecord]:
        """Records of one partition with ``start <= offset < stop`` (stop: the end now), in
        offset order, at most ``limit`` after filtering by agent and type."""
        keep = matching(agent_id, types)
        topic = topic or self.cfg.events_topic
        records = await self.read_records(topic, partition, start, stop, keep, limit, vectors=vectors)
        return [log_record(rec, vectors=vectors) for rec in records]

    async def read_records(
        self,
        topic: str,
        partition: int,
        start: int = 0,
        stop: int | None = None,
        keep: Keep | None = None,
        limit: int = 10_000,
        *,
        raw: bool = False,
        vectors: bool = True,
    ) -> list[ConsumerRecord[bytes, bytes]]:
        """Records (with all their headers) of one partition, ``start <= offset < stop``, opened
        (``raw``: as stored, sealed values included; ``vectors=False``: without their vectors,
        which are then not opened either)."""
        consumer = self._need_consumer()
        async with self._read_lock:  # one consumer, one assignment at a time
            tp = TopicPartition(topic, partition)
            opener = None if raw else self.opener
            return await read_range(consumer, tp, start, stop, keep, limit, opener, vectors=vectors)

    def _need_consumer(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise KafkaLogError("KafkaLog.start() was not called")
        return self._consumer


async def read_range(
    consumer: AIOKafkaConsumer,
    tp: TopicPartition,
    start: int = 0,
    stop: int | None = None,
    keep: Keep | None = None,
    limit: int = 10_000,
    opener: Opener | None = None,
    *,
    vectors: bool = True,
) -> list[ConsumerRecord[bytes, bytes]]:
    """Records of ``tp`` with ``start <= offset < stop`` (stop: the end now) that ``keep``
    accepts, at most ``limit``, opened with ``opener`` when given, read with a consumer that
    has no group (the caller serialises its use: the consumer is re-assigned to ``tp``). Shared
    by ``KafkaLog`` and the workers' partition log (``api/kafka/worker/partition_log.py``)."""
    out: list[ConsumerRecord[bytes, bytes]] = []
    end = (await consumer.end_offsets([tp]))[tp]
    stop = end if stop is None else min(stop, end)
    if start >= stop:
        return out
    consumer.assign([tp])
    consumer.seek(tp, start)
    while len(out) < limit:
        batch = await consumer.getmany(tp, timeout_ms=1000, max_records=min(limit, 5000))
        records = batch.get(tp, [])
        if not records:
            if await consumer.position(tp) >= stop:
                break
            continue
        done = False
        for rec in records:
            if rec.offset >= stop:
                done = True
                break
            if keep is None or keep(rec):
                out.append(opened(rec, opener, vectors=vectors))
                if len(out) >= limit:
                    break
            if rec.offset == stop - 1:
                done = True
                break
        if done:
            break
    consumer.pause(tp)  # no prefetching between reads: an idle reader costs nothing
    return out


def matching(agent_id: str | None = None, types: Sequence[str] | None = None) -> Keep | None:
    """A filter on records' key (the agent) and ``type`` header (event type or audit kind)."""
    if agent_id is None and types is None:
        return None
    wanted_types = {t.encode() for t in types} if types is not None else None
    key = agent_id.encode("utf-8", "surrogatepass") if agent_id is not None else None

    def keep(rec: ConsumerRecord[bytes, bytes]) -> bool:
        if key is not None and rec.key != key:
            return False
        return wanted_types is None or dict(rec.headers).get("type") in wanted_types

    return keep


def opened(
    rec: ConsumerRecord[bytes, bytes], opener: Opener | None, *, vectors: bool = True
) -> ConsumerRecord[bytes, bytes]:
    """``rec`` with its value and ``vector`` header opened (a clear record comes back as it is;
    a redacted one without its ``vector`` header; ``vectors=False``: its vector is left out,
    unopened, for readers that do not use it). Routing headers and the key stay clear."""
    if opener is None or not rec.value:
        return rec
    vector = None
    for name, data in rec.headers:
        if name == "vector" and vectors:
            vector = data
    value, opened_vector = opener.open(rec.partition, rec.value, vector)
    if value is rec.value:
        return rec
    headers = tuple(
        (name, opened_vector if name == "vector" else data)
        for name, data in rec.headers
        if name != "vector" or opened_vector is not None
    )
    return dataclasses.replace(rec, value=value, headers=headers, serialized_value_size=len(value))


def log_record(rec: ConsumerRecord[bytes, bytes], *, vectors: bool = True) -> LogRecord:
    """A record of the events or audit topic as the log port's ``LogRecord`` (its ``type`` is
    the ``type`` header: the event type, or the audit record's kind)."""
    headers = dict(rec.headers)
    return LogRecord(
        rec.offset,
        rec.partition,
        (rec.key or b"").decode("utf-8", "surrogatepass"),
        headers.get("type", b"").decode(),
        rec.value or b"",
        headers.get("vector") if vectors else None,
    )


def fold_consumer(cfg: KafkaConfig, role: str = "fold") -> AIOKafkaConsumer:
    """A consumer for reading whole partitions (folds, replays, migrations): large fetches, no
    group, no commits; ``role`` ends its client id, so the broker's logs tell readers apart."""
    return AIOKafkaConsumer(
        bootstrap_servers=cfg.bootstrap,
        client_id=f"{cfg.client_id}-{role}",
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=10,
        max_partition_fetch_bytes=8 * 1024 * 1024,
        request_timeout_ms=cfg.request_timeout_ms,
    )


async def events_end_offsets(cfg: KafkaConfig) -> dict[int, int]:
    """Per partition of the events topic, the offset the next event will get, read with a
    short-lived client (for tools and tests that hold no ``KafkaLog`` of their own)."""
    kafka = KafkaLog(cfg)
    await kafka.start()
    try:
        return await kafka.end_offsets()
    finally:
        await kafka.close()


async def delete_topics_with_prefix(bootstrap: str, prefix: str) -> list[str]:
    """Delete every topic whose name starts with ``prefix`` (a deployment's, see
    ``KafkaConfig.prefix``): for tests and benchmarks that create throwaway deployments. The
    event topic is the source of truth, so nothing in a running deployment calls this."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        doomed = [t for t in await admin.list_topics() if t.startswith(prefix)]
        if doomed:
            await admin.delete_topics(doomed)
        return doomed
    finally:
        await admin.close()
