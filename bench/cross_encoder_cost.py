"""What a MiniLM-L6-sized cross-encoder would cost recall per query, measured with the model we have.

No package on the registries reachable here was found to ship a cross-encoder's weights
(docs/eval.md, "Third pass"). A cross-encoder such as ms-marco-MiniLM-L-6-v2 has the same
architecture as the default embedder (6 layers, hidden 384): scoring K candidates is one forward
pass over K sequences ``query [SEP] candidate``. So this times the default embedder (MiniLM-L6
int8, ONNX, in process) on exactly those K concatenated texts, one batch per query: a lower bound
on such a reranker's cost (the classification head is negligible; an fp32 model is slower).

Texts: LoCoMo development-split turns and questions (each question with the first K turns of its
conversation, which are as long as the turns a recall returns).

    python bench/cross_encoder_cost.py                 # K = 20, 30, 50; 40 questions
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from eval_recall import AGENT, load_dataset
from locomo_dev import LOCOMO_DEV

from memstream.api.services.embedding import load_local_embedder


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", default="20,30,50")
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    ds = load_dataset(LOCOMO_DEV)
    emb = load_local_embedder(None)
    turns: dict[str, list[str]] = {}
    for doc, text in ds.docs.items():
        turns.setdefault(ds.agent_of.get(doc, AGENT), []).append(text)
    questions = [(q, t) for qs in ds.query_sets.values() for q, t in qs.items()][: args.queries]
    ks = [int(k) for k in args.k.split(",")]
    emb.embed([questions[0][1] + " " + turns[ds.agent_of[questions[0][0]]][0]])  # warm-up
    times: dict[int, list[float]] = {k: [] for k in ks}
    for q, text in questions:
        for k in ks:  # interleaved, so load drifts hit every K alike
            pairs = [f"{text} [SEP] {t}" for t in turns[ds.agent_of[q]][:k]]
            t0 = time.perf_counter()
            emb.embed(pairs)
            times[k].append((time.perf_counter() - t0) * 1000)
    report = {
        "model": "default embedder (MiniLM-L6 int8) as a cross-encoder stand-in",
        "queries": len(questions),
        "load_average": list(os.getloadavg()),
        **{
            f"k={k}": {"p50_ms": round(statistics.median(ms), 1), "mean_ms": round(statistics.fmean(ms), 1)}
            for k, ms in times.items()
        },
    }
    text = json.dumps(report, indent=2) + "\n"
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
