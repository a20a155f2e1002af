"""Trying recall changes on the LoCoMo development split in process, before a server run.

A replica of memstream's recall per conversation (one agent each), so a variant is scored on
all 760 questions in seconds: the vector list is exact cosine over the agent's turns (what
dense-only recall returns below the scan window), the lexical vote is memstream's own
``LexicalProjection`` (BM25, then keyword rows, with IDF shares), and the fusion and gate are
``fusion.rrf`` with evidence and ``apply_gate``, as ``run_recall`` calls them. ``--check``
prints the replica's figures to compare with ``bench/eval_recall.py`` on the same folder.

Development split only (``../shared/eval/locomo-dev``); see docs/eval.md, "LoCoMo".

    python bench/locomo_dev.py                     # every variant, recall@10 / NDCG@10 per category
    python bench/locomo_dev.py --only base,product-f20-0.25
    python bench/locomo_dev.py --oracle            # evidence within the top 10 / 20 / 50 of either list
    python bench/locomo_dev.py --cv                # lexical weight and power chosen leave-one-conversation-out
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import math
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from eval_recall import AGENT, REPO, Dataset, K, assign_halves, load_dataset, ndcg_at_k, recall_at_k

from memstream.api.query.recall import coverage, fusion, rerank, speakers, window
from memstream.api.query.recall.gate import GateConfig, apply_gate
from memstream.api.query.recall.neighbours import neighbour_scores, reorder
from memstream.api.services.embedding import load_local_embedder
from memstream.projections.lexical import LexicalProjection
from memstream.projections.lexical.text import normalize, query_tokens, stem
from memstream.projections.scope import ScopeFilter

LOCOMO_DEV = REPO.parent / "shared" / "eval" / "locomo-dev"


@dataclass
class Agent:
    """One conversation: its turns in order (doc ids), their vectors, its lexical index."""

    name: str
    doc_ids: list[str]
    vectors: np.ndarray
    lexical: LexicalProjection
    texts: list[str]  # the turns' stored content, in doc_ids order


def build(ds: Dataset, embedder: str | None) -> dict[str, Agent]:
    emb = load_local_embedder(embedder)
    agents: dict[str, Agent] = {}
    for name in dict.fromkeys(ds.agent_of.get(d, AGENT) for d in ds.docs):
        ids = [d for d in ds.docs if ds.agent_of.get(d, AGENT) == name]
        vecs = emb.embed([ds.docs[d] for d in ids])
        lex = LexicalProjection()
        for i, d in enumerate(ids):
            scope = {"agent_id": name, "project_id": "", "channel": ""}
            lex.apply(i, {"type": "memory.stored", "scope": scope, "payload": {"id": i + 1, "content": ds.docs[d]}})
        agents[name] = Agent(name, ids, vecs, lex, [ds.docs[d] for d in ids])
    return agents


Ranked = list[tuple[str, float]]


@dataclass
class Lists:
    vector: Ranked  # best first, refs "mem:<1-based position>"
    lexical: Ranked
    shares: dict[str, float]
    cos: np.ndarray  # the query's cosine to every turn of its agent
    text: str = ""  # the question
    qvec: np.ndarray | None = None  # its embedding


def vector_list(ag: Agent, qvec: np.ndarray, depth: int) -> tuple[Ranked, np.ndarray]:
    sims = ag.vectors @ qvec
    top = np.argsort(-sims, kind="stable")[:depth]
    return [(f"mem:{j + 1}", float(sims[j])) for j in top], sims


def lexical_list(ag: Agent, text: str, depth: int) -> tuple[Ranked, dict[str, float]]:
    """BM25's rows, then keyword rows it missed, and every row's IDF share (as recall does)."""
    scope = ScopeFilter(ag.name)
    bm25 = ag.lexical.search_shares(scope, text, depth)
    keyword = ag.lexical.keyword_shares(scope, text, depth)
    seen = {r for r, _, _ in bm25}
    fill = [(r, s) for r, s, _ in keyword if r not in seen][: max(0, depth - len(bm25))]
    shares = {r: sh for r, _, sh in keyword} | {r: sh for r, _, sh in bm25}
    return [(r, s) for r, s, _ in bm25] + fill, shares


def retrieve(ag: Agent, qvec: np.ndarray, text: str, depth: int) -> Lists:
    vector, sims = vector_list(ag, qvec, depth)
    lexical, shares = lexical_list(ag, text, depth)
    return Lists(vector, lexical, shares, sims, text, qvec)


def fuse_default(lists: Lists, limit: int = K) -> list[fusion.Candidate]:
    vector, lexical = lists.vector[:limit], lists.lexical[:limit]
    active = {n: r for n, r in (("vector", vector), ("lexical", lexical)) if r}
    evidence = {
        "vector": fusion.vector_evidence(vector),
        "lexical": fusion.lexical_evidence({r: lists.shares.get(r, 0.0) for r, _ in lexical}),
    }
    return fusion.rrf(active, evidence=evidence)


Variant = Callable[[Agent, Lists], list[str]]  # refs best first


def gated(cands: list[fusion.Candidate], pool: int) -> list[str]:
    passed, _ = apply_gate(cands, pool, GateConfig())
    return [c.ref for c in passed]


def base(ag: Agent, lists: Lists) -> list[str]:
    return gated(fuse_default(lists), len(ag.doc_ids))


def dense(ag: Agent, lists: Lists) -> list[str]:
    return [r for r, _ in lists.vector[:K]]


def lexical(ag: Agent, lists: Lists) -> list[str]:
    return [r for r, _ in lists.lexical[:K]]


def deep(ag: Agent, lists: Lists) -> list[str]:
    """Fuse 30 rows of each list instead of 10."""
    return gated(fuse_default(lists, 3 * K), len(ag.doc_ids))


def product_candidates(ag: Agent, lists: Lists, weight: float, fetch: int) -> list[fusion.Candidate]:
    """What recall does (``neighbours.reorder`` on each list cut at ``fetch``, then back to 10,
    then evidence-weighted rrf), with adjacency by position in the conversation."""
    vec_ev = fusion.vector_evidence(lists.vector[:fetch])
    lex_ev = fusion.lexical_evidence({r: lists.shares.get(r, 0.0) for r, _ in lists.lexical[:fetch]})
    refs = {*vec_ev, *lex_ev}

    def near(ref: str) -> tuple[str | None, str | None]:
        p = int(ref.split(":")[1])
        prev, nxt = f"mem:{p - 1}", f"mem:{p + 1}"
        return (prev if prev in refs else None, nxt if nxt in refs else None)

    adjacency = {r: near(r) for r in refs}
    v, v_ev = reorder(lists.vector[:fetch], vec_ev, adjacency, weight)
    lx, lx_ev = reorder(lists.lexical[:fetch], lex_ev, adjacency, weight)
    active = {name: r for name, r in (("vector", v[:K]), ("lexical", lx[:K])) if r}
    return fusion.rrf(active, evidence={"vector": v_ev, "lexical": lx_ev})


def neighbours(
    weight: float, fetch: int = 3 * K, closed: bool = False, within: bool = False, product: bool = False
) -> Variant:
    """Each list's scores are smoothed over adjacent turns before fusion (``neighbour_scores``):
    a row's evidence is its own plus ``weight`` times its best neighbour's."""

    def run(ag: Agent, lists: Lists) -> list[str]:
        n = len(ag.doc_ids)
        vec_ev = {r: min(1.0, max(0.0, s)) for r, s in lists.vector[:fetch]}
        lex_ev = fusion.lexical_evidence({r: lists.shares.get(r, 0.0) for r, _ in lists.lexical[:fetch]})

        def pos(ref: str) -> int:
            return int(ref.split(":")[1])

        known = {pos(r) for r in vec_ev} | {pos(r) for r in lex_ev}

        def adjacent(p: int) -> tuple[int | None, int | None]:
            prev, nxt = (p - 1 if p > 1 else None), (p + 1 if p < n else None)
            if closed:  # only rows some list retrieved (their cosine / rrf is known)
                prev, nxt = (prev if prev in known else None), (nxt if nxt in known else None)
            return prev, nxt

        def smooth(ev: dict[str, float]) -> Ranked:
            by_pos = {pos(r): s for r, s in ev.items()}
            sm = neighbour_scores(by_pos, adjacent, weight, spread=True)
            if within:  # each list keeps its own rows: only their order changes
                sm = {p: v for p, v in sm.items() if p in by_pos}
            return sorted(((f"mem:{p}", s) for p, s in sm.items()), key=lambda x: (-x[1], x[0]))[:K]

        if product:
            return gated(product_candidates(ag, lists, weight, fetch), n)
        v, lx = smooth(vec_ev), smooth(lex_ev)
        active = {name: r for name, r in (("vector", v), ("lexical", lx)) if r}
        cands = fusion.rrf(active, evidence={"vector": dict(v), "lexical": dict(lx)})
        for c in cands:  # the gate keys on the real cosine
            c.cosine = float(lists.cos[pos(c.ref) - 1])
        return gated(cands, n)

    return run


def fused_neighbours(weight: float, fused_weight: float, fetch: int = 2 * K) -> Variant:
    """The kept reorder (``weight``), then the fused value itself smoothed over adjacent
    candidates (``fused_weight``): a neighbour found by the other retriever counts too."""

    def run(ag: Agent, lists: Lists) -> list[str]:
        cands = product_candidates(ag, lists, weight, fetch)
        fused = {c.ref: c.fused for c in cands}

        def adjacent(ref: str) -> tuple[str | None, str | None]:
            p = int(ref.split(":")[1])
            prev, nxt = f"mem:{p - 1}", f"mem:{p + 1}"
            return (prev if prev in fused else None, nxt if nxt in fused else None)

        smoothed = neighbour_scores(fused, adjacent, fused_weight)
        for c in cands:
            c.fused = smoothed[c.ref]
        return gated(fusion.ordered(cands), len(ag.doc_ids))

    return run


# -- second pass (2026-12-01): query-side variants measured against the kept default ---------


def fuse_named(
    named: dict[str, tuple[Ranked, dict[str, float]]],
    weight: float = 0.25,
    fetch: int = 2 * K,
    keep: int = K,
    weights: dict[str, float] | None = None,
) -> list[fusion.Candidate]:
    """``product_candidates`` for any number of lists (name -> (ranked, evidence)): each is
    cut at ``fetch``, reordered by adjacent-turn evidence, cut at ``keep`` and fused."""
    refs = {r for ranked, _ in named.values() for r, _ in ranked[:fetch]}

    def near(ref: str) -> tuple[str | None, str | None]:
        p = int(ref.split(":")[1])
        prev, nxt = f"mem:{p - 1}", f"mem:{p + 1}"
        return (prev if prev in refs else None, nxt if nxt in refs else None)

    adjacency = {r: near(r) for r in refs}
    lists: dict[str, Ranked] = {}
    evidence: dict[str, dict[str, float]] = {}
    for name, (ranked, ev) in named.items():
        cut = ranked[:fetch]
        own = {r: ev.get(r, 0.0) for r, _ in cut}
        cut, own = reorder(cut, own, adjacency, weight) if weight > 0 else (cut, own)
        lists[name], evidence[name] = cut[:keep], own
    return fusion.rrf({n: r for n, r in lists.items() if r}, weights=weights, evidence=evidence)


def shared_power(shares: dict[str, float], ranked: Ranked, power: float) -> dict[str, float]:
    return {r: min(1.0, max(0.0, shares.get(r, 0.0))) ** power for r, _ in ranked}


def default_named(lists: Lists, power: float = 2.0) -> dict[str, tuple[Ranked, dict[str, float]]]:
    return {
        "vector": (lists.vector, fusion.vector_evidence(lists.vector[: 2 * K])),
        "lexical": (lists.lexical, shared_power(lists.shares, lists.lexical[: 2 * K], power)),
    }


def weighted(power: float, lexical_weight: float, fetch: int = 2 * K, keep: int = K) -> Variant:
    """The kept default with another lexical evidence power and lexical weight, or list depths."""

    def run(ag: Agent, lists: Lists) -> list[str]:
        named = {
            "vector": (lists.vector, fusion.vector_evidence(lists.vector[:fetch])),
            "lexical": (lists.lexical, shared_power(lists.shares, lists.lexical[:fetch], power)),
        }
        cands = fuse_named(named, fetch=fetch, keep=keep, weights={"lexical": lexical_weight})
        return gated(cands, len(ag.doc_ids))

    return run


def vector_feedback(top: int, beta: float, add: bool) -> Variant:
    """Rocchio: a second vector search with the query moved toward the mean vector of the first
    answer's ``top`` rows, either replacing the vector list or fused as a third list."""

    def run(ag: Agent, lists: Lists) -> list[str]:
        assert lists.qvec is not None
        named = default_named(lists)
        first = gated(fuse_named(named), len(ag.doc_ids))[:top]
        centroid = np.mean([ag.vectors[int(r.split(":")[1]) - 1] for r in first], axis=0)
        moved = lists.qvec + beta * centroid
        second, _ = vector_list(ag, moved / np.linalg.norm(moved), 2 * K)
        named["vector2" if add else "vector"] = (second, fusion.vector_evidence(second))
        return gated(fuse_named(named), len(ag.doc_ids))

    return run


