"""The Kafka key store: data keys in a compacted topic (``<prefix>.keys``) that every worker
reads, so a partition's keys follow it to whichever worker holds it.

A record per key id holds the DEK wrapped under the master key (as ``keys.db`` does); a
destruction writes a tombstone. A tombstone hides the key from every reader at once, but its
old value stays in the topic's segment files until the log cleaner rewrites them; the topic
configs (``KeyTopicBounds``) and a periodic filler record (the active segment is never
cleaned, and it rolls only on an append) bound how long. The bound and its terms:
docs/erasure.md, "Kafka mode".

The port is synchronous (the log's readers open records in plain functions), the clients are
asyncio: the store runs its producer and consumer on a loop of its own, in a thread, and the
port's calls wait on it. The topic has one partition, so every reader sees keys and
tombstones in the order they were written.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import secrets
import threading
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from memstream.streams.keys.master import ENV_FILE, ENV_KEY, MasterKeyError, parse_master_key
from memstream.streams.keys.port import DEK_BYTES, KEY_ID_BYTES, KeyStore

T = TypeVar("T")


class KafkaTarget(Protocol):
    """What the store needs of a deployment's ``KafkaConfig`` (streams/log/kafka.py; not
    imported: the log's sealing imports the key port, so keys must not import the log)."""

    @property
    def bootstrap(self) -> str: ...
    @property
    def prefix(self) -> str: ...
    @property
    def replication(self) -> int: ...
    @property
    def request_timeout_ms(self) -> int: ...
    @property
    def client_id(self) -> str: ...


class KeysUnavailable(RuntimeError):
    """The keys topic cannot be reached or is not configured as the store needs."""


NONCE: Final = 12
POOL: Final = 256
KEY_PREFIX: Final = b"k:"
CHECK_KEY: Final = b"m:check"
FILLER_KEY: Final = b"m:filler"
ERASED_PREFIX: Final = b"m:erased:"
CHECK_PLAIN: Final = b"memstream master key check"
CALL_TIMEOUT_S: Final = 60.0
# Tombstones go out in batches of at most this many records, each acknowledged before the next
# is built: a new key sent meanwhile (a pool refill, which a write of any agent may wait for)
# waits behind one batch, not behind every key of an erasure (docs/erasure.md, "Kafka mode").
TOMBSTONE_BATCH: Final = 500
# Key ids or records taken in per hold of the store's state lock, which every seal and open
# also takes: a destruction's 100k ids in one hold made the decider's loop wait for all of them.
SLICE: Final = 1000
ENV_PREFIX: Final = "MEMSTREAM_KAFKA_KEYS_"


def env_ms(env: Mapping[str, str], var: str) -> int | None:
    """A setting in whole milliseconds (at least 1) from ``env[var]``; None when unset or empty."""
    raw = env.get(var)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{var}={raw!r} is not a whole number of milliseconds") from None
    if value < 1:
        raise ValueError(f"{var}={raw!r} must be at least 1 (milliseconds)")
    return value


