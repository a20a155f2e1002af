"""Choosing rrf's evidence-weighted order on the dev halves: the grid behind docs/eval.md, "Fusion".

An in-process replica of memstream's recall for one query at a time, so dozens of fusion
variants can be scored on the same retrieved lists in seconds instead of a server run each:

- vector list: exact cosine top-10 with the same embedder (memstream's dense-only recall equals
  exact cosine on these sets, docs/eval.md), every row scored by its cosine;
- lexical vote: memstream's own ``LexicalProjection`` (BM25 top-10, keyword rows after it) and
  each row's share of the query's IDF mass (``search_shares`` / ``keyword_shares``);
- fusion and gate: candidates as ``fusion.rrf`` makes them (the gate sees the same ``rrf`` and
  cosine), ordered by the variant's votes, then memstream's ``apply_gate`` and the limit of 10.

A variant's vote for a row at ``rank`` in a list is ``e / (k + rank)``: ``e`` is the vector row's
cosine (``v=cos``) or 1 (``v=1``), and the lexical row's share to the power ``p``. Classic RRF is
``k=60`` with ``e = 1`` (and the old lexical weight 0.5). ``--check`` prints the replica's dense,
classic and default figures to compare with a server run of ``bench/eval_recall.py``.

    python bench/fusion_dev.py                      # the dev grid on wn-gcide + agent-notes
    python bench/fusion_dev.py --half test --only "k=0 p=2 v=cos"
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from eval_recall import DATA_DIR, Dataset, K, assign_halves, load_dataset, ndcg_at_k

from memstream.api.query.recall import fusion
from memstream.api.query.recall.gate import GateConfig, apply_gate
from memstream.api.services.embedding import load_local_embedder
from memstream.projections.lexical import LexicalProjection
from memstream.projections.scope import ScopeFilter

NOTES_DIR = DATA_DIR.parent / "agent-notes"
SCOPE = ScopeFilter("eval")
GRID_K = (0, 1, 2, 5, 10, 20, 60)
GRID_P = (1, 2, 3)
GRID_V = ("cos", "1")


@dataclass
class Lists:
    vector: list[tuple[str, float]]
    lexical: list[tuple[str, float]]
    shares: dict[str, float]


Fuse = Callable[[Lists], list[fusion.Candidate]]


def retrieve(ds: Dataset, embedder_name: str | None) -> tuple[dict[str, Lists], dict[str, str], int]:
    """Per query: the vector and lexical lists recall would fuse. Returns (lists, ref -> doc id, pool)."""
    emb = load_local_embedder(embedder_name)
    doc_ids = list(ds.docs)
    dvec = emb.embed([ds.docs[d] for d in doc_ids])
    lex = LexicalProjection()
    for i, d in enumerate(doc_ids):
        scope = {"agent_id": "eval", "project_id": "", "channel": ""}
        lex.apply(i, {"type": "memory.stored", "scope": scope, "payload": {"id": i + 1, "content": ds.docs[d]}})
    ref_to_id = {f"mem:{i + 1}": d for i, d in enumerate(doc_ids)}
    out: dict[str, Lists] = {}
    for qs in ds.query_sets.values():
        qvec = emb.embed(list(qs.values()))
        sims = qvec @ dvec.T
        for row, (qid, text) in enumerate(qs.items()):
            top = np.argsort(-sims[row], kind="stable")[:K]
            vector = [(f"mem:{j + 1}", float(sims[row, j])) for j in top]
            bm25 = lex.search_shares(SCOPE, text, K)
            keyword = lex.keyword_shares(SCOPE, text, K)
            seen = {r for r, _, _ in bm25}
            fill = [(r, s) for r, s, _ in keyword if r not in seen][: max(0, K - len(bm25))]
            shares = {r: sh for r, _, sh in keyword} | {r: sh for r, _, sh in bm25}
            out[qid] = Lists(vector, [(r, s) for r, s, _ in bm25] + fill, shares)
    return out, ref_to_id, len(doc_ids)


def variant(k: int, p: int, v: str) -> Fuse:
    def fuse(lists: Lists) -> list[fusion.Candidate]:
        active = {n: ranked for n, ranked in (("vector", lists.vector), ("lexical", lists.lexical)) if ranked}
        cands = fusion.rrf(active)  # the gate's view: rrf, cosine, lists
        if len(active) > 1:
            votes: dict[str, float] = {}
            for rank, (ref, cos) in enumerate(lists.vector, 1):
                e = min(1.0, max(0.0, cos)) if v == "cos" else 1.0
                votes[ref] = votes.get(ref, 0.0) + e / (k + rank)
            for rank, (ref, _) in enumerate(lists.lexical, 1):
                votes[ref] = votes.get(ref, 0.0) + lists.shares.get(ref, 0.0) ** p / (k + rank)
            for c in cands:
                c.fused = votes[c.ref]
        return fusion.ordered(cands)

    return fuse


def classic(weight: float) -> Fuse:
    def fuse(lists: Lists) -> list[fusion.Candidate]:
        active = {n: ranked for n, ranked in (("vector", lists.vector), ("lexical", lists.lexical)) if ranked}
        return fusion.rrf(active, weights={"lexical": weight})

    return fuse


def default(lists: Lists) -> list[fusion.Candidate]:
    """What ``run_recall`` does by default, through the production helpers."""
    active = {n: ranked for n, ranked in (("vector", lists.vector), ("lexical", lists.lexical)) if ranked}
    evidence = {
        "vector": fusion.vector_evidence(lists.vector),
        "lexical": fusion.lexical_evidence({r: lists.shares.get(r, 0.0) for r, _ in lists.lexical}),
    }
    return fusion.rrf(active, evidence=evidence)


def score(fuse: Fuse, all_lists: dict[str, Lists], ds: Dataset, ref_to_id: dict[str, str], pool: int) -> dict:
    out = {}
    for qid, lists in all_lists.items():
        passed, _ = apply_gate(fuse(lists), pool, GateConfig())
        out[qid] = ndcg_at_k([ref_to_id[c.ref] for c in passed[:K]], ds.qrels.get(qid, {}))
    return out


def paired(a: dict[str, float], b: dict[str, float], qids: Sequence[str]) -> tuple[float, float, float]:
    """(mean of a, mean of a - b, standard error of the difference) over ``qids``."""
    diffs = [a[q] - b[q] for q in qids]
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0
    return statistics.fmean(a[q] for q in qids), statistics.fmean(diffs), se


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, action="append", help="dataset dir (default: wn-gcide and agent-notes)")
    ap.add_argument("--half", choices=("dev", "test", "all"), default="dev")
    ap.add_argument("--embedder", default=None, help="local embedder name (default: memstream's default)")
    ap.add_argument("--only", action="append", default=[], help='variant label(s) to show, e.g. "k=0 p=2 v=cos"')
    args = ap.parse_args(argv)
    roots = args.data or [DATA_DIR, NOTES_DIR]

    variants: dict[str, Fuse] = {"dense": variant(0, 1, "cos"), "rrf classic (k=60, lexical 0.5)": classic(0.5)}
    variants["rrf classic, weight 1"] = classic(1.0)
    variants["default (fusion.rrf evidence)"] = default
    for k in GRID_K:
        for p in GRID_P:
            for v in GRID_V:
                variants[f"k={k} p={p} v={v}"] = variant(k, p, v)
    if args.only:
        keep = {"dense", *args.only}
        variants = {n: f for n, f in variants.items() if n in keep}

    table: dict[str, dict[str, tuple[float, float, float]]] = {}
    set_names: list[str] = []
    for root in roots:
        ds = assign_halves(load_dataset(root))
        lists, ref_to_id, pool = retrieve(ds, args.embedder)
        dense_lists = {q: Lists(x.vector, [], {}) for q, x in lists.items()}
        dense = score(variant(0, 1, "cos"), dense_lists, ds, ref_to_id, pool)
        for name, qs in ds.query_sets.items():
            set_names.append(name)
            qids = [q for q in qs if args.half == "all" or ds.half_of[q] == args.half]
            for label, fuse in variants.items():
                got = dense if label == "dense" else score(fuse, {q: lists[q] for q in qids}, ds, ref_to_id, pool)
                table.setdefault(label, {})[name] = paired(got, dense, qids)

    print(f"NDCG@{K} ({args.half} half), and its paired difference from dense (± 1.96·SE):\n")
    print("| variant | " + " | ".join(set_names) + " |")
    print("|---|" + "---|" * len(set_names))
    for label, cells in table.items():
        row = [f"{m:.3f} ({d:+.3f} ± {1.96 * se:.3f})" for m, d, se in (cells[n] for n in set_names)]
        print(f"| {label} | " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
