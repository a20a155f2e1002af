"""The key store port: where data keys (DEKs) live, so destroying one makes what it sealed unreadable.

Scopes name what a key seals: ``mem:<id>``, ``ep:<id>`` (one record) or ``agent`` (the
agent-wide data: profile, associations, audit copies). Several keys may share a scope (a new
one after an erasure, or two processes racing to create it); a sealed value names its key by
id. The store holds key material only; the log holds which key seals what (its ``key_scopes``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

KEY_ID_BYTES = 16
DEK_BYTES = 32


class KeyStore(Protocol):
    def get(self, key_id: bytes) -> bytes | None:
        """The unwrapped data key, or None once destroyed (or never made here)."""
        ...

    def take(self) -> tuple[bytes, bytes]:
        """A new (key id, data key), already durable in the store. Which record or agent it
        seals is recorded by the log, in the same transaction as the first event it seals
        (``SqliteLog.key_ids``): no extra commit per write."""
        ...

    def destroy_ids(self, key_ids: Sequence[bytes]) -> int:
        """Destroy these keys so that no byte of them stays in the store's files. Returns how
        many were there."""
        ...

    def generation(self) -> int:
        """Bumped by every destruction (by any process): readers drop their cached keys when it moves."""
        ...

    def erased_through(self) -> tuple[int, int]:
        """(the last erasure offset whose keys were destroyed here, the last erasure offset seen)."""
        ...

    def mark_erased(self, offset: int) -> None:
        """Record that the erasure at ``offset`` (and all before it) is complete."""
        ...

    def rewrap(self, new_master: bytes, progress: Callable[[int, int], None] | None = None) -> int: ...

    def close(self) -> None: ...


@runtime_checkable
class BatchKeys(Protocol):
    """A key store that looks up many keys in one call (``Sealer.fetch``): a fold opens
    thousands of records a read, each under a key of its own."""

    def get_many(self, key_ids: Sequence[bytes]) -> dict[bytes, bytes]:
        """The unwrapped data keys of those ``key_ids`` the store holds (destroyed ones are left out)."""
        ...
