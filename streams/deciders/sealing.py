"""Sealing in Kafka mode: what a decider appends to the events and audit topics is sealed, and
every record read back is opened, with the embedded log's ``Sealer`` and value format
(streams/log/sealing.py) over the keys topic (``KafkaKeyStore``), so a topic dump without the
keys reads no content and a destroyed key redacts its records on every reader. One store per
process; one ``Sealer`` per events partition (its ``KeyStore`` is ``for_partition(p)``, whose
erasure progress is the partition's). See docs/erasure.md, "Kafka mode".
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from memstream.streams.deciders.step import NewAudit, NewEvent
from memstream.streams.keys.kafka import KafkaKeyStore, KafkaTarget, KeyTopicBounds, kafka_master_key
from memstream.streams.log.sealing import Sealer, is_sealed


class KafkaSealing:
    """Seals and opens one process's records of the events and audit topics (module docstring)."""

    def __init__(self, store: KafkaKeyStore) -> None:
        self.store = store
        self._sealers: dict[int, Sealer] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, cfg: KafkaTarget, env: Mapping[str, str] | None = None) -> KafkaSealing:
        """The key store of ``cfg``'s deployment under the master key the environment names
        (required: ``MasterKeyError`` says how to set it), with ``MEMSTREAM_KAFKA_KEYS_*`` bounds."""
        env = os.environ if env is None else env
        master, _ = kafka_master_key(env)
        return cls(KafkaKeyStore(cfg, master, KeyTopicBounds.from_env(env)))

    def sealer(self, partition: int) -> Sealer:
        with self._lock:
            sealer = self._sealers.get(partition)
            if sealer is None:
                # drop_later: an erasure's keys leave the opening cache on the release thread,
                # not on the decider's loop (``Sealer.forget``); safe as every read here
                # refreshes first (``open``) and a destruction empties the cache.
                keys = self.store.for_partition(partition)
                sealer = self._sealers[partition] = Sealer(keys, drop_later=True)
            return sealer

    def seal_events(self, events: Sequence[NewEvent]) -> list[tuple[bytes, bytes | None]]:
        """Each event's (value, vector) as it goes into the events topic. An erasure stays
        clear, and drops its agent's sealing keys of the scopes it names (``Sealer.seal_event``)."""
        out: list[tuple[bytes, bytes | None]] = []
        for e in events:
            sealer = self.sealer(e.partition)
            sealer.refresh()  # keys destroyed by another worker are never sealed with again
            sealed = sealer.seal_event(e.offset, orjson.loads(e.value), e.vector)
            out.append((e.value, e.vector) if sealed is None else sealed)
        self._drop_bindings(events)
        return out

    def seal_audits(self, audits: Sequence[NewAudit]) -> list[bytes]:
        """Each audit record's value: its request copy sealed under the agent's key."""
        out: list[bytes] = []
        for a in audits:
            sealed = self.sealer(a.partition).seal_audit(a.offset, orjson.loads(a.value))
            out.append(a.value if sealed is None else sealed)
        self._drop_bindings(audits)
        return out

    def _drop_bindings(self, records: Sequence[NewEvent] | Sequence[NewAudit]) -> None:
        # The embedded bus writes these into its key_scopes table; the topics need none (every
        # sealed value names its key and scope: streams/log/sealed_keys.py), so they are dropped.
        for p in {r.partition for r in records}:
            self.sealer(p).take_bindings()

    def open(self, partition: int, value: bytes, vector: bytes | None) -> tuple[bytes, bytes | None]:
        """The plaintext (value, vector) of a record of ``partition``, its redacted form once its
        key is destroyed; a clear record as it is. Raises ``SealBroken`` on a forged one."""
        sealer = self.sealer(partition)
        sealer.refresh()
        return sealer.open(value, vector)

    def fetch(self, partition: int, values: Iterable[bytes]) -> None:
        """Look up the keys of the sealed ``values`` (a fetch of ``partition``) not cached yet
        at once (``Sealer.fetch``): one hold of the store's lock per slice of ids, one read to the
        keys topic's end for all the ids not known here yet."""
        sealer = self.sealer(partition)
        sealer.refresh()
        sealer.fetch(values)

    def open_decoded(self, partition: int, value: bytes, vector: bytes | None) -> tuple[dict[str, Any], bytes | None]:
        """``open``, decoded (``Sealer.open_decoded``): what a fold takes, without encoding the
        opened record again for the fold to parse."""
        sealer = self.sealer(partition)
        sealer.refresh()
        return sealer.open_decoded(value, vector)

    def forget(self, partition: int, agent: str, scopes: list[str] | None) -> None:
        """Drop cached keys of an agent (an erasure completed here)."""
        self.sealer(partition).forget(agent, scopes)

    def close(self) -> None:
        self.store.close()


class LazySealing:
    """A process's ``KafkaSealing`` made at its first use (a reader that may never read a
    sealed record, such as a router's change feed, connects to the keys topic only when one
    comes). The master key is checked at once: a process without one refuses to start."""

    def __init__(self, cfg: KafkaTarget, env: Mapping[str, str] | None = None) -> None:
        self.cfg = cfg
        self.env = dict(os.environ if env is None else env)
        kafka_master_key(self.env)  # MasterKeyError now, not at the first read
        self._sealing: KafkaSealing | None = None
        self._lock = threading.Lock()

    def get(self) -> KafkaSealing:
        with self._lock:
            if self._sealing is None:
                self._sealing = KafkaSealing.from_env(self.cfg, self.env)
            return self._sealing

    def open(self, partition: int, value: bytes, vector: bytes | None) -> tuple[bytes, bytes | None]:
        if not is_sealed(value):
            return value, vector
        return self.get().open(partition, value, vector)

    def close(self) -> None:
        with self._lock:
            sealing, self._sealing = self._sealing, None
        if sealing is not None:
            sealing.close()
