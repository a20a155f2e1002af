"""What adjacent-turn evidence and the learned second stage cost a recall: ``run_recall`` in
process at 10k memories of one agent, the default against the feature off, interleaved, plus the
default embedder's single-query time (the budget is p50 <= 25 ms with the query's embedding,
docs/eval.md "LoCoMo" and "Third pass").

Memories: the first N WordNet definitions of ``bench/eval_data/wn-gcide-confirm`` (real text for
the lexical index), each with a seeded random unit vector (a vector scan costs the same whatever
the vectors say). Queries: that collection's ``dictionary`` queries, embedded for the timing of
the embedder only; the recall gets a seeded random query vector.

With ``--turns`` each memory is written as a conversation turn (``[date] Name: text``, two
speakers taking turns), so the second stage runs (it runs only over conversation turns).

    python bench/neighbour_latency.py                  # 10,000 memories, 300 queries, 3 rounds
    python bench/neighbour_latency.py --compare rerank --turns   # second stage on against off
    python bench/neighbour_latency.py --compare expand --turns   # sixth pass against the fifth's stage
    python bench/neighbour_latency.py --compare window --turns   # seventh pass against the sixth's stage

``--compare expand`` runs three shapes interleaved: the default (cosines read by id, the first
candidates' neighbours joining, ``rerank.READ`` / ``rerank.EXPAND``), the fifth pass's stage
(no reads, no joins) and the stage off. ``--compare window`` likewise: the default (with the
window signals, ``rerank.WINDOW``), the sixth pass's stage (no window) and the stage off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
from eval_recall import DATA_DIR, load_dataset

from memstream.api.query.recall import rerank
from memstream.api.query.recall.pipeline import RecallRequest, run_recall
from memstream.api.services.embedding import load_local_embedder
from memstream.projections.lexical import LexicalProjection
from memstream.projections.precision import PrecisionProjection
from memstream.projections.records import EpisodesProjection, MemoriesProjection, ProfilesProjection
from memstream.projections.scope import ScopeFilter
from memstream.projections.vectors import VectorProjection

CONFIRM = DATA_DIR.parent / "wn-gcide-confirm"
MODEL = "bench-random"
T0 = "2026-01-01T00:00:00+00:00"


@dataclass
class Models:
    memories: MemoriesProjection = field(default_factory=MemoriesProjection)
    episodes: EpisodesProjection = field(default_factory=EpisodesProjection)
    profiles: ProfilesProjection = field(default_factory=ProfilesProjection)
    precision: PrecisionProjection = field(default_factory=PrecisionProjection)
    vectors: VectorProjection = field(default_factory=VectorProjection)
    lexical: LexicalProjection = field(default_factory=LexicalProjection)


@dataclass(frozen=True)
class Opts:
    """The service's recall defaults (api/services/settings.py)."""

    recall_neighbour_weight: float = 0.25
    recall_speaker_boost: float = 0.5
    recall_rerank: Literal["learned", "off"] = "learned"
    recall_mode: Literal["rrf", "rsf", "cascade"] = "rrf"
    recall_retrievers: Literal["all", "vector", "lexical"] = "all"
    max_memories: int = 10_000
    vector_reach: int = 0
    vector_far_limit: int = 0
    vector_min_similarity: float = 0.3
    rrf_k: int = 60
    rrf_evidence: bool = True
    rrf_lexical_weight: float = 1.0
    confidence_enabled: bool = False
    confidence_ordering: Literal["fusion", "legacy"] = "fusion"
    episode_penalty_enabled: bool = False
    episode_decay_rate: float = 0.01
    episode_decay_floor: float = 0.5
    autocut_enabled: bool = True
    autocut_min_gap_ratio: float = 0.15
    autocut_min_results: int = 3


def fill(texts: Sequence[str], dim: int, seed: int) -> Models:
    m = Models()
    rng = np.random.default_rng(seed)
    for i, text in enumerate(texts, 1):
        vec = rng.standard_normal(dim).astype("<f4")
        vec /= np.linalg.norm(vec)
        ev: dict[str, Any] = {
            "id": f"e{i}",
            "type": "memory.stored",
            "v": 1,
            "scope": {"agent_id": "a", "project_id": "", "channel": ""},
            "actor": {"client_id": "bench", "agent_id": "a", "session_id": ""},
            "occurred_at": T0,
            "command_id": f"c{i}",
            "payload": {"id": i, "content": text, "embedding": {"model": MODEL, "dim": dim, "dtype": "f32"}},
            "vector": vec.tobytes(),
        }
        for model in (m.memories, m.vectors, m.lexical):
            model.apply(i, ev)
    m.vectors.flush()
    return m


