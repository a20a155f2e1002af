"""Sealing of the commands topic: a command carries content and its vector from the router to
the decider, so with a master key configured (``MEMSTREAM_MASTER_KEY`` or
``MEMSTREAM_MASTER_KEY_FILE``, the same in every router and worker) the value and the
``vector`` header travel under a transport key derived from it (HKDF-SHA256), and a dump of the
topic without the master key reads nothing. The key is one for the deployment, not per record:
an erasure cannot destroy it, so what bounds a command's readability for someone holding the
master key is the topic's retention (docs/erasure.md, "Kafka mode").

Records written without a key (before it was configured) still decode; a sealed record reaching
a process without the key is refused with a clear error (``TransportError``).
"""

from __future__ import annotations

import functools
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from memstream.streams.keys.master import ENV_FILE, ENV_KEY, parse_master_key

MAGIC: Final = b"\x00mst1"
NONCE: Final = 12
INFO: Final = b"memstream commands transport v1"


class TransportError(ValueError):
    """A sealed command that cannot be opened here: no master key configured, another one, or
    altered on the way."""


class Transport:
    """Seals and opens command records under the deployment's transport key."""

    def __init__(self, master: bytes) -> None:
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=INFO).derive(master)
        self._aead = AESGCM(key)

    def seal(self, value: bytes, vector: bytes | None, name: bytes) -> tuple[bytes, bytes | None]:
        """The sealed (value, vector) of a record whose ``command`` header is ``name`` (bound
        in as associated data: a sealed body cannot be replayed as another command)."""
        nonce = secrets.token_bytes(NONCE)
        sealed = MAGIC + nonce + self._aead.encrypt(nonce, value, MAGIC + name)
        sealed_vector = None
        if vector is not None:
            vnonce = secrets.token_bytes(NONCE)
            sealed_vector = vnonce + self._aead.encrypt(vnonce, vector, MAGIC + b"vector:" + nonce)
        return sealed, sealed_vector

    def open(self, value: bytes, vector: bytes | None, name: bytes) -> tuple[bytes, bytes | None]:
        nonce = value[len(MAGIC) : len(MAGIC) + NONCE]
        try:
            plain = self._aead.decrypt(nonce, value[len(MAGIC) + NONCE :], MAGIC + name)
            opened_vector = None
            if vector is not None:
                opened_vector = self._aead.decrypt(vector[:NONCE], vector[NONCE:], MAGIC + b"vector:" + nonce)
        except InvalidTag as exc:
            raise TransportError(
                "a sealed command does not open under this process's master key (another key, or altered)"
            ) from exc
        return plain, opened_vector


def is_sealed(value: bytes) -> bool:
    return value.startswith(MAGIC)


@functools.lru_cache(maxsize=4)
def _transport(key_text: str, where: str) -> Transport:
    return Transport(parse_master_key(key_text, where))


def configured(env: Mapping[str, str] | None = None) -> Transport | None:
    """The transport of this process's master key, None when none is configured. Read at each
    call (cheap: the derived key is cached per key), so a process's environment decides."""
    env = os.environ if env is None else env
    if env.get(ENV_KEY):
        return _transport(env[ENV_KEY], ENV_KEY)
    if env.get(ENV_FILE):
        path = Path(env[ENV_FILE])
        try:
            text = path.read_text()
        except OSError as exc:
            raise TransportError(f"cannot read {ENV_FILE}={path}: {exc}") from exc
        return _transport(text, str(path))
    return None