@dataclass(frozen=True, slots=True)
class KeyTopicBounds:
    """The keys topic's cleaning settings, in milliseconds. A destroyed key's wrapped value
    leaves the broker's files at most ``bound_ms(cleaner_backoff_ms)`` after its tombstone
    was acknowledged (per replica: each broker cleans its own copy)."""

    segment_ms: int = 60_000
    max_compaction_lag_ms: int = 60_000
    delete_retention_ms: int = 60_000  # how long the tombstone (a key id, no key) stays
    file_delete_delay_ms: int = 1_000  # replaced segment files linger this long before unlink
    filler_ms: int = 30_000  # how often a store appends a filler record, so the segment rolls

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> KeyTopicBounds:
        """The defaults, each overridable by ``MEMSTREAM_KAFKA_KEYS_<FIELD>`` (e.g.
        ``MEMSTREAM_KAFKA_KEYS_SEGMENT_MS``): a whole number of milliseconds, at least 1."""
        values: dict[str, int] = {}
        for name in cls.__dataclass_fields__:
            value = env_ms(env, f"{ENV_PREFIX}{name.upper()}")
            if value is not None:
                values[name] = value
        return cls(**values)

    def topic_configs(self) -> dict[str, str]:
        return {
            "cleanup.policy": "compact",
            "segment.ms": str(self.segment_ms),
            "max.compaction.lag.ms": str(self.max_compaction_lag_ms),
            "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": "0",
            "delete.retention.ms": str(self.delete_retention_ms),
            "file.delete.delay.ms": str(self.file_delete_delay_ms),
            "retention.ms": "-1",
            "retention.bytes": "-1",
        }

    def bound_ms(self, cleaner_backoff_ms: int = 15_000) -> int:
        """The tombstone's segment rolls at the first append after ``segment_ms`` (a filler
        comes within ``filler_ms``); the segment is due for cleaning within
        ``max_compaction_lag_ms`` of its records; the cleaner looks within its backoff (the
        broker's ``log.cleaner.backoff.ms``); the replaced file is unlinked after
        ``file_delete_delay_ms``. Cleaning itself takes a moment on a topic this small."""
        rolled = self.segment_ms + self.filler_ms
        return rolled + self.max_compaction_lag_ms + cleaner_backoff_ms + self.file_delete_delay_ms


def kafka_master_key(env: Mapping[str, str]) -> tuple[bytes, str]:
    """The deployment's master key and where it came from: ``MEMSTREAM_MASTER_KEY``, else the
    file ``MEMSTREAM_MASTER_KEY_FILE`` names. Required: a worker has no data directory of its own
    to keep one beside, and every router and worker must hold the same one."""
    if env.get(ENV_KEY):
        return parse_master_key(env[ENV_KEY], ENV_KEY), ENV_KEY
    if env.get(ENV_FILE):
        path = env[ENV_FILE]
        try:
            with open(path, encoding="ascii") as f:
                return parse_master_key(f.read(), path), path
        except OSError as exc:
            raise MasterKeyError(f"cannot read {ENV_FILE}={path}: {exc}") from exc
    raise MasterKeyError(
        f"Kafka mode needs a master key: set {ENV_KEY} (base64 of 32 bytes) or {ENV_FILE} (a file holding it), "
        "the same in every router and worker (docs/security.md, 'Master key')"
    )


def keys_topic(cfg: KafkaTarget) -> str:
    return f"{cfg.prefix}.keys"


def _wrap(master: AESGCM, key_id: bytes, dek: bytes) -> bytes:
    nonce = secrets.token_bytes(NONCE)
    return nonce + master.encrypt(nonce, dek, b"dek:" + key_id)


def _unwrap(master: AESGCM, key_id: bytes, wrapped: bytes) -> bytes:
    try:
        return master.decrypt(wrapped[:NONCE], wrapped[NONCE:], b"dek:" + key_id)
    except InvalidTag as exc:
        raise MasterKeyError(f"data key {key_id.hex()} does not open under this master key") from exc


def _rewrapped(old: AESGCM, new: AESGCM, key_id: bytes, wrapped: bytes) -> bytes:
    """``wrapped`` wrapped under ``new`` instead of ``old``. A key that already opens under
    ``new`` (a rotation stopped before its check value was written) is kept as it is, so running
    the rotation again finishes it."""
    try:
        dek = _unwrap(old, key_id, wrapped)
    except MasterKeyError:
        _unwrap(new, key_id, wrapped)  # neither key opens it: the MasterKeyError says which key
        return wrapped
    return _wrap(new, key_id, dek)


