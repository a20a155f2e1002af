"""The lexical projection against SQLite FTS5, on the same documents in the same run.

Corpus (real text, offline): Princeton WordNet 3.0 definitions as shipped by Debian's
``wordnet-base`` (``apt-get install wordnet-base`` → /usr/share/wordnet/data.*; 117,659 synsets,
~10 words each), shuffled with a fixed seed; the first 10k / 100k are one agent's memories.

Queries (500 of each, fixed seed):

- ``short``: 1-3 consecutive words of one row ("domesticated", "the body of"); that row is
  the relevant one (known-item search, NDCG@10 for both engines).
- ``example``: a synset's usage example ("he hit the ball hard", ~7 words). Its synset's
  definition is the one relevant row, a paraphrase task lexical search is weak at (the
  example rarely shares words with the definition): NDCG@10 for both engines. Equal figures
  on both tasks say the BM25 here is a BM25.
- ``long``: a whole WordNet gloss (definition + examples) of some synset, >= 15 words.

Measured for each size, for memstream (``LexicalProjection``) and FTS5 (stdlib sqlite3,
``tokenize='unicode61'``, in memory, OR of the query's tokens, ``ORDER BY rank LIMIT 10``):

- bulk build: memstream folding N ``memory.stored`` events (the replay path) and loading a
  snapshot; FTS5 inserting N rows in one transaction;
- per-write cost: 1,000 adds, updates and deletes, one at a time; and "visible after a write":
  one add followed by one query (what a store-then-recall pays), p50;
- query latency p50/p99 for each query class, BM25 and the keyword channel (memstream only);
- memstream's snapshot + digest, compaction and resident memory; top-10 overlap with FTS5.

A CJK section (memstream only: FTS5's unicode61 does not segment CJK) folds the lines of
Debian's ``fortunes-zh`` (``apt-get install fortunes-zh``; skipped when absent).

Latencies are wall clock; ``cpu_*`` are the process CPU time of the same calls, which moves
less when other processes share the machine (the load average is printed with each size).

    python bench/lexical.py                    # 10k and 100k, ~2 minutes
    python bench/lexical.py --sizes 10000 --queries 200 --json out.json
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import os
import platform
import random
import re
import sqlite3
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from corpora import wordnet_synsets

from memstream.projections.lexical import LexicalProjection
from memstream.projections.lexical.text import query_tokens
from memstream.projections.scope import ScopeFilter

WORDNET_DIR = Path(os.environ.get("WORDNET_DIR", "/usr/share/wordnet"))
AGENT = "bench"


def load_wordnet() -> list[tuple[str, list[str], list[str], str]]:
    """[(definition, examples, lemmas, gloss)] for every synset."""
    return [(s.definition, s.examples, s.lemmas, s.gloss) for s in wordnet_synsets(WORDNET_DIR)]


def event(type_: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": type_,
        "scope": {"agent_id": AGENT, "project_id": "", "channel": ""},
        "actor": {"client_id": "bench", "agent_id": AGENT, "session_id": ""},
        "occurred_at": "2026-01-01T00:00:00+00:00",
        "command_id": "c",
        "payload": payload,
    }


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


def lat(fn: Callable[[str], Any], queries: list[str]) -> dict[str, float]:
    """Wall-clock p50/p99/mean, and the process CPU time p50/p99 (less sensitive to other load)."""
    for q in queries[:20]:
        fn(q)  # warm
    wall, cpu = [], []
    for q in queries:
        c, t = time.process_time(), time.perf_counter()
        fn(q)
        wall.append((time.perf_counter() - t) * 1e3)
        cpu.append((time.process_time() - c) * 1e3)
    return {
        "p50_ms": round(pct(wall, 50), 3),
        "p99_ms": round(pct(wall, 99), 3),
        "mean_ms": round(statistics.mean(wall), 3),
        "cpu_p50_ms": round(pct(cpu, 50), 3),
        "cpu_p99_ms": round(pct(cpu, 99), 3),
    }


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def fts_query(q: str) -> str:
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in query_tokens(q))


class Fts:
    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:", isolation_level=None)
        self.db.execute("CREATE VIRTUAL TABLE docs USING fts5(content, tokenize='unicode61')")

    def bulk(self, rows: list[tuple[int, str]]) -> None:
        self.db.execute("BEGIN")
        self.db.executemany("INSERT INTO docs(rowid, content) VALUES (?, ?)", rows)
        self.db.execute("COMMIT")

    def search(self, q: str, k: int = 10) -> list[int]:
        expr = fts_query(q)
        if not expr:
            return []
        sql = "SELECT rowid FROM docs WHERE docs MATCH ? ORDER BY rank LIMIT ?"
        return [r[0] for r in self.db.execute(sql, (expr, k))]

    def add(self, rowid: int, text: str) -> None:
        self.db.execute("INSERT INTO docs(rowid, content) VALUES (?, ?)", (rowid, text))

    def update(self, rowid: int, text: str) -> None:
        self.db.execute("UPDATE docs SET content = ? WHERE rowid = ?", (text, rowid))

    def delete(self, rowid: int) -> None:
        self.db.execute("DELETE FROM docs WHERE rowid = ?", (rowid,))


def ndcg_at_10(ranked: list[list[int]], relevant: list[int]) -> float:
    total = 0.0
    for got, rel in zip(ranked, relevant, strict=True):
        if rel in got[:10]:
            total += 1.0 / math.log2(got.index(rel) + 2)
    return total / len(relevant)


def run_size(synsets: list[tuple[str, list[str], list[str], str]], n: int, n_q: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    order = [i for i, s in enumerate(synsets) if s[0]]
    rng.shuffle(order)
    corpus, spare = order[:n], order[n:]
    texts = [synsets[i][0] for i in corpus]
    in_corpus = dict.fromkeys(corpus)
    short, short_rel = [], []
    for pos in rng.sample(range(n), n_q):
        ws = re.findall(r"[A-Za-z]+", texts[pos])
        j, m = rng.randrange(len(ws)), rng.randint(1, 3)
        short.append(" ".join(ws[j : j + m]))
        short_rel.append(pos + 1)
    ex_pairs = [(synsets[i][1][0], pos) for pos, i in enumerate(corpus) if synsets[i][1]]
    ex_pairs = [p for p in ex_pairs if len(p[0].split()) >= 4]
    ex_pairs = rng.sample(ex_pairs, min(n_q, len(ex_pairs)))
    examples = [q for q, _ in ex_pairs]
    long_pool = [synsets[i][3] for i in range(len(synsets)) if len(synsets[i][3].split()) >= 15]
    long = rng.sample(long_pool, n_q)
    classes = {"short": short, "example": examples, "long": long}
    res: dict[str, Any] = {
        "docs": n,
        "avg_words": round(statistics.mean(len(t.split()) for t in texts), 1),
        "loadavg_before": [round(x, 2) for x in os.getloadavg()],
    }
    scope = ScopeFilter(AGENT)
    del in_corpus

    # -- build --------------------------------------------------------------------------------
    gc.collect()
    rss0 = rss_mb()
    events = [event("memory.stored", {"id": pos + 1, "content": t}) for pos, t in enumerate(texts)]
    lex = LexicalProjection()
    t0 = time.perf_counter()
    for off, ev in enumerate(events):
        lex.apply(off, ev)
        lex.offset = off
    fold_s = time.perf_counter() - t0
    del events
    gc.collect()
    rss1 = rss_mb()
    t0 = time.perf_counter()
    snap = lex.to_snapshot()
    digest = hashlib.sha256(orjson.dumps(snap, option=orjson.OPT_SORT_KEYS)).hexdigest()
    snap_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    lex2 = LexicalProjection()
    lex2.load_snapshot(snap)
    load_s = time.perf_counter() - t0
    del snap
    fts = Fts()
    t0 = time.perf_counter()
    fts.bulk([(pos + 1, t) for pos, t in enumerate(texts)])
    fts_s = time.perf_counter() - t0
    res["build"] = {
        "memstream_fold_s": round(fold_s, 2),
        "memstream_fold_events_per_s": round(n / fold_s),
        "memstream_load_snapshot_s": round(load_s, 2),
        "memstream_snapshot_and_digest_s": round(snap_s, 2),
        "memstream_rss_mb": round(rss1 - rss0, 1),
        "fts5_bulk_s": round(fts_s, 2),
    }
    del lex2
    gc.collect()

    # -- queries ------------------------------------------------------------------------------
    q: dict[str, Any] = {}
    for name, qs in classes.items():
        ms = lat(lambda s: lex.search(scope, s, 10), qs)
        kw = lat(lambda s: lex.keyword(scope, s, 10), qs)
        fs = lat(lambda s: fts.search(s, 10), qs)
        overlap = statistics.mean(
            len({int(r[4:]) for r, _ in lex.search(scope, s, 10)} & set(got)) / len(got)
            for s in qs
            if (got := fts.search(s, 10))
        )
        q[name] = {
            "memstream_bm25": ms,
            "memstream_keyword": kw,
            "fts5": fs,
            "fts5_over_memstream_p50": round(fs["p50_ms"] / ms["p50_ms"], 1),
            "top10_overlap_with_fts5": round(overlap, 3),
            "avg_query_tokens": round(statistics.mean(len(query_tokens(s)) for s in qs), 1),
        }
    for name, qs, rel in (("short", short, short_rel), ("example", examples, [pos + 1 for _, pos in ex_pairs])):
        q[name]["ndcg10_memstream"] = round(
            ndcg_at_10([[int(r[4:]) for r, _ in lex.search(scope, s, 10)] for s in qs], rel), 4
        )
        q[name]["ndcg10_fts5"] = round(ndcg_at_10([fts.search(s, 10) for s in qs], rel), 4)
    res["queries"] = q

    # -- writes -------------------------------------------------------------------------------
    w: dict[str, Any] = {}
    n_w = 1000
    new_texts = [synsets[i][0] for i in spare[: 3 * n_w]]
    off = n
    add_ms, fts_add_ms = [], []
    for j in range(n_w):
        ev = event("memory.stored", {"id": n + 1 + j, "content": new_texts[j]})
        add_ms.append(timed(partial(lex.apply, off, ev)))
        off += 1
        fts_add_ms.append(timed(partial(fts.add, n + 1 + j, new_texts[j])))
    upd_ms, fts_upd_ms = [], []
    for j in range(n_w):
        target = 1 + (j * 7919) % n
        ev = event("memory.updated", {"id": target, "content": new_texts[n_w + j]})
        upd_ms.append(timed(partial(lex.apply, off, ev)))
        off += 1
        fts_upd_ms.append(timed(partial(fts.update, target, new_texts[n_w + j])))
    del_ms, fts_del_ms = [], []
    for j in range(n_w):
        target = 1 + (j * 104729 + 13) % n
        ev = event("memory.deleted", {"id": target})
        del_ms.append(timed(partial(lex.apply, off, ev)))
        off += 1
        fts_del_ms.append(timed(partial(fts.delete, target)))
    # Store then recall: one write, then a query (the fold-before-read pattern).
    raw_ms, fts_raw_ms = [], []
    base = n + 1 + n_w
    for j in range(200):
        text = new_texts[2 * n_w + j]
        ev = event("memory.stored", {"id": base + j, "content": text})
        qry = short[j % len(short)]

        def ms_pair(ev: dict[str, Any] = ev, off: int = off, qry: str = qry) -> None:
            lex.apply(off, ev)
            lex.search(scope, qry, 10)

        def fts_pair(j: int = j, text: str = text, qry: str = qry) -> None:
            fts.add(base + j, text)
            fts.search(qry, 10)

        raw_ms.append(timed(ms_pair))
        off += 1
        fts_raw_ms.append(timed(fts_pair))
    for name, a, b in (
        ("add", add_ms, fts_add_ms),
        ("update", upd_ms, fts_upd_ms),
        ("delete", del_ms, fts_del_ms),
        ("add_then_short_query", raw_ms, fts_raw_ms),
    ):
        w[name] = {
            "memstream_p50_ms": round(pct(a, 50), 4),
            "memstream_p99_ms": round(pct(a, 99), 4),
            "fts5_p50_ms": round(pct(b, 50), 4),
            "fts5_p99_ms": round(pct(b, 99), 4),
        }
    res["writes"] = w
    idx = lex.agents[AGENT]
    t0 = time.perf_counter()
    idx.compact()
    res["compaction_s"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    idx.rebuild()
    res["reindex_from_text_s"] = round(time.perf_counter() - t0, 2)
    res["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    res["digest_prefix"] = digest[:16]
    return res


CJK_FORTUNES = Path(os.environ.get("CJK_FORTUNES", "/usr/share/games/fortunes/chinese"))


def hit10(fn: Callable[[str], list[tuple[str, float]]], queries: list[str], relevant: list[str]) -> float:
    return round(statistics.mean(r in dict(fn(q)) for q, r in zip(queries, relevant, strict=True)), 3)


def run_cjk(n_q: int, seed: int) -> dict[str, Any] | None:
    """Chinese text: the lines of Debian's ``fortunes-zh`` (jokes, sayings, anecdotes; real
    modern Chinese, ~300k Han characters). Short queries are 2-4 characters cut from a row
    (known-item: hit@10 of that row), long ones a whole other row."""
    if not CJK_FORTUNES.is_file():
        return None
    raw = re.sub(r"\x1b\[[0-9;]*m", "", CJK_FORTUNES.read_text(encoding="utf-8", errors="replace"))
    lines = [ln.strip() for ln in raw.splitlines()]
    texts = list(dict.fromkeys(ln for ln in lines if len(re.findall(r"[\u4e00-\u9fff]", ln)) >= 6))
    rng = random.Random(seed)
    rng.shuffle(texts)
    events = [event("memory.stored", {"id": off + 1, "content": t}) for off, t in enumerate(texts)]
    tracemalloc.start()
    traced = LexicalProjection()
    for off, ev in enumerate(events):
        traced.apply(off, ev)
    traced_mb = tracemalloc.get_traced_memory()[0] / 2**20
    tracemalloc.stop()
    del traced
    lex = LexicalProjection()
    t0 = time.perf_counter()
    for off, ev in enumerate(events):
        lex.apply(off, ev)
    fold_s = time.perf_counter() - t0
    scope = ScopeFilter(AGENT)
    short, rel = [], []
    for pos in rng.sample(range(len(texts)), n_q):
        runs = re.findall(r"[\u4e00-\u9fff]{2,}", texts[pos]) or [texts[pos]]
        run = rng.choice(runs)
        m = min(len(run), rng.randint(2, 4))
        j = rng.randrange(len(run) - m + 1)
        short.append(run[j : j + m])
        rel.append(f"mem:{pos + 1}")
    long = rng.sample(texts, n_q)
    idx = lex.agents[AGENT]
    return {
        "docs": len(texts),
        "avg_chars": round(statistics.mean(len(t) for t in texts), 1),
        "fold_s": round(fold_s, 2),
        "traced_mb": round(traced_mb, 1),
        "bm25_terms": len(idx.post),
        "keyword_words": len(idx.kw.words),
        "keyword_grams": len(idx.kw.grams),
        "short": {
            "bm25": lat(lambda s: lex.search(scope, s, 10), short),
            "keyword": lat(lambda s: lex.keyword(scope, s, 10), short),
            "bm25_hit10": hit10(lambda s: lex.search(scope, s, 10), short, rel),
            "keyword_hit10": hit10(lambda s: lex.keyword(scope, s, 10), short, rel),
        },
        "long": {
            "bm25": lat(lambda s: lex.search(scope, s, 10), long),
            "keyword": lat(lambda s: lex.keyword(scope, s, 10), long),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    synsets = load_wordnet()
    out: dict[str, Any] = {
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "numpy": np.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "corpus": f"WordNet 3.0 definitions ({len(synsets)} synsets)",
        "sizes": [],
    }
    for n in (int(s) for s in args.sizes.split(",")):
        r = run_size(synsets, n, args.queries, args.seed)
        out["sizes"].append(r)
        print(json.dumps(r, indent=1), flush=True)
    cjk = run_cjk(args.queries, args.seed)
    if cjk is not None:
        out["cjk"] = cjk
        print(json.dumps(cjk, indent=1), flush=True)
    else:
        print(f"(no CJK section: {CJK_FORTUNES} missing; apt-get install fortunes-zh)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
