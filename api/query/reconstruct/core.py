"""Reconstruct's decisions as pure functions (A4, A5): relevance, bundling, the relation walk,
roles, structuring and budgets. No I/O, so the same state always gives the same answer.
See docs/associations.md, "reconstruct".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from memstream.projections.associations import AgentGraph, neighbourhood
from memstream.projections.lexical.text import tokens
from memstream.projections.scope import ScopeFilter

ROLE_VOCABULARY: Final = ("supports", "supersedes", "corrects", "qualifies", "contradicts", "temporal_predecessor")
CLUSTER_KEYS: Final = ("cluster:msg_id", "cluster:episode", "cluster:relation")
WHY_RELATION: Final = "relation:"
DEFAULT_WHY: Final = "seed"

NO_RELEVANT_EVIDENCE: Final = "no_relevant_evidence"
BELOW_QUALITY_THRESHOLD: Final = "below_quality_threshold"
EXHAUSTED_CANDIDATES: Final = "exhausted_candidates"
BUDGET_EXHAUSTED: Final = "budget_exhausted"

# English closed-class words. A record that shares only these with a question is not evidence
# for it: "what is the" matches almost every stored sentence lexically, and a hashed or neural
# embedding of function words lands near any short text. Stemmed like the lexical index.
_FUNCTION_WORDS = """
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had
has have having he her here hers herself him himself his how i if in into is it its itself just
me more most my myself no nor not now of off on once only or other our ours ourselves out over
own same she should so some such than that the their theirs them themselves then there these
they this those through to too under until up very was we were what when where which while who
whom why will with would you your yours yourself yourselves s t d ll m o re ve y let lets shall
may might must ought also yet ever tell please know say said get got one thing things
"""
FUNCTION_STEMS: Final = frozenset(tokens(_FUNCTION_WORDS))


def content_terms(text: str) -> set[str]:
    """The stemmed lexical tokens of ``text`` that are not function words."""
    return {t for t in tokens(text) if t not in FUNCTION_STEMS}


@dataclass(slots=True)
class Row:
    """One candidate or walked record, normalised to what the stages read."""

    ref: str
    content: str  # as a recall row shows it ("[Episode] ..." for episodes)
    as_of: str  # the row's timestamp as reads show it
    ts: datetime | None
    project: str
    channel: str
    msg_id: str = ""
    rank: int = 0  # 0 = most relevant
    span: tuple[datetime, datetime] | None = None  # an episode's [start, end]
    terms: set[str] = field(default_factory=set)  # content terms, for the relevance check

    @property
    def kind(self) -> str:
        return self.ref.partition(":")[0]

    @property
    def row_id(self) -> int:
        return int(self.ref.partition(":")[2])


def relevant(rows: Sequence[Row], query_terms: set[str]) -> list[Row]:
    """The candidates that share a content term with the question (or a declared name of an
    entity it names). The gate already judged them; this only refuses to call a row evidence
    when the only words it has in common with the question are function words."""
    if not query_terms:
        return []
    return [r for r in rows if r.terms & query_terms]


def _order_key(r: Row) -> tuple[Any, ...]:
    """Claims' total order: newest first, memories before episodes, more relevant, lower id."""
    return (r.ts is None, -r.ts.timestamp() if r.ts else 0.0, r.kind != "mem", r.rank, r.row_id)


def _relevance_key(r: Row) -> tuple[int, str, int]:
    return (r.rank, r.kind, r.row_id)


def _message_key(r: Row) -> tuple[str, str] | None:
    """Message ids identify a record within its project only."""
    return (r.project, r.msg_id) if r.kind == "mem" and r.msg_id else None


def _contains(ep: Row, mem: Row) -> bool:
    return (
        ep.span is not None
        and mem.ts is not None
        and (ep.project, ep.channel) == (mem.project, mem.channel)
        and ep.span[0] <= mem.ts <= ep.span[1]
    )