class KafkaKeyStore:
    """Data keys in the keys topic (see the module docstring). ``for_partition`` gives the
    ``KeyStore`` of one partition of the events topic (its erasure progress is its own)."""

    def __init__(self, cfg: KafkaTarget, master: bytes, bounds: KeyTopicBounds | None = None) -> None:
        self.cfg = cfg
        self.topic = keys_topic(cfg)
        self.bounds = bounds or KeyTopicBounds()
        self._master = AESGCM(master)
        self._wrapped: dict[bytes, bytes] = {}  # key id -> wrapped DEK, as the topic says now
        self._meta: dict[bytes, bytes] = {}
        # Ids known to have no key: tombstoned, or absent after a read to the topic's end (a
        # key is acknowledged before anything is sealed with it, so it cannot appear later).
        # A replay meeting many erased records asks the broker once per id, not per record.
        self._absent: set[bytes] = set()
        self.catch_ups = 0  # reads to the topic's end on a missing key (a figure for tests)
        self._generation = 0  # tombstones seen by this process: moves when any process destroys
        self._pool: list[tuple[bytes, bytes]] = []
        self._position = 0  # the next offset of the keys topic this store has not read
        self._state = threading.Lock()
        self._take_lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="memstream-keys", daemon=True)
        self._thread.start()
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        try:
            self._call(self._start())
        except BaseException:
            self.close()
            raise

    # -- the loop's side --------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = CALL_TIMEOUT_S) -> T:
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError as exc:
            fut.cancel()
            raise KeysUnavailable(f"the keys topic {self.topic} did not answer within {timeout:.0f} s") from exc

    async def _start(self) -> None:
        await self._ensure_topic()
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.cfg.bootstrap,
            client_id=f"{self.cfg.client_id}-keys",
            enable_idempotence=True,
            acks="all",
            request_timeout_ms=self.cfg.request_timeout_ms,
        )
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.cfg.bootstrap,
            client_id=f"{self.cfg.client_id}-keys",
            group_id=None,
            enable_auto_commit=False,
            fetch_max_wait_ms=50,
            request_timeout_ms=self.cfg.request_timeout_ms,
        )
        await self._producer.start()
        await self._consumer.start()
        tp = TopicPartition(self.topic, 0)
        self._consumer.assign([tp])
        await self._consumer.seek_to_beginning(tp)
        await self._catch_up()
        check = self._meta.get(CHECK_KEY)
        if check is None:
            nonce = secrets.token_bytes(NONCE)
            await self._send(CHECK_KEY, nonce + self._master.encrypt(nonce, CHECK_PLAIN, b"check"))
            await self._catch_up()
            check = self._meta[CHECK_KEY]
        try:
            self._master.decrypt(check[:NONCE], check[NONCE:], b"check")
        except InvalidTag as exc:
            raise MasterKeyError(
                f"the master key does not open the keys topic {self.topic}: it was made under another one"
            ) from exc
        self._tasks = [
            asyncio.create_task(self._tail(), name="memstream-keys-tail"),
            asyncio.create_task(self._fill(), name="memstream-keys-filler"),
        ]

    async def _ensure_topic(self) -> None:
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.cfg.bootstrap,
            request_timeout_ms=self.cfg.request_timeout_ms,
            client_id=f"{self.cfg.client_id}-keys",
        )
        try:
            await admin.start()
        except Exception as exc:
            await admin.close()
            raise KeysUnavailable(f"no Kafka cluster answers at {self.cfg.bootstrap}: {exc}") from exc
        try:
            wanted = self.bounds.topic_configs()
            if self.topic not in set(await admin.list_topics()):
                response = await admin.create_topics(
                    [NewTopic(self.topic, 1, self.cfg.replication, topic_configs=wanted)],
                    timeout_ms=self.cfg.request_timeout_ms,
                )
                for err in response.to_object()["topic_errors"]:
                    if err["error_code"] not in (0, 36):  # 36: another process created it meanwhile
                        raise KeysUnavailable(f"could not create topic {self.topic}: {err}")
            # A topic just created may not be described yet (no entries): ask again, within bounds.
            deadline = time.monotonic() + self.cfg.request_timeout_ms / 1000
            actual: dict[str, str] = {}
            while True:
                described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, self.topic)])
                for response in described:
                    for res in response.to_object()["resources"]:
                        actual.update({e["config_names"]: e["config_value"] for e in res["config_entries"]})
                if "cleanup.policy" in actual or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            if actual.get("cleanup.policy") != "compact":
                raise KeysUnavailable(
                    f"topic {self.topic}: cleanup.policy is {actual.get('cleanup.policy')!r}, the key store needs "
                    "'compact' (a destroyed key must leave the segments within the documented bound)"
                )
        finally:
            await admin.close()

    async def _send(self, key: bytes, value: bytes | None) -> None:
        assert self._producer is not None
        await self._producer.send_and_wait(self.topic, value=value, key=key, partition=0)

    async def _send_many(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        assert self._producer is not None
        futures = [await self._producer.send(self.topic, value=v, key=k, partition=0) for k, v in records]
        await asyncio.gather(*futures)

    async def _send_tombstones(self, keys: Sequence[bytes]) -> None:
        """A tombstone per key, in record batches built directly (no per-record future: a
        third of ``_send_many``'s cost), ``TOMBSTONE_BATCH`` at a time, each acknowledged
        before the next: the loop serves other sends between them."""
        producer = self._producer
        assert producer is not None
        for start in range(0, len(keys), TOMBSTONE_BATCH):
            batch = producer.create_batch()
            for key in keys[start : start + TOMBSTONE_BATCH]:
                if batch.append(key=key, value=None, timestamp=None) is None:  # full: send it, start another
                    await (await producer.send_batch(batch, self.topic, partition=0))
                    batch = producer.create_batch()
                    batch.append(key=key, value=None, timestamp=None)
            await (await producer.send_batch(batch, self.topic, partition=0))

    def _apply(self, records: Sequence[ConsumerRecord[bytes, bytes]]) -> None:
        """Take in records read from the topic, ``SLICE`` under one hold of ``_state``: the
        records of an erasure's 100k tombstones one hold each made every reader of the store
        (the decider's loop sealing the next write) queue for the lock 100k times."""
        for start in range(0, len(records), SLICE):
            with self._state:
                for rec in records[start : start + SLICE]:
                    self._apply_one(rec.key, rec.value, rec.offset)

    def _apply_one(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        self._position = max(self._position, offset + 1)
        if key is None:
            return
        if key.startswith(KEY_PREFIX):
            key_id = key[len(KEY_PREFIX) :]
            if value is None:
                self._absent.add(key_id)
                if self._wrapped.pop(key_id, None) is not None:
                    self._generation += 1
            else:
                self._absent.discard(key_id)
                self._wrapped[key_id] = value
        elif value is None:
            self._meta.pop(key, None)
        else:
            self._meta[key] = value

    async def _catch_up(self) -> None:
        """Read the keys topic up to its end as of now."""
        assert self._consumer is not None
        tp = TopicPartition(self.topic, 0)
        end = (await self._consumer.end_offsets([tp]))[tp]
        while self._position < end:
            if self._tasks:  # the tail task reads: wait for it to get there
                await asyncio.sleep(0.005)
                continue
            batch = await self._consumer.getmany(tp, timeout_ms=200)
            self._apply(batch.get(tp, []))

    async def _tail(self) -> None:
        assert self._consumer is not None
        tp = TopicPartition(self.topic, 0)
        while True:
            try:
                batch = await self._consumer.getmany(tp, timeout_ms=500)
            except asyncio.CancelledError:
                raise
            except Exception:  # a broker away for a while: keep what is known, try again
                await asyncio.sleep(0.5)
                continue
            self._apply(batch.get(tp, []))

    async def _fill(self) -> None:
        while True:
            await asyncio.sleep(self.bounds.filler_ms / 1000)
            with contextlib.suppress(Exception):
                await self._send(FILLER_KEY, b"")

    # -- the port ---------------------------------------------------------------------------

    def get(self, key_id: bytes) -> bytes | None:
        with self._state:
            wrapped = self._wrapped.get(key_id)
            absent = key_id in self._absent
        if wrapped is None and not absent:
            # Made by another worker a moment ago, not read here yet? Read to the topic's end.
            self.catch_ups += 1
            self._call(self._catch_up())
            with self._state:
                wrapped = self._wrapped.get(key_id)
                if wrapped is None:
                    self._absent.add(key_id)
        return None if wrapped is None else _unwrap(self._master, key_id, wrapped)

    def get_many(self, key_ids: Sequence[bytes]) -> dict[bytes, bytes]:
        """``get`` of each (the ``BatchKeys`` port): ``_state`` held once per ``SLICE`` ids, and
        one read to the topic's end for all the ids not known here yet, not one per id."""
        found: dict[bytes, bytes] = {}
        unknown: list[bytes] = []
        for start in range(0, len(key_ids), SLICE):
            with self._state:
                for key_id in key_ids[start : start + SLICE]:
                    wrapped = self._wrapped.get(key_id)
                    if wrapped is not None:
                        found[key_id] = wrapped
                    elif key_id not in self._absent:
                        unknown.append(key_id)
        if unknown:
            self.catch_ups += 1
            self._call(self._catch_up())
            with self._state:
                for key_id in unknown:
                    wrapped = self._wrapped.get(key_id)
                    if wrapped is None:
                        self._absent.add(key_id)
                    else:
                        found[key_id] = wrapped
        return {key_id: _unwrap(self._master, key_id, wrapped) for key_id, wrapped in found.items()}

    def take(self) -> tuple[bytes, bytes]:
        with self._take_lock:
            if not self._pool:
                fresh = [
                    (secrets.token_bytes(KEY_ID_BYTES), AESGCM.generate_key(bit_length=DEK_BYTES * 8))
                    for _ in range(POOL)
                ]
                records = [(KEY_PREFIX + k, _wrap(self._master, k, dek)) for k, dek in fresh]
                self._send_until_acknowledged(records)  # durable (all in-sync replicas) before use
                with self._state:
                    self._wrapped.update((k[len(KEY_PREFIX) :], v) for k, v in records)
                self._pool = fresh
            return self._pool.pop()

    def _send_until_acknowledged(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Send new keys, again after a produce that failed (a broker frozen past the producer's
        request timeout), until ``CALL_TIMEOUT_S`` has passed: a write waits for its key as it
        would for its event's append, instead of failing the decider at the first timeout.
        Sending a record again is harmless: the same key id with the same wrapped key."""
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while True:
            try:
                self._call(self._send_many(records), timeout=max(1.0, deadline - time.monotonic()))
                return
            except (KafkaError, KeysUnavailable) as exc:
                if time.monotonic() >= deadline:
                    raise KeysUnavailable(f"the keys topic {self.topic} did not take new keys: {exc}") from exc
                time.sleep(0.5)  # the broker is away: ask again shortly, within the deadline

    def destroy_ids(self, key_ids: Sequence[bytes]) -> int:
        # ``_state`` is held ``SLICE`` ids at a time, not for all of them: the decider's loop
        # takes it for every key it seals or opens, and 100k ids in one hold stalled it.
        present = 0
        for start in range(0, len(key_ids), SLICE):
            with self._state:
                present += sum(1 for k in key_ids[start : start + SLICE] if k in self._wrapped)
        if key_ids:
            tombstones = [KEY_PREFIX + k for k in key_ids]
            self._call(self._send_tombstones(tombstones), timeout=self._tombstones_timeout(len(key_ids)))
        for start in range(0, len(key_ids), SLICE):
            with self._state:
                for k in key_ids[start : start + SLICE]:
                    self._absent.add(k)
                    if self._wrapped.pop(k, None) is not None:
                        self._generation += 1
        with self._state:
            self._generation += 1
        return present

    @staticmethod
    def _tombstones_timeout(count: int) -> float:
        # 100k tombstones take a few seconds on a loaded 2-core machine: the call's bound grows
        # with the count so a large erasure is not cut off (it is completed again if it is).
        return CALL_TIMEOUT_S + count / 1000

    def generation(self) -> int:
        # Read without ``_state``: one attribute read is atomic, the count only grows, and the
        # decider's loop asks at every batch it seals (waiting here for a destruction's hold).
        return self._generation

    def erased_through_of(self, partition: int) -> tuple[int, int]:
        with self._state:
            raw = self._meta.get(ERASED_PREFIX + str(partition).encode())
        if raw is None:
            return -1, -1
        value = orjson.loads(raw)
        return int(value["through"]), int(value["last"])

    def mark_erased_of(self, partition: int, offset: int) -> None:
        through, last = self.erased_through_of(partition)
        value = orjson.dumps({"through": max(through, offset), "last": max(last, offset)})
        self._call(self._send(ERASED_PREFIX + str(partition).encode(), value))
        with self._state:
            self._meta[ERASED_PREFIX + str(partition).encode()] = value

    def rewrap(self, new_master: bytes, progress: Callable[[int, int], None] | None = None) -> int:
        """Every live key written again wrapped under ``new_master``, then the check, in one
        ordered batch of the topic's one partition: a check under the new key means every key
        before it is too. The old wrappings leave the segments within the same bound as a
        destroyed key."""
        new = AESGCM(new_master)
        with self._state:
            rows = list(self._wrapped.items())
        total = len(rows)
        records: list[tuple[bytes, bytes | None]] = []
        for i, (key_id, wrapped) in enumerate(rows, 1):
            records.append((KEY_PREFIX + key_id, _rewrapped(self._master, new, key_id, wrapped)))
            if progress is not None and (i % 1000 == 0 or i == total):
                progress(i, total)
        nonce = secrets.token_bytes(NONCE)
        records.append((CHECK_KEY, nonce + new.encrypt(nonce, CHECK_PLAIN, b"check")))
        self._call(self._send_many(records))
        with self._state:
            self._master = new
            for k, v in records:
                if k.startswith(KEY_PREFIX) and v is not None:
                    self._wrapped[k[len(KEY_PREFIX) :]] = v
        return total

    def for_partition(self, partition: int) -> PartitionKeys:
        return PartitionKeys(self, partition)

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        with self._take_lock:
            unused, self._pool = [k for k, _ in self._pool], []
        if unused and self._producer is not None:
            with contextlib.suppress(Exception):
                self._call(self._send_many([(KEY_PREFIX + k, None) for k in unused]), timeout=10)

        async def stop() -> None:
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(BaseException):
                    await task
            for client in (self._producer, self._consumer):
                if client is not None:
                    with contextlib.suppress(Exception):
                        await client.stop()

        with contextlib.suppress(Exception):
            self._call(stop(), timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()


class PartitionKeys:
    """The ``KeyStore`` of one partition of the events topic: the shared keys, and the
    partition's own erasure progress (offsets are per partition in Kafka)."""

    def __init__(self, store: KafkaKeyStore, partition: int) -> None:
        self.store = store
        self.partition = partition

    def get(self, key_id: bytes) -> bytes | None:
        return self.store.get(key_id)

    def get_many(self, key_ids: Sequence[bytes]) -> dict[bytes, bytes]:
        return self.store.get_many(key_ids)

    def take(self) -> tuple[bytes, bytes]:
        return self.store.take()

    def destroy_ids(self, key_ids: Sequence[bytes]) -> int:
        return self.store.destroy_ids(key_ids)

    def generation(self) -> int:
        return self.store.generation()

    def erased_through(self) -> tuple[int, int]:
        return self.store.erased_through_of(self.partition)

    def mark_erased(self, offset: int) -> None:
        self.store.mark_erased_of(self.partition, offset)

    def rewrap(self, new_master: bytes, progress: Callable[[int, int], None] | None = None) -> int:
        return self.store.rewrap(new_master, progress)

    def close(self) -> None:
        """The shared store outlives a partition's view: its owner closes it."""


def _is_a_key_store(keys: PartitionKeys) -> KeyStore:
    """Never called: mypy checks here that a partition's view offers the ``KeyStore`` port."""
    return keys
