"""LoCoMo development split (issue 15, tenth pass): a static embedder's vectors as more signals for the second stage.

WordLlama (``wordllama`` 0.4.0.post1, its 256-d weights in the wheel) embeds a text in ~30 µs,
against ~4 ms for the default MiniLM, so a second vector per turn from it would cost a store
about 1 % more embedding, where the ninth pass's second MiniLM vector cost 80 %. Three steps,
the middle one in a venv holding wordllama (its 0.4.0.post1 wheel looks for its tokenizer in
``wordllama/tokenizer/`` but ships it in ``tokenizers/``: link one to the other):

    python bench/locomo_static_vectors.py build --work /tmp/static       # the seventh pass's candidates
    WL/bin/python bench/locomo_static_vectors.py embed --work /tmp/static  # WordLlama vectors
    python bench/locomo_static_vectors.py score --work /tmp/static --out bench/results/locomo_static_tenth.json

``score`` adds each signal set to the default second stage's 21 signals, refits it per fold
(pairwise, L2 0.001, leave one conversation out, as ``rerank_fit.py --cv``) and pairs the
held-out figures with the default's: the stored turn's vector (``turn``), the turn without its
``[date] Name:`` prefix (``body``), both, and a static MaxSim (each question word's best cosine
to a word of the turn, words as the mean of their token vectors).
"""

from __future__ import annotations

import argparse
import json
import pickle
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

RADIUS = 2  # the window the signals are read over, as the default's (rerank.WINDOW)
_STOP_WORDS = (
    "what when where which who whom whose why how does did do is are was were the a an and or of to in on "
    "for with at by from about into that this these those have has had be been being would could should "
    "will can may might their there they them his her him she he its it you your yours our we us i me my "
    "mine as if so than then also just very really much many more most some any all other such own same "
    "only not no nor too yes yeah wow great thanks thank like know think going get got make made"
)
STOP = frozenset(re.findall(r"\w+", _STOP_WORDS))


def body_of(text: str) -> str:
    """A stored turn without its ``[date] Name:`` prefix."""
    return text.split(": ", 1)[1] if text.startswith("[") and ": " in text else text


def speaker_names(turns: dict[str, list[str]]) -> set[str]:
    """The speakers' names (lowercased) of the stored turns, each ``[date] Name: ...``."""
    return {
        m.group(1).strip().lower()
        for texts in turns.values()
        for t in texts
        if (m := re.match(r"\[[^\]]*\]\s*([^:]+):", t))
    }


def build(work: Path) -> None:
    import rerank_fit as rf

    ds, agents, lists = rf.prepare(rf.LOCOMO_DEV, None, dev_half=False, depth=max(5 * rf.K, 60))
    qs = rf.queries(ds, agents, lists, 60, [], 20, [], False, RADIUS, 0)  # pool 60, expand20, window2
    doc_ids = {name: ag.doc_ids for name, ag in agents.items()}
    for q in qs:
        q.agent = q.agent.name  # type: ignore[assignment]  # re-linked by ``score``
    with (work / "candidates.pkl").open("wb") as f:
        pickle.dump({"queries": qs, "dataset": ds, "doc_ids": doc_ids}, f)
    texts = {"turns": {n: ag.texts for n, ag in agents.items()}, "questions": {q: ls.text for q, ls in lists.items()}}
    (work / "texts.json").write_text(json.dumps(texts))
    print(f"{len(qs)} questions")


def embed(work: Path) -> None:
    from wordllama import WordLlama

    wl = WordLlama.load(disable_download=True)
    texts = json.loads((work / "texts.json").read_text())
    names = speaker_names(texts["turns"])

    def words(text: str) -> list[list[int]]:
        found = re.findall(r"[A-Za-z][A-Za-z'-]+", body_of(text))
        kept = [w.lower() for w in found if len(w) >= 3 and w.lower() not in STOP and w.lower() not in names]
        return [ids for w in kept if (ids := wl.tokenizer.encode(" " + w, add_special_tokens=False).ids)]

    arrays: dict[str, np.ndarray] = {}
    for name, turns in texts["turns"].items():
        arrays[f"turn:{name}"] = wl.embed(turns, norm=True)
        arrays[f"body:{name}"] = wl.embed([body_of(t) for t in turns], norm=True)
    qids = sorted(texts["questions"])
    arrays["questions"] = wl.embed([texts["questions"][q] for q in qids], norm=True)
    table = wl.embedding / np.linalg.norm(wl.embedding, axis=1, keepdims=True).clip(1e-9)
    arrays["tokens"] = table.astype(np.float32)
    np.savez(work / "static.npz", **arrays)
    tokens = {
        "qids": qids,
        "turns": {n: [words(t) for t in turns] for n, turns in texts["turns"].items()},
        "questions": {q: words(t) for q, t in texts["questions"].items()},
    }
    (work / "words.json").write_text(json.dumps(tokens))


def candidates(work: Path) -> tuple[list[Any], Any]:
    """``build``'s questions (their agents re-linked to what ``rerank_fit.score`` reads) and dataset."""
    with (work / "candidates.pkl").open("rb") as f:
        saved = pickle.load(f)  # written by ``build`` above
    qs, ds, doc_ids = saved["queries"], saved["dataset"], saved["doc_ids"]

    class Turns:  # what ``rerank_fit.score`` reads of an agent
        def __init__(self, ids: list[str]) -> None:
            self.doc_ids = ids

    for q in qs:
        q.agent = Turns(doc_ids[q.agent])
    return qs, ds