class _Union:
    """Union-find whose merges record the key that joined each row (first key wins)."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))
        self.why: dict[int, str] = {}

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int, why: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            lo, hi = (ra, rb) if ra < rb else (rb, ra)
            self.parent[hi] = lo
        for i in (a, b):
            self.why.setdefault(i, why)


Link = tuple[str, str, str]  # (subject ref, predicate, object ref)


def bundle(rows: Sequence[Row], links: Sequence[Link]) -> tuple[list[list[int]], dict[str, str]]:
    """Stage 2: clusters of row indices, most relevant cluster first, and each joined row's why.

    Keys are applied strongest first (msg_id, episode containment, declared relation), so the
    ``why`` a row gets does not depend on iteration order. A shared entity is not a key: every
    record mentioning a project's name would fold into one item.
    """
    uf = _Union(len(rows))
    by_msg: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(rows):
        key = _message_key(r)
        if key is not None:
            by_msg.setdefault(key, []).append(i)
    for _, members in sorted(by_msg.items()):
        for other in members[1:]:
            uf.union(members[0], other, "cluster:msg_id")
    for i, ep in enumerate(rows):
        if ep.kind != "ep":
            continue
        for j, mem in enumerate(rows):
            if mem.kind == "mem" and _contains(ep, mem):
                uf.union(i, j, "cluster:episode")
    index = {r.ref: i for i, r in enumerate(rows)}
    for subject, predicate, obj in links:
        if subject in index and obj in index:
            uf.union(index[subject], index[obj], WHY_RELATION + predicate)
    grouped: dict[int, list[int]] = {}
    for i in range(len(rows)):
        grouped.setdefault(uf.find(i), []).append(i)
    clusters = sorted(grouped.values(), key=lambda g: min(rows[i].rank for i in g))
    return clusters, {rows[i].ref: why for i, why in uf.why.items()}


@dataclass(slots=True)
class Walked:
    ref: str
    why: str
    hops: int


def walk(
    clusters: Sequence[Sequence[int]],
    rows: Sequence[Row],
    graph: AgentGraph | None,
    max_hops: int,
    per_entity: int,
    scope: ScopeFilter,
    readable: Callable[[str], bool],
) -> tuple[list[list[Walked]], list[set[str]]]:
    """Stage 3, per cluster in item order: the records that mention an entity reached from the
    cluster's candidates through at least one declared relation, ordered fewest hops first, then
    the more recently declared relation, then the lower record id. A record already in the pool
    or reached by an earlier item is not added. Also returns, per cluster, the bounds that cut it
    (``max_hops``: a relation left unfollowed; ``max_evidence``: an entity had more records than
    ``per_entity``). With nothing declared this is the identity (A2)."""
    reached: list[list[Walked]] = [[] for _ in clusters]
    cuts: list[set[str]] = [set() for _ in clusters]
    if graph is None:
        return reached, cuts
    pool = {r.ref for r in rows}
    taken: set[str] = set()
    for position, members in enumerate(clusters):
        starts = sorted({e for i in members for e in graph.mentioned.get(rows[i].ref, ()) if e in graph.entities})
        if not starts:
            continue
        hood = neighbourhood(graph, starts, max_hops, scope)
        if hood.unfollowed():
            cuts[position].add("max_hops")
        newest = sorted(hood.edges.values(), key=lambda r: r.recency(), reverse=True)
        recency = {r.id: n for n, r in enumerate(newest)}
        best: dict[str, tuple[Any, ...]] = {}
        for entity, hops in hood.distance.items():
            if hops == 0:
                continue
            via = hood.via[entity]
            refs = sorted((r for r in graph.mentions.get(entity, ()) if readable(r)), key=_ref_key)
            if len(refs) > per_entity:
                cuts[position].add("max_evidence")
                refs = refs[:per_entity]
            for ref in refs:
                if ref in pool or ref in taken:
                    continue
                key = (hops, recency[via.id], _ref_key(ref), via.predicate)
                if ref not in best or key < best[ref]:
                    best[ref] = key
        ordered = sorted(best.items(), key=lambda kv: kv[1])
        reached[position] = [Walked(ref, WHY_RELATION + key[3], key[0]) for ref, key in ordered]
        taken.update(best)
    return reached, cuts


def _ref_key(ref: str) -> tuple[int, str]:
    kind, _, raw = ref.partition(":")
    return (int(raw), kind)


def roles_for(claim: Row, members: Sequence[Row], links: Sequence[Link]) -> list[dict[str, str]]:
    """What each referenced row is TO this claim (the ref is the subject): the next newer row
    with the same message id ``supersedes`` it; an episode whose span holds it ``supports`` it;
    a declared record → record relation whose predicate is a role word says the same thing."""
    roles: list[dict[str, str]] = []
    identity = _message_key(claim)
    if identity is not None and claim.ts is not None:
        newer = [m for m in members if m.ref != claim.ref and _message_key(m) == identity and m.ts and m.ts > claim.ts]
        if newer:
            successor = min(newer, key=lambda m: (m.ts.timestamp() if m.ts else 0.0, m.row_id))
            roles.append({"ref": successor.ref, "role": "supersedes"})
    if claim.kind == "mem":
        for m in members:
            if m.kind == "ep" and _contains(m, claim):
                roles.append({"ref": m.ref, "role": "supports"})
    retained = {m.ref for m in members}
    for subject, predicate, obj in links:
        if obj == claim.ref and subject in retained and predicate in ROLE_VOCABULARY:
            role = {"ref": subject, "role": predicate}
            if role not in roles:
                roles.append(role)
    return roles


def _head(members: Sequence[Row]) -> Row:
    """The most relevant row, or the latest version of it when newer versions are present."""
    lead = min(members, key=_relevance_key)
    identity = _message_key(lead)
    if identity is None or lead.ts is None:
        return lead
    return min((m for m in members if _message_key(m) == identity and m.ts is not None), key=_order_key)


def structure(
    members: Sequence[Row],
    why: dict[str, str],
    walked: Sequence[tuple[Row, Walked]],
    links: Sequence[Link],
    max_evidence: int,
) -> tuple[dict[str, Any], Row, list[Row]]:
    """Stage 4: one cluster becomes one item. Returns (item, head row, other retained rows most
    relevant first then walked in walk order), the order excerpts are quoted in."""
    head = _head(members)
    others = sorted((m for m in members if m is not head), key=_relevance_key)
    extra = [row for row, _ in walked]
    retained_list = [head, *others, *extra][:max_evidence]
    dropped = len(members) + len(extra) - len(retained_list)
    retained = {id(r) for r in retained_list}
    ordered = sorted((r for r in [*members, *extra] if id(r) in retained), key=_order_key)
    walk_why = {row.ref: w for row, w in walked}
    claims = []
    for r in ordered:
        claim: dict[str, Any] = {"ref": r.ref, "as_of": r.as_of}
        w = walk_why.get(r.ref)
        if w is not None:
            claim["why"], claim["hops"] = w.why, w.hops
        elif why.get(r.ref, DEFAULT_WHY) != DEFAULT_WHY:
            claim["why"] = why[r.ref]
        roles = roles_for(r, ordered, links)
        if roles:
            claim["roles"] = roles
        claims.append(claim)
    present = {_key_of(why.get(m.ref)) for m in members} - {None}
    item: dict[str, Any] = {"content": head.content, "head_ref": head.ref, "claims": claims}
    independence = next((k for k in CLUSTER_KEYS if k in present), None)
    if independence is not None:
        item["independence_reason"] = independence
    if dropped:
        item["claims_omitted"] = dropped
    return item, head, [r for r in retained_list if r is not head]


def _key_of(why: str | None) -> str | None:
    if why is None:
        return None
    return "cluster:relation" if why.startswith(WHY_RELATION) else why


def quote(text: str, cap: int) -> dict[str, Any]:
    """A quotation of a row from its start, at most ``cap`` characters, saying when it was cut."""
    out: dict[str, Any] = {"content": text[:cap], "ranges": [[0, min(len(text), cap)]]}
    if len(text) > cap:
        out["content_len"] = len(text)
        out["content_truncated"] = True
    return out


Entry = tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]  # (item, head quote, excerpts)


def sequence(entries: Sequence[Entry]) -> list[tuple[int, int]]:
    """The one payload order budgets cut: every head in item order, then each item's first
    excerpt, then each item's second, ... as (item, excerpt index or -1 for the head)."""
    steps = [(i, -1) for i in range(len(entries))]
    rounds = max((len(x) for _, _, x in entries), default=0)
    for r in range(rounds):
        steps.extend((i, r) for i, (_, _, x) in enumerate(entries) if r < len(x))
    return steps


