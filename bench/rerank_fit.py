"""Fitting recall's second stage (api/query/recall/rerank.py) on the LoCoMo development split.

The candidates are what recall fuses with the second stage on (``locomo_dev.pool_of``: each list
cut at ``--pool`` rows, reordered by adjacent-turn evidence, fused by evidence-weighted rrf,
speaker boost applied; the replica gives the server's figures). Each candidate gets
``rerank.FEATURES`` and a label (is it an evidence turn). A logistic model is fitted with
numpy only (Newton's method, L2), pointwise or on pairs (an evidence turn against a non-evidence
turn of the same question, RankNet's loss with a linear scorer).

``--cv`` fits leave-one-conversation-out and scores each conversation with the model fitted on
the other four: those held-out figures are what the choice would give on an unseen conversation.
Without it, the model is fitted on all five conversations and printed as the constants to ship.
``--check DATA`` scores the shipped model on a qrels dataset's dev half (wn-gcide, agent-notes)
against the default: the rule that a LoCoMo change must not regress the dictionary sets. Where
the stage does not run (rows that are not turns) it keeps the fused order of the ``--pool``-deep
lists, while the server falls back to the first stage at its own depths: for those sets the
server check (``bench/eval_recall.py ... --memstream-modes rrf,rrf-first``) is the one to trust.

    python bench/rerank_fit.py --cv                      # held-out figures per fold
    python bench/rerank_fit.py                           # fit on all five, print the constants
    python bench/rerank_fit.py --check bench/eval_data/wn-gcide
    python bench/rerank_fit.py --ceiling --pool 10,20,30,60   # evidence among the candidates
    python bench/rerank_fit.py --cv --pool 60 --where          # where the evidence turns end up, held out
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import locomo_dev
import numpy as np
from eval_recall import AGENT, Dataset, K, assign_halves, load_dataset, ndcg_at_k, recall_at_k
from locomo_dev import (
    LOCOMO_DEV,
    VARIANTS,
    Agent,
    Lists,
    build,
    evaluate,
    expanded,
    gated,
    paired,
    pool_of,
    retrieve,
    windowed,
)

from memstream.api.query.recall import dates, forest, fusion, rerank, speakers
from memstream.api.services.embedding import load_local_embedder

# Signals tried in the fourth pass and not kept (docs/eval.md, "Fourth pass"), computed from what
# a real agent's memory carries (the question and the stored text), never from the benchmark's
# labels. ``--extra`` appends them to ``rerank.FEATURES`` for the fit. The date signals that were
# kept live in api/query/recall/dates.py.
EXTRA = ("entity", "session_share", "cluster", "guess_speaker")
# A question that asks for a guess ("Would Melanie likely enjoy ...", "What might John's ... be")
# is answered by what the named person said of themself, in words unlike the question's
# (docs/eval.md, "Sixth pass": the open-domain misses).
_GUESS = re.compile(r"\b(would|might|likely|could|may)\b", re.IGNORECASE)
_CAP = re.compile(r"(?<![.?!]\s)(?<!^)\b([A-Z][\w'+-]*)")  # a capitalised word not opening a sentence
_PREFIX = re.compile(r"^\[([^\]]*)\]\s*")


def cue_rows(query: str, cands: Sequence[fusion.Candidate], content: dict[str, str | None]) -> dict[str, list[float]]:
    """``entity``: the share of the question's proper nouns (not the speakers' names, which the
    speaker signal reads, nor months) the turn's words hold; ``session_share``: the share of the
    candidates from the turn's session (the same date prefix); ``guess_speaker``: 1 when the
    question asks for a guess (``_GUESS``) and the turn's speaker is named in it."""
    said = {speakers.speaker_of(t) for t in content.values() if t}
    ents = {w.lower() for w in _CAP.findall(query)} - {m.lower() for m in dates.MONTHS} - said
    sessions: dict[str, int] = {}
    for c in cands:
        if m := _PREFIX.match(content.get(c.ref) or ""):
            sessions[m.group(1)] = sessions.get(m.group(1), 0) + 1
    guess = bool(_GUESS.search(query))
    named = speakers.named_in(query)
    out: dict[str, list[float]] = {"entity": [], "session_share": [], "guess_speaker": []}
    for c in cands:
        text = content.get(c.ref) or ""
        pm = _PREFIX.match(text)
        words = {w.lower() for w in re.findall(r"[\w'+-]+", _PREFIX.sub("", text))}
        out["entity"].append(len(ents & words) / len(ents) if ents else 0.0)
        out["session_share"].append(sessions.get(pm.group(1), 0) / len(cands) if pm else 0.0)
        out["guess_speaker"].append(1.0 if guess and text and speakers.speaker_of(text) in named else 0.0)
    return out


