"""The association graph read model (A1, A8): entities, aliases, mentions and relations, both
directions of every edge, and the pure graph reads over it (name lookup, neighbourhoods, the
links reconstruct walks). See docs/associations.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from memstream.projections.scope import ScopeFilter
from memstream.streams.decision.associations.terms import normalize

# How many entities one neighbourhood expands (starts included), for traverse and the walk alike:
# the hop bound caps depth, not breadth, and on a connected graph five hops reach nearly all of it.
NEIGHBOURHOOD_MAX_ENTITIES = 256
# Stage 1 bounds: declared terms one query may match, and terms handed to the lexical arm.
MAX_QUERY_MATCHES = 64
MAX_EXPANSION_TERMS = 32


@dataclass(slots=True)
class Entity:
    id: int
    name: str
    normalized: str
    project: str
    channel: str
    created_at: str
    aliases: dict[str, str] = field(default_factory=dict)  # normalized -> as written


@dataclass(slots=True)
class Relation:
    id: int
    project: str
    channel: str
    subject: tuple[str, int]  # ("entity" | "mem" | "ep", id)
    predicate: str
    object: tuple[str, int]
    anchor_ref: str
    declared_by: str
    declared_at: str

    def recency(self) -> tuple[str, int]:
        """Sort key: larger is more recent (declaration time, then the later id)."""
        return (self.declared_at, self.id)


def _ref(node: tuple[str, int]) -> str | None:
    return None if node[0] == "entity" else f"{node[0]}:{node[1]}"


@dataclass(slots=True)
class AgentGraph:
    entities: dict[int, Entity] = field(default_factory=dict)
    index: dict[str, set[int]] = field(default_factory=dict)  # normalized name/alias -> entities
    mentions: dict[int, set[str]] = field(default_factory=dict)  # entity -> refs
    mentioned: dict[str, set[int]] = field(default_factory=dict)  # ref -> entities
    relations: dict[int, Relation] = field(default_factory=dict)
    adjacency: dict[int, set[int]] = field(default_factory=dict)  # entity -> entity-entity relation ids
    by_record: dict[str, set[int]] = field(default_factory=dict)  # ref -> relations naming it

    def is_empty(self) -> bool:
        return not self.entities and not self.relations

    # -- mutations (the fold) -------------------------------------------------------------------

    def add_entity(self, e: Entity) -> None:
        self.entities[e.id] = e
        self.index.setdefault(e.normalized, set()).add(e.id)
        for norm in e.aliases:
            self.index.setdefault(norm, set()).add(e.id)

    def add_alias(self, ident: int, written: str, norm: str) -> None:
        e = self.entities.get(ident)
        if e is not None and norm not in e.aliases:
            e.aliases[norm] = written
            self.index.setdefault(norm, set()).add(ident)

    def add_mention(self, ident: int, ref: str) -> None:
        if ident in self.entities:
            self.mentions.setdefault(ident, set()).add(ref)
            self.mentioned.setdefault(ref, set()).add(ident)

    def drop_mention(self, ident: int, ref: str) -> None:
        refs = self.mentions.get(ident)
        if refs is not None:
            refs.discard(ref)
            if not refs:
                del self.mentions[ident]
        ents = self.mentioned.get(ref)
        if ents is not None:
            ents.discard(ident)
            if not ents:
                del self.mentioned[ref]

    def add_relation(self, r: Relation) -> None:
        self.relations[r.id] = r
        if r.subject[0] == "entity" and r.object[0] == "entity":
            self.adjacency.setdefault(r.subject[1], set()).add(r.id)
            self.adjacency.setdefault(r.object[1], set()).add(r.id)
        for ref in {_ref(r.subject), _ref(r.object), r.anchor_ref or None} - {None}:
            self.by_record.setdefault(ref, set()).add(r.id)  # type: ignore[arg-type]

    def drop_relation(self, rid: int) -> None:
        r = self.relations.pop(rid, None)
        if r is None:
            return
        for end in (r.subject, r.object):
            if end[0] == "entity":
                _discard(self.adjacency, end[1], rid)
        for ref in {_ref(r.subject), _ref(r.object), r.anchor_ref or None} - {None}:
            _discard(self.by_record, ref, rid)  # type: ignore[arg-type]

    def drop_entity(self, ident: int) -> None:
        e = self.entities.pop(ident, None)
        if e is None:
            return
        for norm in (e.normalized, *e.aliases):
            _discard(self.index, norm, ident)
        for ref in sorted(self.mentions.get(ident, ())):
            self.drop_mention(ident, ref)
        for rid in sorted(self.adjacency.get(ident, ())):
            self.drop_relation(rid)

    def forget_record(self, ref: str) -> None:
        for ident in sorted(self.mentioned.get(ref, ())):
            self.drop_mention(ident, ref)
        for rid in sorted(self.by_record.get(ref, ())):
            self.drop_relation(rid)

    # -- reads ----------------------------------------------------------------------------------

    def resolve(self, name: str, scope: ScopeFilter) -> list[int]:
        """Every entity the caller can see that ``name`` (a name or an alias) names, by id."""
        norm = normalize(name)
        if not norm:
            return []
        return sorted(i for i in self.index.get(norm, ()) if _sees(scope, self.entities[i]))

    def aliases_of(self, ident: int) -> list[str]:
        e = self.entities[ident]
        return [e.aliases[n] for n in sorted(e.aliases)]


def _discard(mapping: dict[Any, set[int]], key: Any, value: int) -> None:
    values = mapping.get(key)
    if values is not None:
        values.discard(value)
        if not values:
            del mapping[key]


def _sees(scope: ScopeFilter, item: Entity | Relation) -> bool:
    return scope.admits(item.project, item.channel)


@dataclass
class AssociationsProjection:
    name: str = "associations"
    offset: int = -1
    agents: dict[str, AgentGraph] = field(default_factory=dict)

    def graph(self, agent_id: str) -> AgentGraph | None:
        return self.agents.get(agent_id)

    def apply(self, offset: int, ev: dict[str, Any]) -> None:
        t = ev["type"]
        agent = ev["scope"]["agent_id"]
        p = ev["payload"]
        if t == "associations.declared" or t == "associations.retracted":
            self._declared(ev, p)
        elif t in ("memory.deleted", "episode.deleted", "agent_data.deleted"):
            g = self.agents.get(agent)
            if g is None:
                return
            if p.get("agent_scope"):  # erase_agent_data: the agent's key sealed every declaration
                del self.agents[agent]
                return
            if t == "memory.deleted":
                g.forget_record(f"mem:{p['id']}")
            elif t == "episode.deleted":
                g.forget_record(f"ep:{p['id']}")
            else:
                for ref in [f"mem:{i}" for i in p["memory_ids"]] + [f"ep:{i}" for i in p["episode_ids"]]:
                    g.forget_record(ref)
            if g.is_empty() and not g.mentions:
                del self.agents[agent]

    def _declared(self, ev: dict[str, Any], p: dict[str, Any]) -> None:
        scope = ev["scope"]
        g = self.agents.setdefault(scope["agent_id"], AgentGraph())
        when = ev["occurred_at"]
        for e in p.get("entities", ()):
            if e.get("new"):
                g.add_entity(Entity(e["id"], e["name"], e["normalized"], scope["project_id"], scope["channel"], when))
            for written, norm in e.get("aliases", ()):
                g.add_alias(e["id"], written, norm)
        for ident, ref in p.get("mentions", ()):
            g.add_mention(ident, ref)
        for r in p.get("relations", ()):
            g.add_relation(
                Relation(
                    r["id"],
                    scope["project_id"],
                    scope["channel"],
                    (r["subject"][0], r["subject"][1]),
                    r["predicate"],
                    (r["object"][0], r["object"][1]),
                    r.get("anchor_ref") or "",
                    "agent",
                    when,
                )
            )
        gone = p.get("retract") or {}
        for rid in gone.get("relations", ()):
            g.drop_relation(rid)
        for ident, ref in gone.get("mentions", ()):
            g.drop_mention(ident, ref)
        for ident in gone.get("entities", ()):
            g.drop_entity(ident)
        if g.is_empty() and not g.mentions:
            del self.agents[scope["agent_id"]]

    # -- snapshot -------------------------------------------------------------------------------

    def superseded_by(self, agent_id: str, refs: Iterable[str]) -> dict[str, list[str]]:
        """For each of ``refs`` that a declared ``X supersedes ref`` relation names as the old
        one, the refs that supersede it (seed 002: a superseded memory must be refreshed, not
        answered from). Scope filtering is the caller's, as for every superseded provider."""
        g = self.graph(agent_id)
        out: dict[str, list[str]] = {}
        if g is None:
            return out
        for ref in refs:
            newer: list[str] = []
            for rid in sorted(g.by_record.get(ref, ())):
                r = g.relations[rid]
                newer_ref = _ref(r.subject)
                if r.predicate.casefold() == "supersedes" and _ref(r.object) == ref and newer_ref not in (None, ref):
                    newer.append(str(newer_ref))
            if newer:
                out[ref] = newer
        return out

    def to_snapshot(self) -> dict[str, Any]:
        """Canonical: equal graphs give byte-equal snapshots (everything sorted)."""
        out: dict[str, Any] = {}
        for agent in sorted(self.agents):
            g = self.agents[agent]
            out[agent] = {
                "entities": [
                    [e.id, e.name, e.normalized, e.project, e.channel, e.created_at, sorted(e.aliases.items())]
                    for _, e in sorted(g.entities.items())
                ],
                "mentions": sorted([i, r] for i, refs in g.mentions.items() for r in refs),
                "relations": [
                    [
                        r.id,
                        r.project,
                        r.channel,
                        list(r.subject),
                        r.predicate,
                        list(r.object),
                        r.anchor_ref,
                        r.declared_by,
                        r.declared_at,
                    ]
                    for _, r in sorted(g.relations.items())
                ],
            }
        return {"agents": out}

    def load_snapshot(self, body: dict[str, Any]) -> None:
        self.agents = {}
        for agent, a in body["agents"].items():
            g = self.agents[agent] = AgentGraph()
            for ident, name, norm, project, channel, created, aliases in a["entities"]:
                g.add_entity(Entity(ident, name, norm, project, channel, created, {n: w for n, w in aliases}))
            for ident, ref in a["mentions"]:
                g.add_mention(ident, ref)
            for rid, project, channel, subject, predicate, obj, anchor, by, at in a["relations"]:
                g.add_relation(
                    Relation(
                        rid, project, channel, (subject[0], subject[1]), predicate, (obj[0], obj[1]), anchor, by, at
                    )
                )


