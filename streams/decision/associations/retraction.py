"""Retraction, the only removal: which relations, mentions and entities a call takes away."""

from __future__ import annotations

from typing import Any, TypeGuard

from memstream.streams.decision.associations.draft import Draft
from memstream.streams.decision.associations.terms import MAX_ITEMS, parse_record_ref


def retract_items(
    draft: Draft, retract: object, removals: dict[str, list[Any]], dropped: list[dict[str, str]]
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
        if not is_id(rid):
            dropped.append({"item": f"retract.relations[{i}]", "reason": "must be an integer id"})
        elif rid in index.relations and rid not in gone_rel:
            gone_rel[rid] = None
            counts["relations"] += 1
    for i, item in enumerate(lists["mentions"]):
        key = _mention_key(item)
        if key is None:
            dropped.append({"item": f"retract.mentions[{i}]", "reason": "needs an integer entity and a record ref"})
        elif key in index.mentions and key not in gone_men:
            gone_men[key] = None
            counts["mentions"] += 1
    if "entities" in retract:
        counts["entities"] = 0
    gone_ent: list[int] = []
    for i, ident in enumerate(lists["entities"]):
        if not is_id(ident):
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


def _mention_key(item: object) -> tuple[int, str] | None:
    """``{entity, ref}`` as (entity id, canonical ref), or None when either is malformed."""
    if not isinstance(item, dict):
        return None
    ident, parsed = item.get("entity"), parse_record_ref(item.get("ref"))
    if not is_id(ident) or parsed is None:
        return None
    return ident, f"{parsed[0]}:{parsed[1]}"


def is_id(value: object) -> TypeGuard[int]:
    """A positive id that fits the log's 64-bit integers (a bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63