def cluster(ag: Agent, cands: Sequence[fusion.Candidate], top: int = 10) -> list[float]:
    """Each candidate's mean cosine to the first stage's top rows other than itself: a multi-hop
    question's evidence turns may cluster less than one topic's turns do."""
    idx = [int(c.ref.split(":")[1]) - 1 for c in cands]
    v = ag.vectors[idx]
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-9)
    sims = v @ v[:top].T
    n = min(top, len(cands))
    out = []
    for i in range(len(cands)):
        row = [sims[i, j] for j in range(n) if j != i]
        out.append(float(np.mean(row)) if row else 0.0)
    return out


@dataclass
class Query:
    qid: str
    conv: str
    cands: list[fusion.Candidate]  # the first stage's candidates, best first
    x: np.ndarray  # their features
    y: np.ndarray  # 1 for an evidence turn
    agent: Agent
    applies: bool = True  # the second stage runs on these candidates (``rerank.conversational``)


def queries(
    ds: Dataset,
    agents: dict[str, Agent],
    lists: dict[str, Lists],
    pool: int,
    extra: Sequence[str] = (),
    expand: int | None = None,
    drop: Sequence[str] = (),
    read: bool = False,
    radius: int = 0,
    spoken: int = 0,
) -> list[Query]:
    """Each question's candidates, their features (``rerank.FEATURES``, then ``extra``; the
    columns of ``drop`` zeroed, so a fit gives them weight 0) and labels. ``read``: cosines read
    by id for rows the vector list did not hold (``rerank.Signals.read``); ``expand``: the
    neighbours of that many first candidates join them (0: none; -1: every candidate's);
    ``radius``: the window signals over that many turns either side (0: none, the columns 0);
    ``spoken``: that many turns of the speakers the question names join (``locomo_dev.spoken``)."""
    out = []
    for q, ls in lists.items():
        ag = agents[ds.agent_of.get(q, AGENT)]
        cands, sig = pool_of(ag, ls, pool, read=read or bool(expand) or bool(spoken))
        if expand:
            cands, sig = expanded(ag, ls, cands, sig, None if expand < 0 else expand)
        if spoken:
            cands, sig = locomo_dev.spoken(ag, ls, cands, sig, spoken)
        if radius:
            sig = windowed(ag, ls, cands, sig, radius)
        applies = rerank.conversational(sig.content, sig.content)
        rel = set(ds.qrels[q])
        y = np.array([ag.doc_ids[int(c.ref.split(":")[1]) - 1] in rel for c in cands], dtype=np.float64)
        x = np.array(rerank.feature_rows(cands, sig), dtype=np.float64).reshape(len(cands), len(rerank.FEATURES))
        for name in drop:
            x[:, rerank.FEATURES.index(name)] = 0.0
        if extra:
            cue = cue_rows(ls.text, cands, dict(sig.content))
            cue["cluster"] = cluster(ag, cands)
            x = np.hstack([x, np.array([cue[e] for e in extra], dtype=np.float64).T.reshape(len(cands), len(extra))])
        out.append(Query(q, ds.agent_of.get(q, AGENT), cands, x, y, ag, applies))
    return out


