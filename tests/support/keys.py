"""A key store in memory (the KeyStore port, streams/keys/port.py), for unit tests of sealing."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence


class MemoryKeyStore:
    def __init__(self) -> None:
        self.keys: dict[bytes, tuple[str, str, int, bytes]] = {}
        self._pending: list[tuple[bytes, str, str, int, bytes]] = []
        self._generation = 0
        self._erased = (-1, -1)

    def get(self, key_id: bytes) -> bytes | None:
        row = self.keys.get(key_id)
        return None if row is None else row[3]

    def create(self, agent: str, scope: str, first_offset: int) -> tuple[bytes, bytes]:
        key_id, dek = secrets.token_bytes(16), secrets.token_bytes(32)
        self._pending.append((key_id, agent, scope, first_offset, dek))
        return key_id, dek

    def flush(self) -> None:
        for key_id, agent, scope, first, dek in self._pending:
            self.keys[key_id] = (agent, scope, first, dek)
        self._pending = []

    def discard_pending(self) -> None:
        self._pending = []

    def destroy(self, agent: str, scopes: Sequence[str] | None, before_offset: int) -> int:
        doomed = [
            k
            for k, (a, s, first, _) in self.keys.items()
            if a == agent and first < before_offset and (scopes is None or s in scopes)
        ]
        for k in doomed:
            del self.keys[k]
        self._generation += 1
        return len(doomed)

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