_WORD = re.compile(r"[a-z][a-z']+")


def feedback_terms(ag: Agent, refs: Sequence[str], query: str, count: int, max_df: float = 0.05) -> list[str]:
    """The ``count`` words the rows hold that the query does not, by summed IDF over the rows,
    among words at most ``max_df`` of the agent's rows hold (the session date and the speakers'
    names, in every turn, never qualify)."""
    idx = ag.lexical.agents[ag.name]
    n = len(idx.slot_of)
    asked = set(query_tokens(query))
    mass: dict[str, float] = {}
    surface: dict[str, str] = {}
    for ref in refs:
        for word in set(_WORD.findall(normalize(ag.texts[int(ref.split(":")[1]) - 1]))):
            token = stem(word)
            df = idx.df.get(token, 0)
            if token in asked or len(word) < 3 or not df or df / n > max_df:
                continue
            mass[token] = mass.get(token, 0.0) + math.log(1 + (n - df + 0.5) / (df + 0.5))
            surface.setdefault(token, word)
    return [surface[t] for t in sorted(mass, key=lambda t: (-mass[t], t))[:count]]


def lexical_feedback(top: int, terms: int, add: bool) -> Variant:
    """RM3-like expansion: the first answer's ``top`` rows' most distinctive words appended to
    the question for a second lexical search, replacing the lexical list or fused as a third."""

    def run(ag: Agent, lists: Lists) -> list[str]:
        named = default_named(lists)
        first = gated(fuse_named(named), len(ag.doc_ids))
        extra = feedback_terms(ag, first[:top], lists.text, terms)
        if not extra:
            return first
        second, shares = lexical_list(ag, lists.text + " " + " ".join(extra), 2 * K)
        named["lexical2" if add else "lexical"] = (second, shared_power(shares, second, 2.0))
        return gated(fuse_named(named), len(ag.doc_ids))

    return run