def step_cost(entries: Sequence[Entry], step: tuple[int, int]) -> int:
    _, head, excerpts = entries[step[0]]
    return len(head["content"]) if step[1] < 0 else len(excerpts[step[1]]["content"])


def allocate(entries: Sequence[Entry], steps: int) -> tuple[list[dict[str, Any]], int]:
    """The items carried by the first ``steps`` steps of ``sequence``: an item whose head is
    outside is not returned; an excerpt outside is omitted (its claim stays). Raising the budget
    only lengthens the prefix, so it never removes an item or an excerpt. Returns (items, chars)."""
    order = sequence(entries)[:steps]
    heads = sum(1 for _, j in order if j < 0)
    taken = [0] * heads
    used = 0
    for i, j in order:
        used += step_cost(entries, (i, j))
        if j >= 0:
            taken[i] += 1
    items = []
    for (item, head, excerpts), n in zip(entries[:heads], taken, strict=True):
        out = dict(item)
        out.update(head)
        if n:
            out["excerpts"] = excerpts[:n]
        if len(excerpts) > n:
            out["excerpts_omitted"] = len(excerpts) - n
        items.append(out)
    return items, used


def steps_within(entries: Sequence[Entry], budget: int) -> int:
    """How many steps of the sequence fit ``budget`` characters. The first head always fits:
    a budget never returns nothing when there is something (it is cut, and says so)."""
    used = 0
    n = 0
    for step in sequence(entries):
        cost = step_cost(entries, step)
        if n and used + cost > budget:
            break
        used += cost
        n += 1
    return n


def largest_fitting(total: int, fits: Callable[[int], bool]) -> int:
    """The largest n in [1, total] with ``fits(n)`` (monotone), or 0 when even 1 does not fit."""
    lo, hi, best = 1, total, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best