def logistic(x: np.ndarray, y: np.ndarray, l2: float, bias: bool) -> np.ndarray:
    """Weights minimising the mean log loss + l2·|w|² (Newton's method; no penalty on the bias)."""
    if bias:
        x = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(x.shape[1])
    pen = np.full(x.shape[1], l2)
    if bias:
        pen[-1] = 0.0
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -60, 60)))
        grad = x.T @ (p - y) / len(x) + 2 * pen * w
        hess = (x * (p * (1 - p))[:, None]).T @ x / len(x) + np.diag(2 * pen + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w[:-1] if bias else w


def fit(train: Sequence[Query], kind: str, l2: float) -> rerank.Model:
    train = [q for q in train if q.applies]
    x = np.vstack([q.x for q in train])
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    if kind == "pointwise":
        w = logistic((x - mean) / scale, np.concatenate([q.y for q in train]), l2, bias=True)
    else:  # pairs: every evidence turn against every other candidate of its question
        diffs = []
        for q in train:
            z = (q.x - mean) / scale
            pos, neg = z[q.y == 1], z[q.y == 0]
            if len(pos) and len(neg):
                diffs.append((pos[:, None, :] - neg[None, :, :]).reshape(-1, x.shape[1]))
        d = np.vstack(diffs)
        # each pair both ways round, so a model without bias sees both labels
        w = logistic(np.vstack([d, -d]), np.concatenate([np.ones(len(d)), np.zeros(len(d))]), l2, bias=False)
    return rerank.Model(tuple(float(v) for v in w / scale))  # the bias and the centring do not move the order


def fit_trees(train: Sequence[Query], linear: rerank.Model, trees: Trees) -> rerank.Model:
    """``linear`` plus LambdaMART trees fitted with its score as the start (LightGBM, bench
    only: recall evaluates the trees in numpy, ``forest.Forest``). The trees learn what the
    linear score misses: signals that matter together (docs/eval.md, "Seventh pass")."""
    import lightgbm as lgb  # bench-only dependency (bench/requirements-fit.txt)

    train = [q for q in train if q.applies]
    w = np.asarray(linear.weights)
    x = np.vstack([q.x for q in train])
    params = {
        "objective": "lambdarank",
        "num_leaves": trees.leaves,
        "learning_rate": trees.rate,
        "min_data_in_leaf": 20,
        "lambdarank_truncation_level": 20,
        "num_threads": 1,
        "seed": 1,
        "deterministic": True,
        "verbosity": -1,
    }
    data = lgb.Dataset(x, np.concatenate([q.y for q in train]), group=[len(q.y) for q in train], init_score=x @ w)
    booster = lgb.train(params, data, trees.rounds)
    return rerank.Model(linear.weights, forest.Forest(forest.from_lightgbm(booster.dump_model())))


@dataclass(frozen=True)
class Trees:
    leaves: int
    rate: float
    rounds: int

    @staticmethod
    def parse(spec: str) -> Trees | None:
        """``"7,0.05,50"``: leaves, learning rate, rounds ('' or '0': no trees)."""
        if spec in ("", "0"):
            return None
        leaves, rate, rounds = spec.split(",")
        return Trees(int(leaves), float(rate), int(rounds))

    def label(self) -> str:
        return f"+trees{self.leaves},{self.rate},{self.rounds}"


Linear = dict[tuple[str, float, str | None], rerank.Model]


def fitted(
    linear: Linear, train: Sequence[Query], kind: str, l2: float, trees: Trees | None, fold: str | None
) -> rerank.Model:
    """The linear fit (cached per fold in ``linear``), with ``trees`` on top when given."""
    key = (kind, l2, fold)
    if key not in linear:
        linear[key] = fit(train, kind, l2)
    return linear[key] if trees is None else fit_trees(train, linear[key], trees)


def write_forest(model: rerank.Model, path: Path, command: str) -> None:
    """The fitted trees as a Python module recall imports (``rerank.DEFAULT_MODEL``)."""
    assert model.forest is not None
    lines = [
        '"""The second stage\'s trees, written by bench/rerank_fit.py: do not edit by hand.',
        "",
        f"    {command}",
        '"""',
        "",
        "from memstream.api.query.recall.forest import Node",
        "",
        "TREES: tuple[tuple[Node, ...], ...] = (",
    ]
    for tree in model.forest.trees:
        lines.append("    (")
        lines += [f"        ({f}, {t!r}, {lo}, {hi}, {v!r})," for f, t, lo, hi, v in tree]
        lines.append("    ),")
    lines.append(")")
    path.write_text("\n".join(lines) + "\n")


Scores = tuple[dict[str, float], dict[str, float], dict[str, float]]


def score(qs: Sequence[Query], ds: Dataset, model: rerank.Model | None) -> Scores:
    """recall@10, recall@5, NDCG@10 per question, ordered by ``model`` (None: the first stage's
    order), gated as recall gates."""
    r10, r5, nd = {}, {}, {}
    for q in qs:
        order = list(range(len(q.cands)))
        if model is not None and q.applies:
            s = model.scores(q.x)
            order.sort(key=lambda i: -s[i])  # stable: ties keep the first stage's order
        kept = gated([q.cands[i] for i in order], len(q.agent.doc_ids))
        ranked = [q.agent.doc_ids[int(r.split(":")[1]) - 1] for r in kept][:K]
        r10[q.qid] = recall_at_k(ranked, ds.qrels[q.qid])
        r5[q.qid] = recall_at_k(ranked, ds.qrels[q.qid], 5)
        nd[q.qid] = ndcg_at_k(ranked, ds.qrels[q.qid])
    return r10, r5, nd


def where(qs: Sequence[Query], ds: Dataset, model: rerank.Model) -> dict[str, dict[str, int]]:
    """Each category's evidence turns by where ``model`` leaves them, per conversation: ``top``
    (among the K rows recall returns), ``pool`` (a candidate ranked below them or gated out) or
    ``outside`` (no candidate: only a deeper or another search could reach it)."""
    cat_of = {q: name for name, set_q in ds.query_sets.items() for q in set_q}
    out: dict[str, dict[str, int]] = {}
    for q in qs:
        order = list(range(len(q.cands)))
        if q.applies:
            s = model.scores(q.x)
            order.sort(key=lambda i: -s[i])
        top = set(gated([q.cands[i] for i in order], len(q.agent.doc_ids))[:K])
        pool = {c.ref for c in q.cands}
        for p, doc in enumerate(q.agent.doc_ids):
            if ds.qrels[q.qid].get(doc, 0) > 0:
                ref = f"mem:{p + 1}"
                spot = "top" if ref in top else "pool" if ref in pool else "outside"
                row = out.setdefault(f"{cat_of[q.qid]}/{q.conv}", {"top": 0, "pool": 0, "outside": 0})
                row[spot] += 1
    return out


def print_where(spots: dict[str, dict[str, int]]) -> None:
    """``where``'s counts as shares per category, all conversations together."""
    cats: dict[str, dict[str, int]] = {}
    for key, row in spots.items():
        tot = cats.setdefault(key.split("/")[0], {"top": 0, "pool": 0, "outside": 0})
        for spot, n in row.items():
            tot[spot] += n
    for cat, tot in cats.items():
        n = sum(tot.values()) or 1
        print(f"  evidence turns, {cat} ({n}): " + ", ".join(f"{k} {v / n:.2f}" for k, v in tot.items()))


def prepare(
    data: Path, embedder: str | None, dev_half: bool, depth: int = max(5 * K, rerank.DEPTH_FACTOR * K)
) -> tuple[Dataset, dict[str, Agent], dict[str, Lists]]:
    """The dataset, its agents, and each question's two lists ``depth`` rows deep."""
    ds = load_dataset(data)
    if dev_half:
        ds = assign_halves(ds)
    agents = build(ds, embedder)
    emb = load_local_embedder(embedder)
    qids = [q for qs in ds.query_sets.values() for q in qs if not dev_half or ds.half_of[q] == "dev"]
    texts = {q: t for qs in ds.query_sets.values() for q, t in qs.items()}
    qvecs = dict(zip(qids, emb.embed([texts[q] for q in qids]), strict=True))
    return ds, agents, {q: retrieve(agents[ds.agent_of.get(q, AGENT)], qvecs[q], texts[q], depth) for q in qids}


def ceiling(ds: Dataset, agents: dict[str, Agent], lists: dict[str, Lists], pools: Sequence[int]) -> dict[str, object]:
    """The share of each question's evidence turns among the second stage's candidates at each
    pool depth (and with every candidate's previous and next turn), per category: the most any
    reordering of them can reach."""
    cat_of = {q: name for name, qs in ds.query_sets.items() for q in qs}
    out: dict[str, object] = {}
    for pool in pools:
        own: dict[str, float] = {}
        near: dict[str, float] = {}
        size = []
        for q, ls in lists.items():
            ag = agents[ds.agent_of.get(q, AGENT)]
            cands, _ = pool_of(ag, ls, pool)
            at = {int(c.ref.split(":")[1]) - 1 for c in cands}
            around = at | {p + d for p in at for d in (-1, 1) if 0 <= p + d < len(ag.doc_ids)}
            rel = set(ds.qrels[q])
            own[q] = len(rel & {ag.doc_ids[p] for p in at}) / len(rel)
            near[q] = len(rel & {ag.doc_ids[p] for p in around}) / len(rel)
            size.append(len(cands))
        row: dict[str, object] = {"candidates": statistics.fmean(size)}
        for label, got in (("pool", own), ("with_neighbours", near)):
            row[label] = {"all": statistics.fmean(got.values())} | {
                c: statistics.fmean(got[q] for q in got if cat_of[q] == c) for c in ds.query_sets
            }
        out[f"pool{pool}"] = row
        print(f"pool {pool}:", json.dumps(row), flush=True)
    return out


def summary(s: Scores, base: Scores, qids: Sequence[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for i, metric in enumerate(("recall@10", "recall@5", "ndcg@10")):
        d, ci = paired(s[i], base[i], qids)
        out[metric] = {"value": statistics.fmean(s[i][q] for q in qids), "minus_default": [d, ci]}
    return out


def cue_gain(
    held: Scores, plain: Scores, qids: Sequence[str], dated: Sequence[str], ds: Dataset, convs: Sequence[str]
) -> dict[str, object]:
    """What the cue signals add to the held-out figures: paired over all questions (± 1.96·SE),
    per conversation, and over the questions that name a date."""
    out: dict[str, object] = {}
    for i, metric in ((0, "recall@10"), (2, "ndcg@10")):
        d, ci = paired(held[i], plain[i], qids)
        folds = [
            round(statistics.fmean(held[i][q] - plain[i][q] for q in qids if ds.agent_of[q] == c), 4) for c in convs
        ]
        dd, dci = paired(held[i], plain[i], dated)
        out[metric] = {"all": [round(d, 4), round(ci, 4)], "folds": folds, "dated": [round(dd, 4), round(dci, 4)]}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=LOCOMO_DEV)
    ap.add_argument("--embedder", default=None)
    ap.add_argument("--pool", default="20,30,50", help="rows of each list the second stage sees (comma list)")
    ap.add_argument("--kind", default="pointwise,pairwise")
    ap.add_argument("--l2", default="0.001,0.01,0.1")
    ap.add_argument("--cv", action="store_true")
    ap.add_argument("--check", type=Path, default=None, help="a qrels dataset: the shipped model on its dev half")
    ap.add_argument(
        "--extra",
        default="",
        help="signal sets to add to the features, ';' between sets, ',' inside one ('' = none), of: "
        + ", ".join(EXTRA)
        + "; 'read': cosines read by id for rows the vector list did not hold (rerank.Signals.read);"
        + " 'expand' / 'expandK': the neighbours of every candidate / of the first K join the pool (with reads);"
        + " 'windowR': the window signals over R turns either side (rerank.WINDOW);"
        + " 'spokenN': N turns of the speakers the question names join the pool (a second vector search);"
        + " '-NAME': a signal of rerank.FEATURES left out (weight 0)",
    )
    ap.add_argument(
        "--where",
        action="store_true",
        help="with --cv: where each category's evidence turns end up held out (top K, lower in the pool, outside it)",
    )
    ap.add_argument("--ceiling", action="store_true", help="evidence among the candidates at each --pool depth")
    ap.add_argument("--against", default="", help="with --cv: a label whose held-out scores the others are paired with")
    ap.add_argument(
        "--trees",
        default="",
        help="';' between settings: 'leaves,rate,rounds' of LambdaMART trees fitted on top of the linear"
        " model ('' = none), e.g. ';7,0.05,50'",
    )
    ap.add_argument("--write-forest", type=Path, default=None, help="without --cv: write the fitted trees here")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    report: dict[str, object] = {}
    if args.check:
        ds, agents, lists = prepare(args.check, args.embedder, dev_half=True)
        pool = int(args.pool.split(",")[0])
        grow = -1 if rerank.EXPAND is None else rerank.EXPAND  # the shipped reads and joins
        qs = queries(
            ds,
            agents,
            lists,
            pool,
            expand=grow if rerank.READ else 0,
            read=rerank.READ,
            radius=rerank.WINDOW if rerank.READ else 0,
        )
        base = evaluate(VARIANTS["first-stage"], ds, agents, lists)
        mine = score(qs, ds, rerank.DEFAULT_MODEL)
        for name, set_q in ds.query_sets.items():
            ids = [q for q in set_q if q in lists]
            report[name] = summary(mine, base, ids)
            nd = report[name]["ndcg@10"]  # type: ignore[index]
            d, ci = nd["minus_default"]
            print(f"{name}: NDCG@10 {nd['value']:.3f} minus default {d:+.3f} ± {ci:.3f}")
    elif args.ceiling:
        pools = [int(p) for p in args.pool.split(",")]
        ds, agents, lists = prepare(args.data, args.embedder, dev_half=False, depth=max(5 * K, *pools))
        report = ceiling(ds, agents, lists, pools)
    else:
        deepest = max(map(int, args.pool.split(",")))
        ds, agents, lists = prepare(args.data, args.embedder, dev_half=False, depth=max(5 * K, deepest))
        base = evaluate(VARIANTS["first-stage"], ds, agents, lists)
        qids = list(lists)
        convs = sorted({ds.agent_of[q] for q in qids})
        dated = [q for q in qids if dates.date_in(lists[q].text).named]
        plain: dict[str, Scores] = {}  # held-out scores without cue signals, by setting
        every: dict[str, Scores] = {}  # held-out scores by label, for ``--against``
        spots: dict[str, dict[str, dict[str, int]]] = {}  # evidence turns by place (``--where``)
        for pool, extra in ((p, e) for p in map(int, args.pool.split(",")) for e in args.extra.split(";")):
            cue_set = [e for e in extra.split(",") if e]
            grow = [e for e in cue_set if e.startswith("expand")]
            expand = (int(grow[0][6:]) if grow[0][6:] else -1) if grow else 0
            drop = [e[1:] for e in cue_set if e.startswith("-")]
            wide = [e for e in cue_set if e.startswith("window")]
            radius = int(wide[0][6:]) if wide else 0
            said = [e for e in cue_set if e.startswith("spoken")]
            spoken = int(said[0][6:]) if said else 0
            cues = [e for e in cue_set if e not in grow + wide + said and e != "read" and not e.startswith("-")]
            qs = queries(ds, agents, lists, pool, cues, expand, drop, "read" in cue_set, radius, spoken)
            first = summary(score(qs, ds, None), base, qids)
            report[f"pool{pool}-first-stage"] = first
            r, n = first["recall@10"], first["ndcg@10"]  # type: ignore[index]
            print(f"pool{pool}-first-stage: R@10 {r['value']:.3f}  NDCG@10 {n['value']:.3f}", flush=True)
            settings = [
                (kind, l2, trees)
                for kind in args.kind.split(",")
                for l2 in map(float, args.l2.split(","))
                for trees in map(Trees.parse, args.trees.split(";"))
            ]
            linear: Linear = {}  # the linear fits, shared by the trees settings
            for kind, l2, trees in settings:
                label = (
                    f"pool{pool}-{kind}-l2{l2}"
                    + (f"+{'+'.join(cue_set)}" if cue_set else "")
                    + (trees.label() if trees else "")
                )
                if args.cv:
                    held: Scores = ({}, {}, {})
                    folds = []
                    for conv in convs:
                        model = fitted(linear, [q for q in qs if q.conv != conv], kind, l2, trees, conv)
                        test = [q for q in qs if q.conv == conv]
                        s = score(test, ds, model)
                        for i in range(3):
                            held[i].update(s[i])
                        if args.where:
                            for key, counts in where(test, ds, model).items():
                                spots.setdefault(label, {})[key] = counts
                        ids = [q.qid for q in test]
                        folds.append([statistics.fmean(s[i][q] - base[i][q] for q in ids) for i in (0, 2)])
                    row = summary(held, base, qids)
                    if label in spots:
                        row["evidence_where"] = spots[label]
                        print_where(spots[label])
                    row["recall@10_by_category"] = {
                        c: statistics.fmean(held[0][q] for q in set_q if q in held[0])
                        for c, set_q in ds.query_sets.items()
                    }
                    print("  held-out recall@10 by category:", row["recall@10_by_category"])
                    row["fold_minus_default"] = {
                        "recall@10": [f[0] for f in folds],
                        "ndcg@10": [f[1] for f in folds],
                    }
                    setting = f"pool{pool}-{kind}-l2{l2}"
                    if not cue_set:
                        plain[setting] = held
                    elif setting in plain:
                        row["minus_no_cues"] = cue_gain(held, plain[setting], qids, dated, ds, convs)
                        print("  minus the same fit without cues:", row["minus_no_cues"], flush=True)
                else:
                    model = fitted(linear, qs, kind, l2, trees, None)
                    row = summary(score(qs, ds, model), base, qids)
                    row["model"] = {"weights": model.weights, "trees": len(model.forest or ())}
                    if args.write_forest and model.forest is not None:
                        write_forest(model, args.write_forest, "python bench/rerank_fit.py " + " ".join(argv or []))
                report[label] = row
                if args.cv:
                    every[label] = held
                r, n = row["recall@10"], row["ndcg@10"]  # type: ignore[index]
                spread = ""
                if args.cv:
                    fr = row["fold_minus_default"]  # type: ignore[index]
                    fold_r, fold_n = fr["recall@10"], fr["ndcg@10"]
                    spread = (
                        f"  folds R@10 {statistics.fmean(fold_r):+.3f}±{statistics.stdev(fold_r):.3f}"
                        f" NDCG {statistics.fmean(fold_n):+.3f}±{statistics.stdev(fold_n):.3f}"
                    )
                (dr, cr), (dn, cn) = r["minus_default"], n["minus_default"]
                print(
                    f"{label}: R@10 {r['value']:.3f} ({dr:+.3f} ± {cr:.3f})"
                    f"  NDCG@10 {n['value']:.3f} ({dn:+.3f} ± {cn:.3f}){spread}",
                    flush=True,
                )
        if args.against and args.against in every:
            ref = every[args.against]
            print(f"held out, paired minus {args.against} (± 1.96·SE):")
            for label, held in every.items():
                pair = {m: paired(held[i], ref[i], qids) for i, m in ((0, "recall@10"), (2, "ndcg@10"))}
                report[label]["minus_" + args.against] = {m: [round(d, 4), round(c, 4)] for m, (d, c) in pair.items()}  # type: ignore[index]
                (dr, cr), (dn, cn) = pair["recall@10"], pair["ndcg@10"]
                print(f"  {label}: R@10 {dr:+.3f} ± {cr:.3f}  NDCG@10 {dn:+.3f} ± {cn:.3f}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