_SPEAKER = re.compile(r"^(?:\[[^\]]*\]\s*)?([A-Z][\w'-]*)(?: [A-Z][\w'-]*)?:\s")


def speaker_boost(share: float) -> Variant:
    """Speaker attribution: a turn whose speaker ("Name: text") the question names has its
    fused value raised by ``share``."""

    def run(ag: Agent, lists: Lists) -> list[str]:
        named = {w.lower() for w in re.findall(r"\b[A-Z][a-z]+\b", lists.text)}
        cands = fuse_named(default_named(lists))
        for c in cands:
            m = _SPEAKER.match(ag.texts[int(c.ref.split(":")[1]) - 1])
            if m and m.group(1).lower() in named:
                c.fused *= 1 + share
        return gated(fusion.ordered(cands), len(ag.doc_ids))

    return run


# -- third pass (2026-12-02): the learned second stage (api/query/recall/rerank.py) ------------


def pool_of(
    ag: Agent, lists: Lists, pool: int, weight: float = 0.25, boost: float = 0.5, read: bool = False
) -> tuple[list[fusion.Candidate], rerank.Signals]:
    """What recall fuses when the second stage is on (``run_recall``): each list cut at ``pool``,
    reordered by neighbours over that cut, fused, speaker-boosted; and the signals it keeps.
    ``read``: the cosines of the candidates and neighbours the vector list did not hold, read
    by id as recall reads them (``rerank.Signals.read``; the exact cosine over the turn)."""
    vec, lex = lists.vector[:pool], lists.lexical[:pool]
    vec_ev = fusion.vector_evidence(vec)
    lex_ev = fusion.lexical_evidence({r: lists.shares.get(r, 0.0) for r, _ in lex})
    refs = {*vec_ev, *lex_ev}

    def near(ref: str) -> tuple[str | None, str | None]:
        p = int(ref.split(":")[1])
        prev, nxt = f"mem:{p - 1}", f"mem:{p + 1}"
        return (prev if p > 1 else None, nxt if p < len(ag.doc_ids) else None)

    adjacency = {r: near(r) for r in refs}
    in_lists = {r: (a if a in refs else None, b if b in refs else None) for r, (a, b) in adjacency.items()}
    v, v_ev = reorder(vec, vec_ev, in_lists, weight)
    lx, lx_ev = reorder(lex, lex_ev, in_lists, weight)
    cands = fusion.rrf(
        {n: r for n, r in (("vector", v), ("lexical", lx)) if r}, evidence={"vector": v_ev, "lexical": lx_ev}
    )
    named = speakers.named_in(lists.text)
    content: dict[str, str | None] = {r: ag.texts[int(r.split(":")[1]) - 1] for r in refs}
    cands = speakers.boost(cands, content.get, named, boost)
    spoke = {r for r, t in content.items() if speakers.speaker_of(t) in named}
    near = {n for pair in adjacency.values() for n in pair if n is not None}
    held = coverage.coverage_of(ag.lexical, ag.name, lists.text, refs | near)
    listed = {r for r, _ in v}
    cos = {r: float(lists.cos[int(r.split(":")[1]) - 1]) for r in refs | near if r not in listed} if read else None
    return cands, rerank.Signals(v, lx, lists.shares, adjacency, spoke, content, lists.text, held, cos)


