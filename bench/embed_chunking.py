"""The default model's rate on calls of real conversation turns, its runs cut by the cost model
(`api/services/embedding/chunking.py`) against the rule before it (greedy: runs of 8 texts or
1,024 padded pieces), and the cost model's fit.

    python bench/embed_chunking.py                 # A/B, calls of 1, 4, 8 and 64 texts, 3 rounds
    python bench/embed_chunking.py --calibrate     # refit FIXED_TOKENS and ATTENTION_PER_TOKEN

Texts: every turn of the LoCoMo development split as `bench/eval_recall.py` stores them (~50
word pieces, 10 to 250), and the short synthetic line `bench/store_throughput.py` stores (~20
pieces, all alike). A call's texts are drawn at random, as concurrent stores meet in one call.
The two rules alternate within each round (reversed every other round), on the same calls.
Vectors of both rules are compared too: a run's padding is masked, so they must agree.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from store_throughput import load_turns, store_content

from memstream.api.services.embedding import load_local_embedder
from memstream.api.services.embedding.onnx_backend import OnnxMeanPoolEmbedder

ROOT = Path(__file__).resolve().parents[1]
Embed = Callable[[Sequence[str]], np.ndarray]


def greedy_runs(lengths: Sequence[int], max_texts: int = 8, max_tokens: int = 1024) -> list[list[int]]:
    """The rule before the cost model: sorted by length, a run grows to ``max_texts`` texts
    while its padded pieces stay within ``max_tokens``."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    runs, start = [], 0
    while start < len(order):
        end = start + 1
        while end < len(order) and end - start < max_texts and (end - start + 1) * lengths[order[end]] <= max_tokens:
            end += 1
        runs.append(order[start:end])
        start = end
    return runs


def embed_before(model: OnnxMeanPoolEmbedder, texts: Sequence[str]) -> np.ndarray:
    """``model.embed`` with its runs cut by the rule before the cost model."""
    encoded = [model.tokenizer.encode(t, model.max_seq_length) for t in texts]
    out = np.empty((len(texts), model.dim), dtype=np.float32)
    for idx in greedy_runs([len(ids) for ids in encoded], model.chunk_size, model.chunk_tokens):
        out[idx] = model._run([encoded[i] for i in idx])
    return out


def rate(embed: Embed, calls: list[list[str]]) -> dict[str, float]:
    embed(calls[0])  # warm
    wall, cpu = time.perf_counter(), time.process_time()
    for texts in calls:
        embed(texts)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    done = sum(len(c) for c in calls)
    return {"texts_per_s": round(done / wall, 1), "cpu_ms_per_text": round(1000 * cpu / done, 3)}


def ab(model: OnnxMeanPoolEmbedder, sets: dict[str, list[str]], sizes: list[int], rounds: int) -> dict[str, Any]:
    ways: dict[str, Embed] = {"before": lambda texts: embed_before(model, texts), "after": model.embed}
    rows: list[dict[str, Any]] = []
    for rnd in range(rounds):
        for name, texts in sets.items():
            for size in sizes:
                rng = random.Random(1000 * rnd + size)
                n_calls = max(4, 640 // size) if name == "locomo" else max(8, 1600 // size)
                calls = [[texts[rng.randrange(len(texts))] for _ in range(size)] for _ in range(n_calls)]
                order = ["before", "after"] if rnd % 2 == 0 else ["after", "before"]
                row: dict[str, Any] = {"round": rnd, "texts": name, "call_size": size}
                for way in order:
                    row[way] = rate(ways[way], calls)
                row["after_over_before"] = round(row["after"]["texts_per_s"] / row["before"]["texts_per_s"], 3)
                print(json.dumps(row), flush=True)
                rows.append(row)
    summary: dict[str, Any] = {}
    for name in sets:
        for size in sizes:
            ratios = [r["after_over_before"] for r in rows if r["texts"] == name and r["call_size"] == size]
            summary[f"{name}_{size}"] = {"after_over_before": ratios, "median": statistics.median(ratios)}
    # A run's padding is masked in attention and pooling: both rules give the same vectors.
    sample = sets["locomo"][:64]
    agree = np.sum(ways["before"](sample) * ways["after"](sample), axis=1)
    return {"rounds": rows, "summary": summary, "min_cosine_before_after": round(float(agree.min()), 6)}


def calibrate(model: OnnxMeanPoolEmbedder, repeats: int) -> dict[str, Any]:
    """Time one run per (texts, pieces) shape and fit seconds = a + b*n*w + q*n*w^2."""
    rng = random.Random(1)
    shapes = [(n, w) for n in (1, 2, 3, 4, 6, 8) for w in (16, 24, 32, 48, 64, 96, 128)]

    def batch(n: int, w: int) -> list[list[int]]:
        return [[101, *(rng.randrange(2000, 20000) for _ in range(w - 2)), 102] for _ in range(n)]

    for shape in shapes[:6]:
        model._run(batch(*shape))
    times: dict[tuple[int, int], list[float]] = {}
    for _ in range(repeats):
        rng.shuffle(shapes)
        for n, w in shapes:
            b = batch(n, w)
            t = time.perf_counter()
            model._run(b)
            times.setdefault((n, w), []).append(time.perf_counter() - t)
    keys = sorted(times)
    x = np.array([[1.0, n * w, n * w * w] for n, w in keys])
    y = np.array([statistics.median(times[k]) for k in keys])
    (a, b, q), *_ = np.linalg.lstsq(x, y, rcond=None)
    return {
        "run_ms": {f"{n}x{w}": round(1000 * statistics.median(times[(n, w)]), 2) for n, w in keys},
        "fixed_ms": round(1000 * a, 3),
        "piece_us": round(1e6 * b, 2),
        "piece_squared_ns": round(1e9 * q, 2),
        "FIXED_TOKENS": round(a / b, 1),
        "ATTENTION_PER_TOKEN": round(q / b, 5),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibrate", action="store_true", help="fit the cost model instead of the A/B")
    ap.add_argument("--sizes", default="1,4,8,64", help="texts per call")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--locomo", type=Path, default=ROOT.parent / "shared" / "eval" / "locomo-dev")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "embed_chunking.json")
    args = ap.parse_args()
    model = load_local_embedder()
    if not isinstance(model, OnnxMeanPoolEmbedder):
        raise SystemExit(f"the default embedder is {model!r}, not an ONNX model")
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python bench/embed_chunking.py "
        + ("--calibrate" if args.calibrate else f"--sizes {args.sizes} --rounds {args.rounds}"),
        "model": model.model_id,
        "spin": model.spin,
    }
    if args.calibrate:
        report["calibration"] = calibrate(model, max(3, args.rounds))
    else:
        sets = {
            "locomo": load_turns(args.locomo),
            "synthetic": [store_content("default-8", i % 8, i // 8) for i in range(4096)],
        }
        report |= ab(model, sets, [int(s) for s in args.sizes.split(",")], args.rounds)
    report["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report.get("summary", report.get("calibration")), indent=1))


if __name__ == "__main__":
    main()
