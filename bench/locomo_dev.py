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
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from eval_recall import REPO, Dataset, K, load_dataset, ndcg_at_k, recall_at_k

from memstream.api.query.recall import fusion
from memstream.api.query.recall.gate import GateConfig, apply_gate
from memstream.api.query.recall.neighbours import neighbour_scores, reorder
from memstream.api.services.embedding import load_local_embedder
from memstream.projections.lexical import LexicalProjection
from memstream.projections.scope import ScopeFilter

LOCOMO_DEV = REPO.parent / "shared" / "eval" / "locomo-dev"


@dataclass
class Agent:
    """One conversation: its turns in order (doc ids), their vectors, its lexical index."""

    name: str
    doc_ids: list[str]
    vectors: np.ndarray
    lexical: LexicalProjection


def build(ds: Dataset, embedder: str | None) -> dict[str, Agent]:
    emb = load_local_embedder(embedder)
    agents: dict[str, Agent] = {}
    for name in dict.fromkeys(ds.agent_of[d] for d in ds.docs):
        ids = [d for d in ds.docs if ds.agent_of[d] == name]
        vecs = emb.embed([ds.docs[d] for d in ids])
        lex = LexicalProjection()
        for i, d in enumerate(ids):
            scope = {"agent_id": name, "project_id": "", "channel": ""}
            lex.apply(i, {"type": "memory.stored", "scope": scope, "payload": {"id": i + 1, "content": ds.docs[d]}})
        agents[name] = Agent(name, ids, vecs, lex)
    return agents


Ranked = list[tuple[str, float]]


@dataclass
class Lists:
    vector: Ranked  # best first, refs "mem:<1-based position>"
    lexical: Ranked
    shares: dict[str, float]
    cos: np.ndarray  # the query's cosine to every turn of its agent


def retrieve(ag: Agent, qvec: np.ndarray, text: str, depth: int) -> Lists:
    scope = ScopeFilter(ag.name)
    sims = ag.vectors @ qvec
    top = np.argsort(-sims, kind="stable")[:depth]
    vector = [(f"mem:{j + 1}", float(sims[j])) for j in top]
    bm25 = ag.lexical.search_shares(scope, text, depth)
    keyword = ag.lexical.keyword_shares(scope, text, depth)
    seen = {r for r, _, _ in bm25}
    fill = [(r, s) for r, s, _ in keyword if r not in seen][: max(0, depth - len(bm25))]
    shares = {r: sh for r, _, sh in keyword} | {r: sh for r, _, sh in bm25}
    return Lists(vector, [(r, s) for r, s, _ in bm25] + fill, shares, sims)


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


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=LOCOMO_DEV)
    ap.add_argument("--embedder", default=None)
    ap.add_argument("--only", default=None, help="comma list of variants")
    ap.add_argument("--oracle", action="store_true", help="how much evidence the top rows of either list hold")
    args = ap.parse_args(argv)
    ds = load_dataset(args.data)
    agents = build(ds, args.embedder)
    emb = load_local_embedder(args.embedder)
    qids = [q for qs in ds.query_sets.values() for q in qs]
    texts = {q: t for qs in ds.query_sets.values() for q, t in qs.items()}
    qvecs = dict(zip(qids, emb.embed([texts[q] for q in qids]), strict=True))
    lists = {q: retrieve(agents[ds.agent_of[q]], qvecs[q], texts[q], 5 * K) for q in qids}
    cat_of = {q: name for name, qs in ds.query_sets.items() for q in qs}
    if args.oracle:
        return oracle(ds, agents, qvecs, texts, qids)
    wanted = args.only.split(",") if args.only else list(VARIANTS)
    print("| variant | R@10 | R@5 | NDCG@10 | " + " | ".join(ds.query_sets) + " | R@10 minus base (± 1.96·SE) |")
    print("|---" * (5 + len(ds.query_sets)) + "|")
    base_r10: dict[str, float] = {}
    for name in ["base", *(w for w in wanted if w != "base")]:
        fn = VARIANTS[name]
        r10, r5, nd = {}, {}, {}
        for q in qids:
            ag = agents[ds.agent_of[q]]
            ranked = [ag.doc_ids[int(r.split(":")[1]) - 1] for r in fn(ag, lists[q])][:K]
            r10[q] = recall_at_k(ranked, ds.qrels[q])
            r5[q] = recall_at_k(ranked, ds.qrels[q], 5)
            nd[q] = ndcg_at_k(ranked, ds.qrels[q])
        cats = [statistics.fmean(r10[q] for q in qids if cat_of[q] == c) for c in ds.query_sets]
        row = [statistics.fmean(r10.values()), statistics.fmean(r5.values()), statistics.fmean(nd.values()), *cats]
        base_r10 = base_r10 or dict(r10)
        diffs = [r10[q] - base_r10[q] for q in qids]
        paired = f"{statistics.fmean(diffs):+.3f} ± {1.96 * statistics.stdev(diffs) / len(diffs) ** 0.5:.3f}"
        print(f"| {name} | " + " | ".join(f"{x:.3f}" for x in row) + f" | {paired} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