def expanded(
    ag: Agent, lists: Lists, cands: list[fusion.Candidate], sig: rerank.Signals, top: int | None = None
) -> tuple[list[fusion.Candidate], rerank.Signals]:
    """The candidates plus the turn before and after each of the first ``top`` (all: None) that
    no list holds, appended after them (``--extra expand`` / ``expandK``). A joined row carries
    what recall reads for it by id (``rerank.expand``): its exact cosine (the gate keys on it,
    as on a vector row's) and, through ``Signals.read``, its cosine and lexical share as signals."""
    n = len(ag.doc_ids)
    around = [d for c in cands[:top] for p in [int(c.ref.split(":")[1])] for d in (p - 1, p + 1) if 1 <= d <= n]
    return joined(ag, lists, cands, sig, around)


def spoken(
    ag: Agent, lists: Lists, cands: list[fusion.Candidate], sig: rerank.Signals, top: int
) -> tuple[list[fusion.Candidate], rerank.Signals]:
    """The candidates plus the ``top`` turns of the speakers the question names that are nearest
    the question and not candidates yet (a second vector search over those speakers' turns,
    ``--extra spokenN``): a multi-hop question's evidence turns spread over sessions, each
    said by the person it asks about, below the pool's cut (docs/eval.md, "Eighth pass")."""
    named = speakers.named_in(sig.query)
    if not named or top <= 0:
        return cands, sig
    have = {c.ref for c in cands}
    theirs = [
        int(p) + 1
        for p in np.argsort(-lists.cos, kind="stable")
        if speakers.speaker_of(ag.texts[p]) in named and f"mem:{int(p) + 1}" not in have
    ]
    return joined(ag, lists, cands, sig, theirs[:top])


