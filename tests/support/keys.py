"""A key store in memory (the KeyStore port, streams/keys/port.py), for unit tests of sealing."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence


class MemoryKeyStore:
    def __init__(self) -> None:
        self.keys: dict[bytes, bytes] = {}
        self._generation = 0
        self._erased = (-1, -1)

    def get(self, key_id: bytes) -> bytes | None:
        return self.keys.get(key_id)

    def take(self) -> tuple[bytes, bytes]:
        key_id, dek = secrets.token_bytes(16), secrets.token_bytes(32)
        self.keys[key_id] = dek
        return key_id, dek

    def destroy_ids(self, key_ids: Sequence[bytes]) -> int:
        gone = 0
        for k in key_ids:
            gone += self.keys.pop(k, None) is not None
        self._generation += 1
        return gone

    def generation(self) -> int:
        return self._generation

    def erased_through(self) -> tuple[int, int]:
        return self._erased

    def mark_erased(self, offset: int) -> None:
        self._erased = (max(self._erased[0], offset), max(self._erased[1], offset))

    def rewrap(self, new_master: bytes, progress: Callable[[int, int], None] | None = None) -> int:
        return len(self.keys)

    def close(self) -> None:
        pass
