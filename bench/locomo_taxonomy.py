"""LoCoMo development split (issue 15, eleventh pass): WordNet's noun taxonomy as a second-stage signal.

A list question names a category ("What activities does Melanie partake in?", "What instruments
does Calvin play?") and its evidence turns name members of it ("pottery", "camping", "violin").
Neither the vectors nor a static word table put "activities" near "pottery" (the tenth pass's
MaxSim); WordNet's hypernyms do (pottery.n.02, the craft → ... → activity.n.01). Two steps:

    python bench/locomo_static_vectors.py build --work /tmp/static          # the default's candidates
    python bench/locomo_taxonomy.py --work /tmp/static --out bench/results/locomo_taxonomy_eleventh.json

For each question, its nouns (WordNet lemmas after its own morphology, stop words and the
speakers' names left out) give the categories; a category that covers more than ``--generic`` of
the conversation's turns ("thing", "time", "person") is dropped, so only specific ones count. For
each candidate turn: how many of its nouns fall under a category (not the category's own word,
which the lexical list already matches), as a count, its log and "any", each also minus the
question's best. It also reports how often an evidence candidate names a member against the
other candidates, per category of question. They join the default second stage's 21 signals,
refitted per fold (pairwise, L2 0.001, leave one conversation out) and paired with the default,
as the tenth pass's rows. ``-head`` rows take the categories only from the noun a list question
asks for ("What kind of art", "Which cities", "What are Joanna's hobbies").
WordNet 3.0 comes from Debian's ``wordnet-base`` (bench/corpora.py), read here directly.
"""

from __future__ import annotations

import argparse
import functools
import json
import pickle
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpora import WORDNET_DIR
from locomo_static_vectors import STOP, body_of, held_out_rows, speaker_names

_RULES = (
    ("ses", "s"),
    ("xes", "x"),
    ("zes", "z"),
    ("ches", "ch"),
    ("shes", "sh"),
    ("men", "man"),
    ("ies", "y"),
    ("s", ""),
)


SENSES = 2


class Nouns:
    """WordNet 3.0's nouns: each lemma's synsets and each synset's hypernyms (class and instance)."""

    def __init__(self, root: Path = WORDNET_DIR) -> None:
        self.index: dict[str, list[int]] = {}
        with open(root / "index.noun", encoding="latin-1") as fh:
            for line in fh:
                if line.startswith("  "):
                    continue
                f = line.split()
                n_ptr = int(f[3])
                n_syn = int(f[2])
                self.index[f[0]] = [int(o) for o in f[6 + n_ptr : 6 + n_ptr + n_syn]]
        self.parents: dict[int, list[int]] = {}
        with open(root / "data.noun", encoding="latin-1") as fh:
            for line in fh:
                if line.startswith("  "):
                    continue
                f = line.partition(" | ")[0].split()
                at = 4 + 2 * int(f[3], 16)
                n_ptr = int(f[at])
                ptrs = f[at + 1 : at + 1 + 4 * n_ptr]
                self.parents[int(f[0])] = [int(ptrs[i + 1]) for i in range(0, len(ptrs), 4) if ptrs[i] in ("@", "@i")]
        self.exceptions: dict[str, str] = {}
        with open(root / "noun.exc", encoding="latin-1") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 2:
                    self.exceptions[parts[0]] = parts[1]

    def lemma(self, word: str) -> str | None:
        """The word's noun lemma (WordNet's morphology), or None when it is no noun."""
        w = word.lower()
        if w in self.exceptions:
            return self.exceptions[w]
        if w in self.index:
            return w
        for suffix, repl in _RULES:
            if w.endswith(suffix) and (base := w[: len(w) - len(suffix)] + repl) in self.index:
                return base
        return None

    @functools.cache  # noqa: B019  # one instance per run
    def ancestors(self, synset: int) -> frozenset[int]:
        out: set[int] = set()
        for p in self.parents.get(synset, ()):
            out.add(p)
            out |= self.ancestors(p)
        return frozenset(out)

    def senses(self, lemma: str) -> list[int]:
        """The lemma's most frequent senses (WordNet lists them by frequency): rarer ones make a
        cat a CAT scan, under "activity"."""
        return self.index.get(lemma, [])[:SENSES]

    def under(self, lemma: str) -> frozenset[int]:
        """Every synset one of the lemma's ``senses`` is, or falls under."""
        out: set[int] = set()
        for s in self.senses(lemma):
            out.add(s)
            out |= self.ancestors(s)
        return frozenset(out)