def joined(
    ag: Agent, lists: Lists, cands: list[fusion.Candidate], sig: rerank.Signals, positions: Sequence[int]
) -> tuple[list[fusion.Candidate], rerank.Signals]:
    """The candidates plus the turns at ``positions`` (1-based) not among them, appended in that
    order, each with what recall reads for it by id (``rerank.expand``)."""
    have = {c.ref for c in cands}
    n = len(ag.doc_ids)
    adjacency = dict(sig.adjacency)
    content = dict(sig.content)
    read = dict(sig.read or {})
    added = []
    for d in positions:
        ref = f"mem:{d}"
        if ref not in have:
            have.add(ref)
            cos = float(lists.cos[d - 1])
            added.append(fusion.Candidate(ref, cosine=cos))
            read[ref] = cos
            adjacency[ref] = (f"mem:{d - 1}" if d > 1 else None, f"mem:{d + 1}" if d < n else None)
            content[ref] = ag.texts[d - 1]
    for ref in {x for r in added for x in adjacency[r.ref] if x is not None} - set(read):
        read[ref] = float(lists.cos[int(ref.split(":")[1]) - 1])
    near = {x for pair in adjacency.values() for x in pair if x is not None}
    cover = coverage.coverage_of(ag.lexical, ag.name, sig.query, {*content, *near})
    named = speakers.named_in(sig.query)
    spoke = set(sig.speakers) | {c.ref for c in added if speakers.speaker_of(content[c.ref]) in named}
    new = rerank.Signals(sig.vector, sig.lexical, sig.shares, adjacency, spoke, content, sig.query, cover, read)
    return cands + added, new


def windowed(
    ag: Agent, lists: Lists, cands: list[fusion.Candidate], sig: rerank.Signals, radius: int
) -> rerank.Signals:
    """``sig`` with each candidate's window signals (``rerank.Signals.around``, window.py): the
    turns ``radius`` places either side in the conversation, their exact cosines."""
    n = len(ag.doc_ids)

    def adjacent(refs: list[str]) -> dict[str, tuple[str | None, str | None]]:
        pos = {r: int(r.split(":")[1]) for r in refs}
        return {r: (f"mem:{p - 1}" if p > 1 else None, f"mem:{p + 1}" if p < n else None) for r, p in pos.items()}

    around = window.around(
        [c.ref for c in cands],
        sig.adjacency,
        adjacent,
        radius,
        lambda _: True,
        {**dict(sig.vector), **(sig.read or {})},
        lambda refs: {r: float(lists.cos[int(r.split(":")[1]) - 1]) for r in refs},
    )
    return dataclasses.replace(sig, around=around)