# -- pure graph reads ---------------------------------------------------------------------------


@dataclass(slots=True)
class Neighbourhood:
    """Breadth first from some starts over entity → entity relations, either direction.

    ``distance``: entity → hops, for every entity within the hop bound (at most
    NEIGHBOURHOOD_MAX_ENTITIES). ``edges``: every visible relation touching an expanded entity,
    including those of entities AT the bound, so a caller can tell a relation went unfollowed.
    ``via``: entity → the relation that first reached it (the most recent one from one hop closer).
    """

    distance: dict[int, int]
    edges: dict[int, Relation]
    via: dict[int, Relation]

    def unfollowed(self) -> bool:
        """Whether some loaded relation leads to an entity the walk did not reach."""
        return any(end[1] not in self.distance for r in self.edges.values() for end in (r.subject, r.object))


def neighbourhood(g: AgentGraph, starts: Iterable[int], max_hops: int, scope: ScopeFilter) -> Neighbourhood:
    """BFS (see ``Neighbourhood``). Per hop, new entities are taken most-recent-relation first, so
    where the entity bound cuts, it keeps what the most recently declared relations reached."""
    distance = {e: 0 for e in starts}
    edges: dict[int, Relation] = {}
    via: dict[int, Relation] = {}
    frontier = sorted(distance)
    for hop in range(max_hops + 1):
        if not frontier:
            break
        nxt: dict[int, Relation] = {}
        for ent in frontier:
            for rid in g.adjacency.get(ent, ()):
                r = g.relations[rid]
                s, o = r.subject[1], r.object[1]
                if not (_sees(scope, r) and _sees(scope, g.entities[s]) and _sees(scope, g.entities[o])):
                    continue
                edges[rid] = r
                for end in (s, o):
                    if end not in distance and (end not in nxt or r.recency() > nxt[end].recency()):
                        nxt[end] = r
        if hop == max_hops:
            break
        room = NEIGHBOURHOOD_MAX_ENTITIES - len(distance)
        chosen = sorted(nxt, key=lambda e: (nxt[e].recency(), -e), reverse=True)
        if len(chosen) > room:
            chosen = chosen[: max(room, 0)]
        for e in chosen:
            distance[e] = hop + 1
            via[e] = nxt[e]
        if len(nxt) > len(chosen):
            break
        frontier = sorted(chosen)
    return Neighbourhood(distance, edges, via)