def words(text: str, names: set[str]) -> list[str]:
    found = re.findall(r"[A-Za-z][A-Za-z'-]+", text)
    return [w.lower() for w in found if len(w) >= 3 and w.lower() not in STOP and w.lower() not in names]


def noun_lemmas(text: str, names: set[str], nouns: Nouns) -> set[str]:
    return {lem for w in words(text, names) if (lem := nouns.lemma(w)) is not None}


_HEAD = re.compile(r"^(?:what|which)\s+(?:kinds?\s+of\s+|types?\s+of\s+|sorts?\s+of\s+)?(?:(\w+)\s+)?(\w+)", re.I)
_ARE = re.compile(r"^what\s+(?:are|were)\s+(?:the\s+)?(?:names\s+of\s+)?(?:\w+'s\s+)?(\w+)", re.I)
_NOT_HEADS = frozenset(
    ["kind", "kinds", "type", "types", "sort", "does", "did", "do", "is", "are", "was", "were", "has", "have"]
)


def head_lemmas(question: str, names: set[str], nouns: Nouns) -> set[str]:
    """The category a list question asks for: the noun(s) right after "What"/"Which" ("What
    kind of art", "Which cities") or "What are X's" ("What are Joanna's hobbies")."""
    m = _ARE.match(question) or _HEAD.match(question)
    heads = [g.lower() for g in (m.groups() if m else ()) if g]
    return {lem for h in heads if h not in names and h not in _NOT_HEADS and (lem := nouns.lemma(h)) is not None}


@dataclass
class Inputs:
    """What every variant reads: WordNet, ``build``'s texts and candidates, and each turn's nouns
    with the synsets they fall under (loaded and analysed once for all the variants)."""

    nouns: Nouns
    texts: dict[str, Any]
    saved: dict[str, Any]
    names: set[str]
    turn_lemmas: dict[str, list[set[str]]]
    turn_under: dict[str, list[dict[str, frozenset[int]]]]


def load_inputs(work: Path) -> Inputs:
    nouns = Nouns()
    texts = json.loads((work / "texts.json").read_text())
    with (work / "candidates.pkl").open("rb") as f:
        saved = pickle.load(f)  # written by locomo_static_vectors.py build
    names = speaker_names(texts["turns"])
    turn_lemmas = {c: [noun_lemmas(body_of(t), names, nouns) for t in turns] for c, turns in texts["turns"].items()}
    turn_under = {c: [{lem: nouns.under(lem) for lem in ls} for ls in rows] for c, rows in turn_lemmas.items()}
    return Inputs(nouns, texts, saved, names, turn_lemmas, turn_under)