def second_stage(model: rerank.Model, pool: int = rerank.DEPTH_FACTOR * K) -> Variant:
    """What recall does since the third pass: the candidates of ``pool`` rows of each list
    (since the sixth, with the reads and joins of ``rerank.READ`` / ``rerank.EXPAND``) ordered by
    ``model`` when they are conversation turns, else the first stage (``speaker-0.5``)."""

    def run(ag: Agent, lists: Lists) -> list[str]:
        cands, sig = pool_of(ag, lists, pool, read=rerank.READ)
        if not rerank.conversational(sig.content, sig.content):
            return speaker_boost(0.5)(ag, lists)
        if rerank.READ and rerank.EXPAND != 0:
            cands, sig = expanded(ag, lists, cands, sig, rerank.EXPAND)
        if rerank.READ and rerank.WINDOW:
            sig = windowed(ag, lists, cands, sig, rerank.WINDOW)
        score = dict(zip((c.ref for c in cands), model.scores(rerank.feature_rows(cands, sig)), strict=True))
        return gated(sorted(cands, key=lambda c: -score[c.ref]), len(ag.doc_ids))

    return run


# The grid ``--cv`` chooses from: (lexical evidence power, lexical weight); (2, 1.0) is the default.
CV_GRID = [(p, w) for p in (1.0, 1.5, 2.0) for w in (1.0, 1.25, 1.5, 2.0, 2.5, 3.0)]


VARIANTS: dict[str, Variant] = {
    "dense": dense,
    "lexical": lexical,
    "base": base,
    "deep": deep,
    # the first form tried: every neighbour of a scored row joins the list (spread)
    **{f"spread-f30-{w}": neighbours(w) for w in (0.25, 0.5, 0.75, 1.0)},
    # each list reordered by its smoothed evidence over 20 rows (dropped: moved rows on wn-gcide)
    **{f"within-f20-{w}": neighbours(w, fetch=2 * K, within=True) for w in (0.0, 0.1, 0.25, 0.5)},
    # what recall does (neighbours.reorder): the retriever's order stands without neighbour support
    **{f"product-f{f}-{w}": neighbours(w, fetch=f, product=True) for f in (20, 30) for w in (0.0, 0.1, 0.25, 0.5)},
    # measured, not adopted: the fused value smoothed too
    **{f"fused-0.25-{w}": fused_neighbours(0.25, w) for w in (0.1, 0.25, 0.5)},
    # second pass, all dropped (docs/eval.md, "Second pass")
    **{
        f"vprf-{m}-{b}-{'add' if a else 'replace'}": vector_feedback(m, b, a)
        for m in (3, 5)
        for b in (0.5, 1.0)
        for a in (False, True)
    },
    **{
        f"lprf-{m}-{t}-{'add' if a else 'replace'}": lexical_feedback(m, t, a)
        for m in (2, 3, 5)
        for t in (3, 8)
        for a in (False, True)
    },
    **{f"speaker-{s}": speaker_boost(s) for s in (0.1, 0.25, 0.5)},
    "first-stage": speaker_boost(0.5),  # what recall does with MEMSTREAM_RECALL_RERANK=off
    "default": second_stage(rerank.DEFAULT_MODEL),  # what recall does since the third pass
    **{f"p{p}-lw{w}": weighted(p, w) for p, w in CV_GRID if (p, w) != (2.0, 1.0)},
    **{f"f{f}-keep{k}": weighted(2.0, 1.0, f, k) for f, k in ((20, 20), (30, 20), (40, 30))},
}


def oracle(
    ds: Dataset, agents: dict[str, Agent], qvecs: dict[str, np.ndarray], texts: dict[str, str], qids: list[str]
) -> int:
    """The share of evidence turns in the union of both lists' top rows (and with their
    adjacent turns): what a second stage over that many candidates could reach at best."""
    for depth in (10, 20, 50):
        union, with_nb = [], []
        for q in qids:
            ag = agents[ds.agent_of[q]]
            lists = retrieve(ag, qvecs[q], texts[q], depth)
            pos = {int(r.split(":")[1]) - 1 for r, _ in (*lists.vector, *lists.lexical)}
            near = pos | {p + d for p in pos for d in (-1, 1) if 0 <= p + d < len(ag.doc_ids)}
            rel = set(ds.qrels[q])
            union.append(len(rel & {ag.doc_ids[p] for p in pos}) / len(rel))
            with_nb.append(len(rel & {ag.doc_ids[p] for p in near}) / len(rel))
        both = f"{statistics.fmean(union):.3f}; with neighbours {statistics.fmean(with_nb):.3f}"
        print(f"top {depth} of each list: {both}")
    return 0


