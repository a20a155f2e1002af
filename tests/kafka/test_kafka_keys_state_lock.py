"""The Kafka key store's state lock during an erasure (docs/erasure.md, "Kafka mode", "What
other writes wait for"): the decider's loop takes it for every key it seals or opens, so a
destruction of many keys holds it a slice of ids at a time, reading the tombstones back does
too, and the store's generation (asked at every batch the decider seals) is read without it."""

from __future__ import annotations

import base64
import threading
from types import TracebackType

import pytest

from memstream.streams.keys.kafka import SLICE, KafkaKeyStore
from memstream.streams.log.kafka import KafkaConfig
from tests.support.master_key import TEST_MASTER_KEY

pytestmark = [pytest.mark.kafka]


class Absent(set[bytes]):
    """The store's ``_absent`` set, counting the ids added to it."""

    added = 0

    def add(self, key_id: bytes) -> None:
        self.added += 1
        super().add(key_id)


class MeasuredLock:
    """The store's ``_state`` lock, keeping the most ids marked absent in one hold."""

    def __init__(self, absent: Absent) -> None:
        self.absent = absent
        self.inner = threading.Lock()
        self.most = 0
        self._at = 0

    def __enter__(self) -> MeasuredLock:
        self.inner.acquire()
        self._at = self.absent.added
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.most = max(self.most, self.absent.added - self._at)
        self.inner.release()


def test_a_destruction_holds_the_state_lock_a_slice_at_a_time(shared_cfg: KafkaConfig) -> None:
    store = KafkaKeyStore(shared_cfg, base64.b64decode(TEST_MASTER_KEY))
    try:
        doomed = [store.take()[0] for _ in range(2 * SLICE + 5)]
        kept = store.take()[0]
        absent = Absent(store._absent)
        lock = MeasuredLock(absent)
        store._absent, store._state = absent, lock  # type: ignore[assignment]  # measured from here on
        assert store.destroy_ids(doomed) == len(doomed)
        assert all(store.get(k) is None for k in doomed) and store.get(kept) is not None
        # Each id is marked absent by the destruction (and again by the tail when it reads the
        # tombstone back), in holds of a slice at most.
        assert absent.added >= len(doomed)
        assert 0 < lock.most <= SLICE
    finally:
        store.close()


def test_the_generation_is_read_while_another_thread_holds_the_state_lock(shared_cfg: KafkaConfig) -> None:
    store = KafkaKeyStore(shared_cfg, base64.b64decode(TEST_MASTER_KEY))
    try:
        before = store.generation()
        store.destroy_ids([store.take()[0]])
        seen: list[int] = []
        with store._state:  # a destruction's hold, as the decider's loop meets it
            reader = threading.Thread(target=lambda: seen.append(store.generation()))
            reader.start()
            reader.join(10)
            answered = not reader.is_alive()
        reader.join(10)
        assert answered, "generation() waited for the state lock"
        assert seen and seen[0] > before
    finally:
        store.close()