def held_out_rows(work: Path, sets: dict[str, Callable[[Any], np.ndarray] | None]) -> dict[str, Any]:
    """Each signal set added to the default's signals (``None``: the default itself), refitted
    per fold (pairwise, L2 0.001, leave one conversation out) and paired with the default's
    held-out figures. Needs a set named ``default``."""
    import rerank_fit as rf
    from locomo_dev import paired

    qs, ds = candidates(work)
    plain = {q.qid: q.x for q in qs}
    convs = sorted({q.conv for q in qs})
    qids = [q.qid for q in qs]
    held_by: dict[str, tuple[dict[str, float], ...]] = {}
    for label, extra in sets.items():
        for q in qs:
            q.x = plain[q.qid] if extra is None else np.hstack([plain[q.qid], extra(q)])
        held: tuple[dict[str, float], ...] = ({}, {}, {})
        for conv in convs:
            model = rf.fit([q for q in qs if q.conv != conv], "pairwise", 0.001)
            for i, s in enumerate(rf.score([q for q in qs if q.conv == conv], ds, model)):
                held[i].update(s)
        held_by[label] = held
    report: dict[str, Any] = {}
    ref = held_by["default"]
    for label, held in held_by.items():
        row = {
            "recall@10": statistics.fmean(held[0][q] for q in qids),
            "ndcg@10": statistics.fmean(held[2][q] for q in qids),
            "minus_default": {"recall@10": paired(held[0], ref[0], qids), "ndcg@10": paired(held[2], ref[2], qids)},
            "recall@10_by_category": {
                c: round(statistics.fmean(held[0][q] for q in s if q in held[0]), 3) for c, s in ds.query_sets.items()
            },
        }
        report[label] = row
        (dr, cr), (dn, cn) = row["minus_default"]["recall@10"], row["minus_default"]["ndcg@10"]
        print(
            f"{label}: R@10 {row['recall@10']:.3f} ({dr:+.3f} ± {cr:.3f})  NDCG@10 {row['ndcg@10']:.3f}"
            f" ({dn:+.3f} ± {cn:.3f})  {row['recall@10_by_category']}"
        )
    return report


def score(work: Path, out: Path | None) -> None:
    z = np.load(work / "static.npz")
    words = json.loads((work / "words.json").read_text())
    qrow = {q: i for i, q in enumerate(words["qids"])}
    table = z["tokens"]

    def word_vectors(ws: list[list[int]]) -> np.ndarray:
        if not ws:
            return np.zeros((0, table.shape[1]), np.float32)
        v = np.stack([table[w].mean(axis=0) for w in ws])
        return v / np.linalg.norm(v, axis=1, keepdims=True).clip(1e-9)

    turn_words = {n: [word_vectors(ws) for ws in turns] for n, turns in words["turns"].items()}
    question_words = {q: word_vectors(ws) for q, ws in words["questions"].items()}

    def cosines(kind: str) -> Callable[[Any], np.ndarray]:
        def signals(q: Any) -> np.ndarray:
            vectors = z[f"{kind}:{q.conv}"]
            cos = vectors @ z["questions"][qrow[q.qid]]
            pos = [int(c.ref.split(":")[1]) - 1 for c in q.cands]
            n = len(vectors)
            own = cos[pos]
            best = np.array([cos[max(0, p - RADIUS) : min(n, p + RADIUS + 1)].max() for p in pos])
            mean = np.array([cos[max(0, p - RADIUS) : min(n, p + RADIUS + 1)].mean() for p in pos])
            return np.stack([own, own - own.max(), best, mean], axis=1)

        return signals

    def maxsim(q: Any) -> np.ndarray:
        asked = question_words[q.qid]
        rows = []
        for c in q.cands:
            said = turn_words[q.conv][int(c.ref.split(":")[1]) - 1]
            if len(asked) == 0 or len(said) == 0:
                rows.append((0.0, 0.0))
                continue
            best = (asked @ said.T).max(axis=1)
            rows.append((float(best.mean()), float(best.max())))
        a = np.array(rows)
        return np.hstack([a, a[:, :1] - a[:, :1].max()])

    sets: dict[str, Callable[[Any], np.ndarray] | None] = {
        "default": None,
        "turn": cosines("turn"),
        "body": cosines("body"),
        "turn+body": lambda q: np.hstack([cosines("turn")(q), cosines("body")(q)]),
        "maxsim": maxsim,
        "body+maxsim": lambda q: np.hstack([cosines("body")(q), maxsim(q)]),
    }
    report: dict[str, Any] = {"command": "python bench/locomo_static_vectors.py " + " ".join(sys.argv[1:])}
    report.update(held_out_rows(work, sets))
    if out:
        out.write_text(json.dumps(report, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("step", choices=("build", "embed", "score"))
    ap.add_argument("--work", type=Path, required=True, help="a directory for the steps' files")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.step == "build":
        build(args.work)
    elif args.step == "embed":
        embed(args.work)
    else:
        score(args.work, args.out)


if __name__ == "__main__":
    main()
