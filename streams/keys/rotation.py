"""Master key rotation: every data key re-wrapped under a new master key, crash-safe.

With the data directory's own key file, the new key is written beside it first
(``master.key.next``), the key store re-wrapped in one transaction, then the file replaced;
a crash between the last two leaves a key store that opens under ``master.key.next``, which
``resolve_for_store`` then promotes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memstream.streams.keys.master import (
    ENV_FILE,
    ENV_KEY,
    LOCAL_NAME,
    MasterKeyError,
    new_master_key_text,
    parse_master_key,
    resolve_master_key,
    write_key_file,
)
from memstream.streams.keys.sqlite import SqliteKeyStore

if TYPE_CHECKING:  # the Kafka key store (and aiokafka) loads only for a Kafka rotation
    from memstream.streams.keys.kafka import KafkaTarget

NEXT_SUFFIX = ".next"
KEYS_NAME = "keys.db"


def open_key_store(data_dir: Path, keys_path: Path) -> SqliteKeyStore:
    """The key store under the configured master key; a rotation that stopped after
    re-wrapping (``master.key.next`` opens it) is finished here."""
    master, where = resolve_master_key(data_dir)
    try:
        return SqliteKeyStore(keys_path, master)
    except MasterKeyError:
        local = data_dir / LOCAL_NAME
        nxt = local.with_name(LOCAL_NAME + NEXT_SUFFIX)
        if where != str(local) or not nxt.exists():
            raise
        store = SqliteKeyStore(keys_path, parse_master_key(nxt.read_text(), str(nxt)))
        os.replace(nxt, local)
        return store


def rotate_master_key(
    log_path: Path, new_key_file: Path | None, progress: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    data_dir = log_path.parent
    keys_path = log_path.with_name(KEYS_NAME)
    if not keys_path.exists():
        raise MasterKeyError(f"no key store at {keys_path}")
    store = open_key_store(data_dir, keys_path)
    local = data_dir / LOCAL_NAME
    env_supplied = bool(os.environ.get(ENV_KEY) or os.environ.get(ENV_FILE))
    try:
        if new_key_file is not None:
            new = parse_master_key(new_key_file.read_text(), str(new_key_file))
            count = store.rewrap(new, progress)
            if not env_supplied:  # the data directory's own key file follows
                write_key_file(local.with_name(LOCAL_NAME + NEXT_SUFFIX), new_key_file.read_text().strip())
                os.replace(local.with_name(LOCAL_NAME + NEXT_SUFFIX), local)
            where = str(new_key_file)
        else:
            if env_supplied:
                raise MasterKeyError(
                    f"the master key comes from {ENV_KEY}/{ENV_FILE}: give the new one with --new-key-file"
                )
            nxt = local.with_name(LOCAL_NAME + NEXT_SUFFIX)
            nxt.unlink(missing_ok=True)
            write_key_file(nxt, new_master_key_text())
            count = store.rewrap(parse_master_key(nxt.read_text(), str(nxt)), progress)
            os.replace(nxt, local)
            where = str(local)
    finally:
        store.close()
    return {"keys_rewrapped": count, "master_key": where}


def rotate_kafka_master_key(
    cfg: KafkaTarget, new_key_file: Path, progress: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """Every data key in a deployment's keys topic re-wrapped under the key in
    ``new_key_file``; the current key is the one the environment gives every process of the
    deployment (``MEMSTREAM_MASTER_KEY`` or ``_FILE``), which the operator then replaces with the
    new one everywhere. A rotation stopped part way is finished by running it again with the
    current key."""
    from memstream.streams.keys.kafka import KafkaKeyStore, KeyTopicBounds, kafka_master_key

    current, where = kafka_master_key(os.environ)
    new = parse_master_key(new_key_file.read_text(), str(new_key_file))
    if new == current:
        raise MasterKeyError(f"{new_key_file} holds the key {where} gives already: nothing to rotate")
    store = KafkaKeyStore(cfg, current, KeyTopicBounds.from_env(os.environ))
    try:
        count = store.rewrap(new, progress)
    finally:
        store.close()
    return {
        "keys_rewrapped": count,
        "keys_topic": store.topic,
        "master_key": str(new_key_file),
        "next": f"give every worker and router the new key ({ENV_KEY} or {ENV_FILE}) before starting them",
    }
