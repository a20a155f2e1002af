"""Context packages (CONTRACTS A6): token savings and anchor recall on a fixed query set.

Seed 001 keeps two questions apart, and so does this report:

* **savings** (packaging ROI): ``estimatedSavingsPercent``, ``compressedTokens``,
  ``budgetUsedPercent`` as the package reports them: what the package costs against reading every
  recalled candidate in full. Says nothing about whether the right memory is in it.
* **fidelity**: anchor recall: the share of queries whose judged-relevant memory is among the
  package's anchors, beside recall@limit of the same query (is the relevant memory among the
  candidates the package was built from). The gap between the two is what the budget dropped.

Data: the committed ``bench/eval_data/wn-gcide`` set (``bench/eval_recall.py`` describes it):
WordNet definitions as memories, Webster 1913 definitions (``dictionary``) or usage examples
(``examples``) as queries, one judged-relevant memory each. Everything runs in process on a
temporary data directory; tokens are counted by ``memstream.api.services.tokens`` (WordPiece).

Usage (repo root, project venv)::

    python bench/context_package.py --max-docs 300 --max-queries 30            # tiny
    python bench/context_package.py --budgets 64,256,1024 --embedder none      # lexical only
    python bench/context_package.py --max-docs 5000 --max-queries 400 --set examples \
        --budgets 32,64,128,512,2000 --out bench/results/context_package_examples.json   # whole set

Writes ``bench/results/context_package.json`` (``--out``) and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_recall import load_dataset, subset  # noqa: E402

from memstream.api.services.engine import EmbeddedEngine  # noqa: E402
from memstream.api.services.settings import load_settings  # noqa: E402
from memstream.api.tools.dispatch import dispatch  # noqa: E402
from memstream.api.tools.registry import Caller  # noqa: E402

AGENT = "bench"


async def run(args: argparse.Namespace) -> dict[str, Any]:
    load_start = [round(x, 2) for x in os.getloadavg()]
    ds = subset(load_dataset(), args.max_docs, args.max_queries)
    queries = ds.query_sets[args.set]
    budgets = [int(b) for b in args.budgets.split(",")]
    caller = Caller(client_id="bench")
    with tempfile.TemporaryDirectory() as tmp:
        overrides: dict[str, Any] = {"data_dir": Path(tmp), "sync": "NORMAL", "context_line_tokens": args.line_tokens}
        if args.embedder != "default":
            overrides["embedder"] = args.embedder
        engine = EmbeddedEngine(load_settings(env={}, **overrides))
        await engine.start()
        model = "none" if args.embedder == "none" else engine.embedder.model_id
        try:
            t0 = time.perf_counter()
            ref_of: dict[str, str] = {}
            for doc_id, text in ds.docs.items():
                r = await dispatch(engine, caller, "store", {"agent_id": AGENT, "content": text, "id": doc_id})
                if r.get("result") == "stored":
                    ref_of[doc_id] = f"mem:{r['id']}"
            stored_s = time.perf_counter() - t0
            per_budget: dict[int, list[dict[str, Any]]] = {b: [] for b in budgets}
            retrieved = 0
            for qid, text in queries.items():
                wanted = {ref_of[d] for d in ds.relevant(qid) if d in ref_of}
                rec = await dispatch(engine, caller, "recall", {"agent_id": AGENT, "query": text, "limit": args.limit})
                retrieved += bool(wanted & {m.get("ref") for m in rec.get("messages", [])})
                for b in budgets:
                    body = await dispatch(
                        engine,
                        caller,
                        "context_package",
                        {"agent_id": AGENT, "query": text, "maxContextTokens": b, "limit": args.limit},
                    )
                    anchors = {a["id"] for a in body.get("anchors", [])}
                    per_budget[b].append({"tb": body["tokenBudget"], "hit": bool(wanted & anchors)})
        finally:
            await engine.close()
    n = len(queries)
    rows = []
    for b, items in per_budget.items():
        tbs = [i["tb"] for i in items]
        with_raw = [t for t in tbs if t["estimatedRawTokens"] > 0]
        rows.append(
            {
                "maxContextTokens": b,
                "savings": {
                    "queries_with_candidates": len(with_raw),
                    "median_estimatedSavingsPercent": _median([t["estimatedSavingsPercent"] for t in with_raw]),
                    "mean_estimatedRawTokens": _mean([t["estimatedRawTokens"] for t in tbs]),
                    "mean_compressedTokens": _mean([t["compressedTokens"] for t in tbs]),
                    "max_compressedTokens": max((t["compressedTokens"] for t in tbs), default=0),
                    "median_budgetUsedPercent": _median([t["budgetUsedPercent"] for t in tbs]),
                },
                "fidelity": {"anchor_recall": round(sum(i["hit"] for i in items) / n, 4) if n else None},
            }
        )
    return {
        "bench": "context_package",
        "dataset": {**ds.meta, "set": args.set, "docs": len(ds.docs), "queries": n},
        "settings": {
            "embedder": model,
            "limit": args.limit,
            "line_tokens": args.line_tokens,
            "tokenizer": "wordpiece-bert-base-uncased",
        },
        "recall_at_limit": round(retrieved / n, 4) if n else None,
        "store_seconds": round(stored_s, 2),
        "budgets": rows,
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg_start": load_start,
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        },
        "command": "python bench/context_package.py " + " ".join(sys.argv[1:]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _mean(xs: list[float]) -> float | None:
    return round(statistics.fmean(xs), 1) if xs else None


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 1) if xs else None


def table(report: dict[str, Any]) -> str:
    lines = [
        f"{report['dataset']['set']}: {report['dataset']['queries']} queries, {report['dataset']['docs']} memories, "
        f"recall@{report['settings']['limit']} {report['recall_at_limit']}",
        "| budget | median savings % | mean raw | mean compressed | median used % | anchor recall |",
        "|---|---|---|---|---|---|",
    ]
    for r in report["budgets"]:
        s, f = r["savings"], r["fidelity"]
        lines.append(
            f"| {r['maxContextTokens']} | {s['median_estimatedSavingsPercent']} | {s['mean_estimatedRawTokens']} | "
            f"{s['mean_compressedTokens']} | {s['median_budgetUsedPercent']} | {f['anchor_recall']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--max-docs", type=int, default=300)
    p.add_argument("--max-queries", type=int, default=30)
    p.add_argument("--set", default="dictionary", choices=["dictionary", "examples"])
    p.add_argument("--budgets", default="64,256,1024")
    p.add_argument("--limit", type=int, default=10, help="recalled candidates per package")
    p.add_argument("--line-tokens", type=int, default=48)
    p.add_argument("--embedder", default="default", help="'default' (MEMSTREAM_EMBEDDER's default), 'none', or a name")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "context_package.json")
    args = p.parse_args(argv)
    report = asyncio.run(run(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