def signals(inputs: Inputs, generic: float, head_only: bool = False, rare: float = 1.0) -> dict[str, Any]:
    """Per question id, the candidates' taxonomy signals (rows in candidate order)."""
    nouns, texts, saved, names = inputs.nouns, inputs.texts, inputs.saved, inputs.names
    turn_lemmas, turn_under = inputs.turn_lemmas, inputs.turn_under
    # A member counts only when it is rare in its conversation (``rare``: the largest share of
    # turns it may appear in): "pottery" or "violin", not "work", "help" or "care", which
    # WordNet also files under "activity".
    common: dict[str, set[str]] = {}
    for c, rows in turn_lemmas.items():
        df: dict[str, int] = {}
        for ls in rows:
            for lem in ls:
                df[lem] = df.get(lem, 0) + 1
        common[c] = {lem for lem, k in df.items() if k > rare * len(rows)}
    out: dict[str, np.ndarray] = {}
    kept_categories: dict[str, list[str]] = {}
    category_of = {q: c for c, qs in saved["dataset"].query_sets.items() for q in qs}
    rates: dict[str, dict[str, list[int]]] = {}
    for q in saved["queries"]:
        conv = q.agent if isinstance(q.agent, str) else q.agent.name
        categories = []
        asked = texts["questions"][q.qid]
        for lem in head_lemmas(asked, names, nouns) if head_only else noun_lemmas(asked, names, nouns):
            synsets = set(nouns.index.get(lem, ()))  # every sense: "instruments" reaches a violin by its third
            covered = sum(1 for row in turn_under[conv] if any(u & synsets for w, u in row.items() if w != lem))
            if covered <= generic * len(turn_under[conv]):
                categories.append((lem, synsets))
        kept_categories[q.qid] = [c for c, _ in categories]
        counts = []
        for c in q.cands:
            row = turn_under[conv][int(c.ref.split(":")[1]) - 1]
            hits = {
                w for w, u in row.items() for cat, syn in categories if w != cat and w not in common[conv] and u & syn
            }
            counts.append(len(hits))
        a = np.array(counts, dtype=np.float64)
        cols = [a, np.log1p(a), (a > 0).astype(np.float64)]
        out[q.qid] = np.stack(cols + [c - c.max() for c in cols], axis=1)
        if categories:  # how often an evidence turn names a member, against the other candidates
            relevant = saved["dataset"].qrels[q.qid]
            for c, n in zip(q.cands, counts, strict=True):
                kind = "evidence" if saved["doc_ids"][conv][int(c.ref.split(":")[1]) - 1] in relevant else "other"
                tally = rates.setdefault(category_of.get(q.qid, "?"), {}).setdefault(kind, [0, 0])
                tally[0] += n > 0
                tally[1] += 1
    hit_rates = {
        cat: {kind: round(hit / total, 3) for kind, (hit, total) in kinds.items()} for cat, kinds in rates.items()
    }
    return {"signals": out, "categories": kept_categories, "hit_rates": hit_rates}


def main(argv: Iterable[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--work", type=Path, required=True, help="locomo_static_vectors.py build's directory")
    ap.add_argument("--generic", default="0.05,0.1,0.2", help="largest share of turns a category may cover (list)")
    ap.add_argument("--rare", default="", help="-head rows, any share: members in at most this share of turns")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(list(argv) if argv is not None else None)
    sets: dict[str, Any] = {"default": None}
    shown: dict[str, Any] = {}
    variants = [(h, g, 1.0) for h in (False, True) for g in (float(x) for x in args.generic.split(","))]
    variants += [(True, 1.0, float(r)) for r in args.rare.split(",") if r]
    inputs = load_inputs(args.work)
    for head_only, g, rare in variants:
        found = signals(inputs, g, head_only, rare)
        label = f"taxonomy{'-head' if head_only else ''}<={g}" + (f",members<={rare}" if rare < 1 else "")
        sets[label] = lambda q, s=found["signals"]: s[q.qid]
        with_any = sum(1 for cats in found["categories"].values() if cats)
        examples = dict(list(found["categories"].items())[:15])
        shown[label] = {"questions_with_a_category": with_any, "examples": examples, "hit_rates": found["hit_rates"]}
        print(f"{label}: {with_any} questions keep a category; hit rates {found['hit_rates']}", file=sys.stderr)
    report = held_out_rows(args.work, sets)
    report["categories"] = shown
    report["command"] = "python bench/locomo_taxonomy.py " + " ".join(sys.argv[1:])
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