Scores = tuple[dict[str, float], dict[str, float], dict[str, float]]  # recall@10, recall@5, NDCG@10


def evaluate(fn: Variant, ds: Dataset, agents: dict[str, Agent], lists: dict[str, Lists]) -> Scores:
    r10, r5, nd = {}, {}, {}
    for q, ls in lists.items():
        ag = agents[ds.agent_of.get(q, AGENT)]
        ranked = [ag.doc_ids[int(r.split(":")[1]) - 1] for r in fn(ag, ls)][:K]
        r10[q] = recall_at_k(ranked, ds.qrels[q])
        r5[q] = recall_at_k(ranked, ds.qrels[q], 5)
        nd[q] = ndcg_at_k(ranked, ds.qrels[q])
    return r10, r5, nd


def paired(a: dict[str, float], b: dict[str, float], qids: Sequence[str]) -> tuple[float, float]:
    """Mean difference a - b over ``qids`` and 1.96 standard errors of it."""
    diffs = [a[q] - b[q] for q in qids]
    return statistics.fmean(diffs), 1.96 * statistics.stdev(diffs) / len(diffs) ** 0.5


def cross_validate(
    ds: Dataset, agents: dict[str, Agent], lists: dict[str, Lists], baseline: Scores
) -> dict[str, object]:
    """Leave one conversation out: for each conversation, the (power, weight) of ``CV_GRID``
    with the best recall@10 + NDCG@10 on the other four, scored on the one left out. The
    held-out figures, pooled over the five, are what a choice made this way would give on a
    conversation it never saw."""
    scored = {pw: evaluate(weighted(*pw), ds, agents, lists) for pw in CV_GRID}
    convs = sorted({ds.agent_of[q] for q in lists})
    held: Scores = ({}, {}, {})
    chosen = {}
    for conv in convs:
        train = [q for q in lists if ds.agent_of[q] != conv]

        def fit(pw: tuple[float, float], train: list[str] = train) -> float:
            return statistics.fmean(scored[pw][0][q] + scored[pw][2][q] for q in train)

        best = max(CV_GRID, key=fit)
        chosen[conv] = best
        for q in lists:
            if ds.agent_of[q] == conv:
                for i in range(3):
                    held[i][q] = scored[best][i][q]
    qids = list(lists)
    out: dict[str, object] = {"chosen": {c: {"power": p, "lexical_weight": w} for c, (p, w) in chosen.items()}}
    for i, metric in enumerate(("recall@10", "recall@5", "ndcg@10")):
        diff, ci = paired(held[i], baseline[i], qids)
        out[metric] = {
            "held_out": statistics.fmean(held[i].values()),
            "default": statistics.fmean(baseline[i].values()),
            "minus_default": diff,
            "ci95": ci,
        }
    out["grid"] = {
        f"p={p} w={w}": {
            "recall@10": statistics.fmean(scored[(p, w)][0].values()),
            "ndcg@10": statistics.fmean(scored[(p, w)][2].values()),
        }
        for p, w in CV_GRID
    }
    return out


def chosen(only: str | None) -> list[str]:
    """The variants ``--only`` names (comma list; shell-style patterns such as ``lprf-*``), in
    ``VARIANTS`` order within each item; every variant without it."""
    if not only:
        return list(VARIANTS)
    out: list[str] = []
    for item in only.split(","):
        hits = [n for n in VARIANTS if fnmatch.fnmatchcase(n, item)]
        if not hits:
            raise SystemExit(f"no variant matches {item!r}")
        out += [n for n in hits if n not in out]
    return out