Readable = Callable[[str], bool]


def traverse(
    g: AgentGraph | None, entity: str, max_hops: int, limit: int, scope: ScopeFilter, readable: Readable
) -> dict[str, Any]:
    """A8: the neighbourhood of a declared entity, CPersona's ``traverse`` response shape.

    Entities are ordered by hops, then by the most recently declared relation that reached them,
    then by id; ``limit`` bounds both how many are returned and how many mentioning refs each
    lists. Mentions are the refs of records the caller could read directly (``readable``).
    """
    response: dict[str, Any] = {"entity": entity, "max_hops": max_hops, "limit": limit, "entities": [], "relations": []}
    starts = g.resolve(entity, scope) if g is not None else []
    if g is None or not starts:
        response["reason"] = "no_such_entity"
        return response
    hood = neighbourhood(g, starts, max_hops, scope)
    newest = sorted(hood.edges.values(), key=lambda r: r.recency(), reverse=True)
    position = {r.id: i for i, r in enumerate(newest)}
    order = sorted(
        hood.distance, key=lambda e: (hood.distance[e], position[hood.via[e].id] if e in hood.via else -1, e)
    )
    kept = order[:limit]
    kept_set = set(kept)
    mentions_cut = False
    for ident in kept:
        e = g.entities[ident]
        entry: dict[str, Any] = {"id": ident, "name": e.name, "hops": hood.distance[ident]}
        if e.aliases:
            entry["aliases"] = g.aliases_of(ident)
        refs = sorted((r for r in g.mentions.get(ident, ()) if readable(r)), key=_ref_order)
        if refs:
            entry["mentions"] = refs[:limit]
        if len(refs) > limit:
            entry["mentions_omitted"] = len(refs) - limit
            mentions_cut = True
        response["entities"].append(entry)
    for r in newest:
        if r.subject[1] in kept_set and r.object[1] in kept_set:
            rel: dict[str, Any] = {
                "id": r.id,
                "subject": r.subject[1],
                "predicate": r.predicate,
                "object": r.object[1],
                "declared_by": r.declared_by,
                "declared_at": r.declared_at,
            }
            if r.anchor_ref:
                rel["anchor_ref"] = r.anchor_ref
            response["relations"].append(rel)
    omitted = []
    if hood.unfollowed():
        omitted.append("max_hops")
    if len(order) > len(kept) or mentions_cut:
        omitted.append("limit")
    if len(order) > len(kept):
        response["entities_omitted"] = len(order) - len(kept)
    if omitted:
        response["bounds"] = {"omitted": omitted}
    return response