def pct(values: Sequence[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(np.ceil(p / 100 * len(s))) - 1))]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compare", choices=("neighbours", "rerank", "expand", "window"), default="neighbours")
    ap.add_argument("--turns", action="store_true", help="memories written as conversation turns")
    ap.add_argument("--out", default=None, help="results JSON")
    args = ap.parse_args(argv)
    ds = load_dataset(CONFIRM)
    texts = list(ds.docs.values())[: args.docs]
    if args.turns:
        texts = [f"[{1 + i // 200} May 2023] {('Caroline', 'Melanie')[i % 2]}: {t}" for i, t in enumerate(texts)]
    queries = list(ds.query_sets["dictionary"].values())[: args.queries]
    if args.turns:  # half the questions name a speaker, as conversation questions do
        queries = [f"Did Caroline say {q}" if i % 2 else q for i, q in enumerate(queries)]
    emb = load_local_embedder(None)
    t0 = time.perf_counter()
    m = fill(texts, emb.dim, 1)
    print(f"filled {len(texts)} memories in {time.perf_counter() - t0:.1f}s", flush=True)
    rng = np.random.default_rng(2)
    qvecs = rng.standard_normal((len(queries), emb.dim)).astype(np.float32)
    qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
    shipped = (rerank.READ, rerank.EXPAND, rerank.WINDOW)
    stage: dict[str, tuple[bool, int | None, int]] = {}  # (READ, EXPAND, WINDOW) per shape; others: as shipped
    if args.compare == "neighbours":
        off = Opts(recall_rerank="off")
        configs = {"neighbours 0.25": off, "neighbours off": replace(off, recall_neighbour_weight=0.0)}
    elif args.compare == "rerank":
        configs = {"second stage (default)": Opts(), "second stage off": Opts(recall_rerank="off")}
    elif args.compare == "expand":
        configs = {"reads + expand (default)": Opts(), "fifth pass": Opts()}
        configs["second stage off"] = Opts(recall_rerank="off")
        stage["fifth pass"] = (False, 0, 0)
    else:
        configs = {"window (default)": Opts(), "sixth pass": Opts(), "second stage off": Opts(recall_rerank="off")}
        stage["sixth pass"] = (shipped[0], shipped[1], 0)

    def shape(name: str) -> None:
        """The second stage's reads and joins for one shape (module constants, set per call)."""
        read, top, radius = stage.get(name, shipped)
        setattr(rerank, "READ", read)  # noqa: B010 (a Final constant, set for this bench only)
        setattr(rerank, "EXPAND", top)  # noqa: B010
        setattr(rerank, "WINDOW", radius)  # noqa: B010

    times: dict[str, list[float]] = {name: [] for name in configs}
    # the recall's own CPU time as well: on a shared machine it waits for a core less than the
    # wall clock does, so before/after ratios under load are steadier on it
    cpu: dict[str, list[float]] = {name: [] for name in configs}
    embed_ms: list[float] = []
    for text in queries[:50]:  # warm-up: the first recalls and embeddings build caches
        emb.embed([text])
        for name, opts in configs.items():
            shape(name)
            run_recall(m, opts, RecallRequest(ScopeFilter("a"), text, 10), qvecs[0], MODEL)
    for _ in range(args.rounds):
        for i, text in enumerate(queries):
            for name, opts in configs.items():
                shape(name)
                t, c = time.perf_counter(), time.thread_time()
                run_recall(m, opts, RecallRequest(ScopeFilter("a"), text, 10), qvecs[i], MODEL)
                times[name].append((time.perf_counter() - t) * 1000)
                cpu[name].append((time.thread_time() - c) * 1000)
            t = time.perf_counter()
            emb.embed([text])
            embed_ms.append((time.perf_counter() - t) * 1000)
    shape("")
    report: dict[str, Any] = {
        "docs": len(texts),
        "queries": len(queries),
        "rounds": args.rounds,
        "turns": args.turns,
        "load_average": list(os.getloadavg()),
    }
    for name, ms in times.items():
        report[name] = {
            "p50_ms": round(pct(ms, 50), 2),
            "p95_ms": round(pct(ms, 95), 2),
            "mean_ms": round(statistics.fmean(ms), 2),
            "cpu_p50_ms": round(pct(cpu[name], 50), 2),
        }
    report["embed_one_query"] = {"p50_ms": round(pct(embed_ms, 50), 2), "p95_ms": round(pct(embed_ms, 95), 2)}
    print(json.dumps(report, indent=2))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