def check_sets(
    ds: Dataset, agents: dict[str, Agent], lists: dict[str, Lists], args: argparse.Namespace, baseline: Scores
) -> dict[str, object]:
    """Per query set of the dev half: each variant's NDCG@10 and its paired difference from the
    baseline (the rule: a LoCoMo change is kept only if none of these regresses)."""
    wanted = [w for w in chosen(args.only) if w != args.baseline]
    sets = {name: [q for q in qs if q in lists] for name, qs in ds.query_sets.items()}
    print(f"NDCG@10 on the dev half, and minus {args.baseline} (± 1.96·SE)\n")
    print("| variant | " + " | ".join(sets) + " |")
    print("|---" * (1 + len(sets)) + "|")
    base_cells = " | ".join(f"{statistics.fmean(baseline[2][q] for q in qs):.3f}" for qs in sets.values())
    print(f"| {args.baseline} | {base_cells} |")
    out: dict[str, object] = {}
    for name in wanted:
        nd = evaluate(VARIANTS[name], ds, agents, lists)[2]
        cells, per = [], {}
        for set_name, qs in sets.items():
            mean = statistics.fmean(nd[q] for q in qs)
            diff, ci = paired(nd, baseline[2], qs)
            per[set_name] = {"ndcg@10": mean, "minus_baseline": [diff, ci]}
            cells.append(f"{mean:.3f} ({diff:+.3f} ± {ci:.3f})")
        out[name] = per
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=LOCOMO_DEV)
    ap.add_argument("--embedder", default=None)
    ap.add_argument("--only", default=None, help="comma list of variants (patterns allowed)")
    ap.add_argument("--baseline", default="base", help="the variant the paired differences are taken against")
    ap.add_argument("--oracle", action="store_true", help="how much evidence the top rows of either list hold")
    ap.add_argument("--cv", action="store_true", help="lexical power and weight chosen leave-one-conversation-out")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    ap.add_argument(
        "--dev-half",
        action="store_true",
        help="a qrels dataset (wn-gcide, agent-notes): its dev half only, per-set NDCG@10 differences",
    )
    args = ap.parse_args(argv)
    ds = load_dataset(args.data)
    if args.dev_half:
        ds = assign_halves(ds)
    agents = build(ds, args.embedder)
    emb = load_local_embedder(args.embedder)
    qids = [q for qs in ds.query_sets.values() for q in qs if not args.dev_half or ds.half_of[q] == "dev"]
    texts = {q: t for qs in ds.query_sets.values() for q, t in qs.items()}
    qvecs = dict(zip(qids, emb.embed([texts[q] for q in qids]), strict=True))
    depth = max(5 * K, rerank.DEPTH_FACTOR * K)  # as deep as the second stage reads
    lists = {q: retrieve(agents[ds.agent_of.get(q, AGENT)], qvecs[q], texts[q], depth) for q in qids}
    cat_of = {q: name for name, qs in ds.query_sets.items() for q in qs}
    if args.oracle:
        return oracle(ds, agents, qvecs, texts, qids)
    baseline = evaluate(VARIANTS[args.baseline], ds, agents, lists)
    report: dict[str, object] = {
        "data": str(args.data),
        "embedder": args.embedder or "default",
        "baseline": args.baseline,
    }
    if args.dev_half:
        report["dev_half"] = check_sets(ds, agents, lists, args, baseline)
    elif args.cv:
        report["cv"] = cv = cross_validate(ds, agents, lists, baseline)
        print(json.dumps(cv, indent=2))
    else:
        wanted = chosen(args.only)
        print(
            "| variant | R@10 | R@5 | NDCG@10 | "
            + " | ".join(ds.query_sets)
            + f" | R@10 minus {args.baseline} | NDCG@10 minus {args.baseline} |"
        )
        print("|---" * (6 + len(ds.query_sets)) + "|")
        rows: dict[str, object] = {}
        for name in [args.baseline, *(w for w in wanted if w != args.baseline)]:
            r10, r5, nd = baseline if name == args.baseline else evaluate(VARIANTS[name], ds, agents, lists)
            cats = {c: statistics.fmean(r10[q] for q in qids if cat_of[q] == c) for c in ds.query_sets}
            row = [statistics.fmean(r10.values()), statistics.fmean(r5.values()), statistics.fmean(nd.values())]
            dr, dr_ci = paired(r10, baseline[0], qids)
            dn, dn_ci = paired(nd, baseline[2], qids)
            rows[name] = {
                "recall@10": row[0],
                "recall@5": row[1],
                "ndcg@10": row[2],
                "recall@10_by_category": cats,
                "recall@10_minus_baseline": [dr, dr_ci],
                "ndcg@10_minus_baseline": [dn, dn_ci],
            }
            cells = " | ".join(f"{x:.3f}" for x in (*row, *cats.values()))
            print(f"| {name} | {cells} | {dr:+.3f} ± {dr_ci:.3f} | {dn:+.3f} ± {dn_ci:.3f} |", flush=True)
        report["variants"] = rows
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