def _ref_order(ref: str) -> tuple[int, str]:
    """Lowest id first, memories before episodes at equal ids."""
    kind, _, raw = ref.partition(":")
    return (int(raw), kind)


def query_terms(g: AgentGraph | None, query: str, scope: ScopeFilter) -> tuple[list[str], list[str]]:
    """Stage 1 of reconstruct: the extra terms the lexical arm receives for ``query`` (A3).

    The query is matched against the visible names and aliases by normalised substring, longest
    first; a shorter term inside a span a longer one already claimed does not count. For each
    entity the query names, its declared name and its other aliases are returned as written,
    except those the query already contains. ``([], [])`` with nothing declared, so retrieval is
    then called exactly as without associations (A2). Returns (terms, names of matched entities).
    """
    folded = normalize(query)
    if g is None or not folded:
        return [], []
    hits: list[tuple[int, str, int]] = []
    for term, idents in g.index.items():
        if term and term in folded:
            hits.extend((-len(term), term, i) for i in idents if _sees(scope, g.entities[i]))
    hits.sort()
    claimed: list[tuple[int, int]] = []
    found: set[str] = set()
    matched: list[int] = []
    for _, term, ident in hits[:MAX_QUERY_MATCHES]:
        ok = term in found
        start = folded.find(term)
        while not ok and start != -1:
            end = start + len(term)
            if all(end <= s or start >= e for s, e in claimed):
                claimed.append((start, end))
                ok = True
            start = folded.find(term, start + 1)
        if ok:
            found.add(term)
            if ident not in matched:
                matched.append(ident)
    terms: list[str] = []
    seen: set[str] = set()
    for ident in matched:
        e = g.entities[ident]
        for written, norm in [(e.name, e.normalized), *((e.aliases[n], n) for n in sorted(e.aliases))]:
            if norm in seen or norm in folded:
                continue
            seen.add(norm)
            if len(terms) < MAX_EXPANSION_TERMS:
                terms.append(written)
    return terms, [g.entities[i].name for i in matched]


def record_links(g: AgentGraph | None, refs: Iterable[str], scope: ScopeFilter) -> list[tuple[str, str, str]]:
    """Stage 2: declared record → record relations with BOTH endpoints in ``refs``, sorted."""
    if g is None:
        return []
    pool = set(refs)
    links: set[tuple[str, str, str]] = set()
    for ref in pool:
        for rid in g.by_record.get(ref, ()):
            r = g.relations[rid]
            s, o = _ref(r.subject), _ref(r.object)
            if s == ref and o is not None and o in pool and o != s and _sees(scope, r):
                links.add((s, r.predicate, o))
    return sorted(links)
