"""Declared associations on the write side: the index the decider consults and the pure decider.

An agent declares entities (with aliases), the records that mention them and subject–predicate–
object relations (CONTRACTS A1). The server adds nothing of its own: it extracts no entity from
stored text and infers no relation. The only processing a declaration receives is
normalisation (NFKC, case-fold, whitespace collapsed) so that ``Bob`` and ``ＢＯＢ`` are one name;
the written form is kept for display.

Everything a later fold needs is resolved here, once, and travels in the event: entity and
relation ids, which aliases were new, which mentions and relations were added, and every
removal a retraction cascades into. The folds (this module's ``AssocIndex`` and the read model
``projections/associations.py``) then only copy what the event says, so replay never re-judges
a declaration and both folds agree by construction.

Rules the decider holds (they follow CPersona 2.6's ``associations.py``):

* one normalised name or alias resolves to at most one entity within what a scope can see;
* a record named by a declaration (anchor, relation endpoint, retracted mention) must be a live
  record of the declaring agent;
* a malformed item is reported in ``dropped`` with a reason and skipped; it never refuses the
  rest of the call, and never costs the memory a ``store`` carried it on;
* a call is bounded (``MAX_ITEMS`` items per list, ``MAX_ALIASES`` aliases per entity).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Final

MAX_ITEMS: Final = 64
MAX_ALIASES: Final = 32
MAX_TEXT: Final = 256

_WHITESPACE = re.compile(r"\s+")
_REF = re.compile(r"^(mem|ep):(\d+)$")

# A relation endpoint or a mention target: ("entity", id), ("mem", id) or ("ep", id).
Node = tuple[str, int]
# What makes two relation declarations the same relation (CPersona's unique key).
RelKey = tuple[str, str, str, int, str, str, int, str]


def normalize(text: str) -> str:
    """NFKC, case-folded, whitespace collapsed to one space, trimmed: what lookups compare."""
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def parse_record_ref(value: Any) -> tuple[str, int] | None:
    """``mem:<id>`` / ``ep:<id>`` → (kind, id); anything else → None (``mem:007`` is ``mem:7``)."""
    if not isinstance(value, str):
        return None
    m = _REF.match(value.strip())
    if not m:
        return None
    ident = int(m.group(2))
    return (m.group(1), ident) if ident < 2**63 else None


def _text(value: Any) -> str | None:
    """A declared string within the length bound, stripped, or None."""
    if not isinstance(value, str):
        return None
    value = value.strip()
    if not value or len(value) > MAX_TEXT:
        return None
    return value


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63


def visible_scopes(project: str, channel: str) -> list[tuple[str, str]]:
    """The scopes whose entities a writer in (project, channel) sees, most specific first."""
    projects = [project, ""] if project else [""]
    channels = [channel, ""] if channel else [""]
    return [(p, c) for p in projects for c in channels]


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


def relation_key(project: str, channel: str, r: dict[str, Any]) -> RelKey:
    s_kind, s_id = r["subject"]
    o_kind, o_id = r["object"]
    return (project, channel, s_kind, s_id, r["predicate"], o_kind, o_id, r.get("anchor_ref") or "")


# -- the decider ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Draft:
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


RecordExists = Any  # (kind, id) -> bool: whether the record is a live one of the declaring agent


def decide_declaration(
    index: AssocIndex,
    project: str,
    channel: str,
    associations: dict[str, Any] | None,
    anchor_ref: str,
    retract: dict[str, Any] | None,
    exists: RecordExists,
) -> tuple[dict[str, Any], bool]:
    """Judge one ``declare_associations`` call. Pure: (index, call) → (event payload, changed).

    The payload carries the caller's answer under ``report`` (CPersona's shape: ``entities``
    [{id, name, created}], ``mentions`` count, ``relations`` ids, ``dropped`` [{item, reason}],
    and ``retracted`` when a retraction was asked for); ``changed`` says whether folding it
    changes anything, so a call that only dropped or repeated items appends no event.
    """
    draft = _Draft(index, project, channel, next_entity=index.next_entity, next_relation=index.next_relation)
    report: dict[str, Any] = {"entities": [], "mentions": 0, "relations": [], "dropped": []}
    dropped: list[dict[str, str]] = report["dropped"]

    anchor = anchor_ref.strip() if isinstance(anchor_ref, str) else ""
    if anchor:
        parsed = parse_record_ref(anchor)
        if parsed is None or not exists(parsed):
            dropped.append({"item": "anchor_ref", "reason": f"{anchor} is not a record of this agent"})
            anchor = ""
        else:
            anchor = f"{parsed[0]}:{parsed[1]}"

    if associations:
        _declare(draft, associations, anchor, exists, report)
    removals: dict[str, list[Any]] = {"relations": [], "mentions": [], "entities": []}
    if retract:
        report["retracted"] = _retract(draft, retract, removals, dropped)
    payload: dict[str, Any] = {
        "anchor_ref": anchor,
        "entities": [draft.entities[i] for i in sorted(draft.entities)],
        "mentions": [[e, r] for e, r in draft.mentions],
        "relations": draft.relations,
        "retract": removals,
        "report": report,
    }
    added = any(e["new"] or e["aliases"] for e in payload["entities"]) or draft.mentions or draft.relations
    changed = bool(added or any(removals.values()))
    return payload, changed


def _declare(
    draft: _Draft, associations: dict[str, Any], anchor: str, exists: RecordExists, report: dict[str, Any]
) -> None:
    dropped: list[dict[str, str]] = report["dropped"]
    if not isinstance(associations, dict):
        dropped.append({"item": "associations", "reason": "must be an object"})
        return
    entities = associations.get("entities", [])
    relations = associations.get("relations", [])
    if not isinstance(entities, list):
        dropped.append({"item": "entities", "reason": "must be a list"})
        entities = []
    if not isinstance(relations, list):
        dropped.append({"item": "relations", "reason": "must be a list"})
        relations = []
    for index, item in enumerate(entities):
        if index >= MAX_ITEMS:
            dropped.append({"item": f"entities[{index}]", "reason": f"beyond the {MAX_ITEMS}-item bound"})
            continue
        name = _text(item.get("name")) if isinstance(item, dict) else None
        if name is None:
            dropped.append({"item": f"entities[{index}]", "reason": "name must be a nonempty string"})
            continue
        aliases = item.get("aliases", [])
        if not isinstance(aliases, list):
            dropped.append({"item": f"entities[{index}].aliases", "reason": "must be a list"})
            aliases = []
        # A declaration carrying aliases gets an entity of its own scope: an alias attached to a
        # wider scope's entity would be read in every scope that entity is (CPersona bug-448).
        carries_aliases = any(_text(a) is not None for a in aliases[:MAX_ALIASES])
        ident, created = draft.register(name, exact=carries_aliases)
        for a_index, alias in enumerate(aliases):
            label = f"entities[{index}].aliases[{a_index}]"
            if a_index >= MAX_ALIASES:
                dropped.append({"item": label, "reason": f"beyond the {MAX_ALIASES}-alias bound"})
                continue
            text = _text(alias)
            reason = "must be a nonempty string" if text is None else draft.add_alias(ident, text)
            if reason:
                dropped.append({"item": label, "reason": reason})
        if anchor:
            draft.mention(ident, anchor)
            report["mentions"] += 1
        report["entities"].append({"id": ident, "name": name, "created": created})

    for index, item in enumerate(relations):
        label = f"relations[{index}]"
        if index >= MAX_ITEMS:
            dropped.append({"item": label, "reason": f"beyond the {MAX_ITEMS}-item bound"})
            continue
        if not isinstance(item, dict):
            dropped.append({"item": label, "reason": "must be an object"})
            continue
        predicate = _text(item.get("predicate"))
        if predicate is None or not normalize(predicate):
            dropped.append({"item": label, "reason": "predicate must be a nonempty string"})
            continue
        ends: list[Node] = []
        for end in ("subject", "object"):
            node = _endpoint(draft, item.get(end), exists)
            if isinstance(node, str):
                dropped.append({"item": f"{label}.{end}", "reason": node})
                break
            ends.append(node)
        if len(ends) < 2:
            continue
        report["relations"].append(draft.relate(ends[0], normalize(predicate), ends[1], anchor))


def _endpoint(draft: _Draft, value: Any, exists: RecordExists) -> Node | str:
    """A relation endpoint: a record ref (must exist) or an entity name (registered if new)."""
    if isinstance(value, str) and _REF.match(value.strip()):
        parsed = parse_record_ref(value)
        if parsed is None or not exists(parsed):
            return f"{value.strip()} is not a record of this agent"
        return parsed
    name = _text(value)
    if name is None:
        return "endpoint must be an entity name or a record ref"
    ident, _ = draft.register(name)
    return ("entity", ident)


def _retract(
    draft: _Draft, retract: Any, removals: dict[str, list[Any]], dropped: list[dict[str, str]]
) -> dict[str, int]:
    """Retraction, the only removal (A1). memstream also retracts whole entities (``entities``:
    ids), which takes their aliases, mentions and relations along: without it a declared name
    would outlive every retraction and keep its lexical vote."""
    index = draft.index
    counts = {"relations": 0, "mentions": 0}
    if not isinstance(retract, dict):
        dropped.append({"item": "retract", "reason": "must be an object"})
        return counts
    lists: dict[str, list[Any]] = {}
    for name in ("relations", "mentions", "entities"):
        items = retract.get(name)
        if items is None:
            lists[name] = []
            continue
        if not isinstance(items, list):
            dropped.append({"item": f"retract.{name}", "reason": "must be a list"})
            items = []
        for i in range(MAX_ITEMS, len(items)):
            dropped.append({"item": f"retract.{name}[{i}]", "reason": f"beyond the {MAX_ITEMS}-item bound"})
        lists[name] = items[:MAX_ITEMS]
    gone_rel: dict[int, None] = {}
    gone_men: dict[tuple[int, str], None] = {}
    for i, rid in enumerate(lists["relations"]):
        if not _is_id(rid):
            dropped.append({"item": f"retract.relations[{i}]", "reason": "must be an integer id"})
        elif rid in index.relations and rid not in gone_rel:
            gone_rel[rid] = None
            counts["relations"] += 1
    for i, item in enumerate(lists["mentions"]):
        ident = item.get("entity") if isinstance(item, dict) else None
        parsed = parse_record_ref(item.get("ref")) if isinstance(item, dict) else None
        if not _is_id(ident) or parsed is None:
            dropped.append({"item": f"retract.mentions[{i}]", "reason": "needs an integer entity and a record ref"})
            continue
        key = (ident, f"{parsed[0]}:{parsed[1]}")
        if key in index.mentions and key not in gone_men:
            gone_men[key] = None
            counts["mentions"] += 1
    if "entities" in retract:
        counts["entities"] = 0
    gone_ent: list[int] = []
    for i, ident in enumerate(lists["entities"]):
        if not _is_id(ident):
            dropped.append({"item": f"retract.entities[{i}]", "reason": "must be an integer id"})
        elif ident in index.entities and ident not in gone_ent:
            gone_ent.append(ident)
            counts["entities"] += 1
    # What an entity's retraction cascades into is listed explicitly, so the folds copy it.
    doomed = set(gone_ent)
    for key in sorted(index.mentions):
        if key[0] in doomed:
            gone_men.setdefault(key, None)
    for rid, rel in sorted(index.relations.items()):
        if (rel[2] == "entity" and rel[3] in doomed) or (rel[5] == "entity" and rel[6] in doomed):
            gone_rel.setdefault(rid, None)
    removals["relations"] = sorted(gone_rel)
    removals["mentions"] = [[e, r] for e, r in sorted(gone_men)]
    removals["entities"] = sorted(gone_ent)
    return counts
