"""The pure decider of a declaration: (index, call) to (event payload, whether it changes anything)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memstream.streams.decision.associations.draft import Draft
from memstream.streams.decision.associations.index import AssocIndex
from memstream.streams.decision.associations.retraction import retract_items
from memstream.streams.decision.associations.terms import (
    MAX_ALIASES,
    MAX_ITEMS,
    RECORD_REF,
    Node,
    declared_text,
    normalize,
    parse_record_ref,
)

# Whether (kind, id) names a live record of the declaring agent.
RecordExists = Callable[[Node], bool]


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
    draft = Draft(index, project, channel, next_entity=index.next_entity, next_relation=index.next_relation)
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
        report["retracted"] = retract_items(draft, retract, removals, dropped)
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
    draft: Draft, associations: dict[str, Any], anchor: str, exists: RecordExists, report: dict[str, Any]
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
        name = declared_text(item.get("name")) if isinstance(item, dict) else None
        if name is None:
            dropped.append({"item": f"entities[{index}]", "reason": "name must be a nonempty string"})
            continue
        aliases = item.get("aliases", [])
        if not isinstance(aliases, list):
            dropped.append({"item": f"entities[{index}].aliases", "reason": "must be a list"})
            aliases = []
        # A declaration carrying aliases gets an entity of its own scope: an alias attached to a
        # wider scope's entity would be read in every scope that entity is (CPersona bug-448).
        carries_aliases = any(declared_text(a) is not None for a in aliases[:MAX_ALIASES])
        ident, created = draft.register(name, exact=carries_aliases)
        for a_index, alias in enumerate(aliases):
            label = f"entities[{index}].aliases[{a_index}]"
            if a_index >= MAX_ALIASES:
                dropped.append({"item": label, "reason": f"beyond the {MAX_ALIASES}-alias bound"})
                continue
            text = declared_text(alias)
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
        predicate = declared_text(item.get("predicate"))
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


def _endpoint(draft: Draft, value: object, exists: RecordExists) -> Node | str:
    """A relation endpoint: a record ref (must exist) or an entity name (registered if new)."""
    if isinstance(value, str) and RECORD_REF.match(value.strip()):
        parsed = parse_record_ref(value)
        if parsed is None or not exists(parsed):
            return f"{value.strip()} is not a record of this agent"
        return parsed
    name = declared_text(value)
    if name is None:
        return "endpoint must be an entity name or a record ref"
    ident, _ = draft.register(name)
    return ("entity", ident)
