"""What an import or merge counted: records written and skipped, errors, and the refs they answered for."""

from __future__ import annotations

from typing import Any


class Tally:
    def __init__(self, dry_run: bool) -> None:
        self.dry_run = dry_run
        self.imported_memories = self.skipped_memories = 0
        self.imported_episodes = self.skipped_episodes = 0
        self.profile_updated = False
        self.errors: list[str] = []
        self.imported_refs: dict[str, int] = {}  # source "mem:<id>" -> the id it has now (merge's move)

    def count(self, kind: str, *, imported: bool) -> None:
        """One memory or episode (``kind``), written or skipped."""
        if kind == "memory":
            if imported:
                self.imported_memories += 1
            else:
                self.skipped_memories += 1
        elif imported:
            self.imported_episodes += 1
        else:
            self.skipped_episodes += 1

    def answer(self, prefix: str = "imported") -> dict[str, Any]:
        body: dict[str, Any] = {
            "ok": True,
            "dry_run": self.dry_run,
            f"{prefix}_memories": self.imported_memories,
            "skipped_memories": self.skipped_memories,
            f"{prefix}_episodes": self.imported_episodes,
            "skipped_episodes": self.skipped_episodes,
        }
        if self.errors:
            body["errors"] = self.errors[:100] + ([f"... and {len(self.errors) - 100} more"] * (len(self.errors) > 100))
        return body

    def as_dict(self) -> dict[str, Any]:
        """Everything counted, errors uncut: a part of an import run elsewhere (Kafka mode runs
        each partition's records on its worker), for ``add`` to join into the whole."""
        return {
            "imported_memories": self.imported_memories,
            "skipped_memories": self.skipped_memories,
            "imported_episodes": self.imported_episodes,
            "skipped_episodes": self.skipped_episodes,
            "profile_updated": self.profile_updated,
            "errors": list(self.errors),
            "imported_refs": dict(self.imported_refs),
        }

    def add(self, part: dict[str, Any]) -> None:
        """Join a part's ``as_dict`` into this tally."""
        self.imported_memories += int(part["imported_memories"])
        self.skipped_memories += int(part["skipped_memories"])
        self.imported_episodes += int(part["imported_episodes"])
        self.skipped_episodes += int(part["skipped_episodes"])
        self.profile_updated = self.profile_updated or bool(part["profile_updated"])
        self.errors.extend(str(e) for e in part["errors"])
        self.imported_refs.update({str(k): int(v) for k, v in part["imported_refs"].items()})
