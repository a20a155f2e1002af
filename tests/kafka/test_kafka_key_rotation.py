"""`memstream keys rotate --kafka`: a deployment's keys topic re-wrapped under a new master key,
and a rotation stopped part way finished by running it again (docs/kafka-operations.md)."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from memstream.streams.keys.kafka import KEY_PREFIX, KafkaKeyStore, _wrap, keys_topic
from memstream.streams.keys.master import MasterKeyError
from memstream.streams.log.kafka import KafkaConfig
from tests.support.master_key import TEST_MASTER_KEY

pytestmark = pytest.mark.kafka

CURRENT = base64.b64decode(TEST_MASTER_KEY)  # what tests/kafka/conftest.py gives every process
NEW = bytes(range(200, 232))


def rotate(cfg: KafkaConfig, *extra: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "memstream.api.cli", "keys", "rotate", "--no-progress"]
    args += ["--kafka", cfg.bootstrap, "--prefix", cfg.prefix, "--partitions", str(cfg.partitions), *extra]
    return subprocess.run(args, env=dict(os.environ), capture_output=True, text=True, timeout=120)


def key_file(tmp_path: Path, key: bytes) -> Path:
    path = tmp_path / "new.key"
    path.write_text(base64.b64encode(key).decode())
    return path


def make_keys(cfg: KafkaConfig, n: int) -> list[tuple[bytes, bytes]]:
    store = KafkaKeyStore(cfg, CURRENT)
    try:
        return [store.take() for _ in range(n)]
    finally:
        store.close()


def opened_under(cfg: KafkaConfig, master: bytes, ids: list[bytes]) -> list[bytes | None]:
    store = KafkaKeyStore(cfg, master)
    try:
        return [store.get(key_id) for key_id in ids]
    finally:
        store.close()


def test_rotation_moves_every_key_to_the_new_master(shared_cfg: KafkaConfig, tmp_path: Path) -> None:
    made = make_keys(shared_cfg, 5)
    done = rotate(shared_cfg, "--new-key-file", str(key_file(tmp_path, NEW)))
    assert done.returncode == 0, done.stderr
    report = orjson.loads(done.stdout)
    assert report["keys_rewrapped"] >= 5 and report["keys_topic"] == keys_topic(shared_cfg)
    assert opened_under(shared_cfg, NEW, [k for k, _ in made]) == [dek for _, dek in made]
    with pytest.raises(MasterKeyError):
        KafkaKeyStore(shared_cfg, CURRENT)


def test_a_rotation_stopped_part_way_is_finished_by_running_it_again(shared_cfg: KafkaConfig, tmp_path: Path) -> None:
    made = make_keys(shared_cfg, 4)

    async def rewrap_half_without_check() -> None:
        # What a rotation killed mid-batch leaves: some keys wrapped under the new master, the
        # check value still the old one's.
        producer = AIOKafkaProducer(bootstrap_servers=shared_cfg.bootstrap, acks="all")
        await producer.start()
        try:
            for key_id, dek in made[:2]:
                await producer.send_and_wait(
                    keys_topic(shared_cfg), _wrap(AESGCM(NEW), key_id, dek), key=KEY_PREFIX + key_id
                )
        finally:
            await producer.stop()

    asyncio.run(rewrap_half_without_check())
    with pytest.raises(MasterKeyError, match="does not open under this master key"):
        opened_under(shared_cfg, CURRENT, [made[0][0]])  # the store opens; that key does not

    done = rotate(shared_cfg, "--new-key-file", str(key_file(tmp_path, NEW)))
    assert done.returncode == 0, done.stderr
    assert opened_under(shared_cfg, NEW, [k for k, _ in made]) == [dek for _, dek in made]


def test_refusals_say_what_is_missing(shared_cfg: KafkaConfig, tmp_path: Path) -> None:
    make_keys(shared_cfg, 1)
    no_file = rotate(shared_cfg)
    assert no_file.returncode == 2 and "--new-key-file" in no_file.stderr
    same = rotate(shared_cfg, "--new-key-file", str(key_file(tmp_path, CURRENT)))
    assert same.returncode == 1 and "nothing to rotate" in same.stderr
    assert opened_under(shared_cfg, CURRENT, []) == []  # still the current key's topic
