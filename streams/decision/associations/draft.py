"""A declaration being judged: what the call has added so far on top of the agent's index."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memstream.streams.decision.associations.index import AssocIndex
from memstream.streams.decision.associations.terms import Node, RelKey, normalize, relation_key, visible_scopes


@dataclass(slots=True)
class Draft:
    """A declaration being judged: the index plus what this call has added so far, so a later
    item of the same call sees an earlier one (a relation naming an entity declared above it)."""

    index: AssocIndex
    project: str
    channel: str
    entities: dict[int, dict[str, Any]] = field(default_factory=dict)  # payload entries by id
    names: dict[tuple[str, str, str], int] = field(default_factory=dict)
    mentions: dict[tuple[int, str], None] = field(default_factory=dict)
    relations: list[dict[str, Any]] = field(default_factory=list)
    keys: dict[RelKey, int] = field(default_factory=dict)
    next_entity: int = 0
    next_relation: int = 0

    def resolve(self, norm: str, *, exact: bool = False) -> int | None:
        scopes = visible_scopes(self.project, self.channel)
        for project, channel in scopes[:1] if exact else scopes:
            found = self.index.names.get((project, channel, norm))
            if found:
                return min(found)
            new = self.names.get((project, channel, norm))
            if new is not None:
                return new
        return None

    def entry(self, ident: int) -> dict[str, Any]:
        e = self.entities.get(ident)
        if e is None:
            e = self.entities[ident] = {"id": ident, "new": False, "aliases": []}
        return e

    def register(self, name: str, *, exact: bool = False) -> tuple[int, bool]:
        norm = normalize(name)
        found = self.resolve(norm, exact=exact)
        if found is not None:
            return found, False
        ident = self.next_entity
        self.next_entity += 1
        self.entities[ident] = {"id": ident, "new": True, "name": name, "normalized": norm, "aliases": []}
        self.names[(self.project, self.channel, norm)] = ident
        return ident, True

    def add_alias(self, ident: int, alias: str) -> str | None:
        norm = normalize(alias)
        if not norm:
            return "empty after normalization"
        owner = self.resolve(norm)
        if owner is not None and owner != ident:
            return "already names another entity in this scope"
        if owner is None:
            self.entry(ident)["aliases"].append([alias, norm])
            self.names[(*self._scope_of(ident), norm)] = ident
        return None

    def _scope_of(self, ident: int) -> tuple[str, str]:
        if ident in self.index.entities:
            return self.index.entities[ident]
        return (self.project, self.channel)

    def mention(self, ident: int, ref: str) -> None:
        if (ident, ref) not in self.index.mentions:
            self.entry(ident)
            self.mentions[(ident, ref)] = None

    def relate(self, subject: Node, predicate: str, obj: Node, anchor: str) -> int:
        r = {"subject": list(subject), "predicate": predicate, "object": list(obj), "anchor_ref": anchor}
        key = relation_key(self.project, self.channel, r)
        found = self.index.by_key.get(key)
        if found is None:
            found = self.keys.get(key)
        if found is not None:
            return found
        rid = self.next_relation
        self.next_relation += 1
        self.keys[key] = rid
        self.relations.append({"id": rid, **r})
        return rid
