"""One agent's declared graph as the decider needs it (ids, names, keys; no text), and its fold."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memstream.streams.decision.associations.terms import RelKey, relation_key


@dataclass(slots=True)
class AssocIndex:
    """One agent's declared graph, as much as the decider needs (ids, names, keys; no text)."""

    entities: dict[int, tuple[str, str]] = field(default_factory=dict)  # id -> (project, channel)
    # (project, channel, normalized name or alias) -> entity ids carrying it (one, normally)
    names: dict[tuple[str, str, str], set[int]] = field(default_factory=dict)
    keys: dict[int, set[str]] = field(default_factory=dict)  # entity -> its normalized name + aliases
    mentions: set[tuple[int, str]] = field(default_factory=set)
    relations: dict[int, RelKey] = field(default_factory=dict)
    by_key: dict[RelKey, int] = field(default_factory=dict)
    next_entity: int = 1
    next_relation: int = 1

    def empty(self) -> bool:
        return not self.entities and not self.relations and self.next_entity == 1 and self.next_relation == 1

    # -- the fold -------------------------------------------------------------------------------

    def apply(self, project: str, channel: str, p: dict[str, Any]) -> None:
        """Fold an ``associations.declared`` / ``associations.retracted`` payload."""
        for e in p.get("entities", ()):
            ident = e["id"]
            if e.get("new"):
                self.entities[ident] = (project, channel)
                self.next_entity = max(self.next_entity, ident + 1)
                self._key(ident, e["normalized"])
            for _, norm in e.get("aliases", ()):
                self._key(ident, norm)
        for ident, ref in p.get("mentions", ()):
            self.mentions.add((ident, ref))
        for r in p.get("relations", ()):
            key = relation_key(project, channel, r)
            self.relations[r["id"]] = key
            self.by_key.setdefault(key, r["id"])
            self.next_relation = max(self.next_relation, r["id"] + 1)
        gone = p.get("retract") or {}
        for rid in gone.get("relations", ()):
            self._drop_relation(rid)
        for ident, ref in gone.get("mentions", ()):
            self.mentions.discard((ident, ref))
        for ident in gone.get("entities", ()):
            self._drop_entity(ident)

    def forget_record(self, ref: str) -> None:
        """A deleted record takes the declarations that name it (as CPersona's delete triggers)."""
        self.mentions = {(e, r) for e, r in self.mentions if r != ref}
        kind, _, raw = ref.partition(":")
        node = (kind, int(raw))
        for rid, key in list(self.relations.items()):
            if (key[2], key[3]) == node or (key[5], key[6]) == node or key[7] == ref:
                self._drop_relation(rid)

    def _key(self, ident: int, norm: str) -> None:
        project, channel = self.entities[ident]
        self.names.setdefault((project, channel, norm), set()).add(ident)
        self.keys.setdefault(ident, set()).add(norm)

    def _drop_relation(self, rid: int) -> None:
        key = self.relations.pop(rid, None)
        if key is not None and self.by_key.get(key) == rid:
            del self.by_key[key]

    def _drop_entity(self, ident: int) -> None:
        scope = self.entities.pop(ident, None)
        if scope is None:
            return
        for norm in self.keys.pop(ident, set()):
            holders = self.names.get((*scope, norm))
            if holders is not None:
                holders.discard(ident)
                if not holders:
                    del self.names[(*scope, norm)]
        self.mentions = {(e, r) for e, r in self.mentions if e != ident}

    # -- snapshot -------------------------------------------------------------------------------

    def to_snapshot(self) -> dict[str, Any]:
        return {
            "entities": [[i, p, c, sorted(self.keys.get(i, ()))] for i, (p, c) in sorted(self.entities.items())],
            "mentions": sorted([e, r] for e, r in self.mentions),
            "relations": [[rid, list(key)] for rid, key in sorted(self.relations.items())],
            "next": [self.next_entity, self.next_relation],
        }

    @classmethod
    def from_snapshot(cls, snap: dict[str, Any]) -> AssocIndex:
        idx = cls()
        for ident, project, channel, norms in snap["entities"]:
            idx.entities[ident] = (project, channel)
            for norm in norms:
                idx._key(ident, norm)
        idx.mentions = {(e, r) for e, r in snap["mentions"]}
        for rid, key in snap["relations"]:
            k: RelKey = tuple(key)  # type: ignore[assignment]
            idx.relations[rid] = k
            idx.by_key.setdefault(k, rid)
        idx.next_entity, idx.next_relation = snap["next"]
        return idx
