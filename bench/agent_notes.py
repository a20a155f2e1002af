"""A small synthetic agent-notes collection where lexical evidence matters (names, identifiers).

The WordNet/GCIDE collection (``bench/eval_data/wn-gcide``) has almost no rare tokens shared by
a query and its answer, so on it the lexical retriever is weak and fusion can only dilute the
dense one. Agent memories are different: they name people, tickets, accounts and decisions, and
a question that quotes such a name or identifier is answered by the one note that holds it,
however alike the notes read. This generator builds that case deterministically, so that a change
to recall fusion can be checked on both kinds of evidence (``docs/eval.md``, "Lexical-strong
check").

Two query sets, one relevant note per query:

* ``ids``: the question quotes an identifier of its note (a ticket, account, bug, ADR, invoice or
  feature flag) and is otherwise generic ("Any notes on OPS-4821?"). Many notes of the same kind
  read alike, so the embedding alone can hardly pick the right one.
* ``names``: the question names a person and paraphrases one fact about them ("How does Maria
  Kowalski like daily check-ins to be run?" for "Maria Kowalski prefers asynchronous written
  standups ..."). Every person has several notes and every fact is held by many people, so
  neither the name (lexical) nor the meaning (dense) is enough alone.

Usage::

    python bench/agent_notes.py --out bench/eval_data/agent-notes    # --seed 20261201

Output: ``corpus.jsonl``, ``queries.ids.jsonl``, ``queries.names.jsonl``, ``qrels.tsv`` (the format
``bench/eval_recall.py --data`` reads). Same seed, same bytes.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_SEED = 20261201
DEFAULT_OUT = Path(__file__).resolve().parent / "eval_data" / "agent-notes"

FIRST = (  # noqa: SIM905
    "Maria Jonas Aiko Tomasz Priya Lucas Fatima Oskar Elena Mateo Ingrid Kwame Sofia Dmitri Leila "
    "Hugo Chiara Rafael Anja Nikhil Yara Emil Beatriz Soren Amara Felix Noor Henrik Valentina Tariq "
    "Greta Marco Ines Pavel Zainab Jasper Olga Diego Hana Ruben"
).split()
LAST = (  # noqa: SIM905
    "Kowalski Lindqvist Tanaka Nowak Raman Ferreira Haddad Berg Petrova Alvarez Johansson Mensah "
    "Rossi Volkov Karimi Laurent Bianchi Costa Schmidt Iyer Okafor Nielsen Moreau Dahl Abara Keller "
    "Siddiqui Halvorsen Greco Mahmoud Fischer Conti Duarte Sokolov Yilmaz Brandt Ivanova Ortega Sato "
    "Vermeer"
).split()
CITIES = "Lisbon Warsaw Osaka Nairobi Toronto Bogota Tallinn Porto Krakow Accra Montreal Seville".split()  # noqa: SIM905
LANGS = "Rust Go Kotlin Elixir Haskell Scala Zig OCaml".split()  # noqa: SIM905
SERVICES = "payments-api checkout-web search-indexer billing-worker auth-gateway media-store".split()  # noqa: SIM905
COMPANIES = (  # noqa: SIM905
    "Acme Corp, Globex, Initech, Umbrella Health, Stark Logistics, Wayne Foods, Hooli, "
    "Vandelay Imports, Soylent Labs, Tyrell Systems, Cyberdyne Retail, Wonka Confectionery"
).split(", ")
MONTHS = "January February March April May June July August September October November December".split()  # noqa: SIM905
COMPONENTS = "upload dialog, PDF exporter, calendar sync, CSV importer, search bar, avatar cropper".split(", ")  # noqa: SIM905

# (note, question) about one person: the question paraphrases the note's fact, naming the person.
PERSON_FACTS: tuple[tuple[str, str], ...] = (
    (
        "{name} prefers asynchronous written standups to live video calls.",
        "How does {name} like daily check-ins to be run?",
    ),
    (
        "{name} is allergic to peanuts, so order nut-free catering for offsites.",
        "Any food restrictions for {name} when we plan team events?",
    ),
    (
        "{name} expects pull requests to be reviewed within one business day.",
        "How quickly does {name} want code review feedback?",
    ),
    ("{name} is on parental leave until the end of the quarter.", "When is {name} back from time off with the baby?"),
    (
        "{name} maintains the on-call rotation schedule for the platform team.",
        "What is {name} responsible for regarding pager shifts?",
    ),
    (
        "{name} wants design docs written in Markdown and kept in the repository wiki.",
        "Which format does {name} want for technical proposals?",
    ),
    ("{name} lives in {city} and works on local time.", "Where is {name} based?"),
    (
        "{name} is learning {lang} and asked for a mentor on the storage rewrite.",
        "Which programming language is {name} picking up?",
    ),
    (
        "{name} blocks mornings for focus work and declines meetings before 10am.",
        "When is it fine to schedule a call with {name}?",
    ),
    (
        "{name} approved the budget for two more GPU servers next quarter.",
        "Did {name} sign off on buying additional machine learning hardware?",
    ),
    (
        "{name} speaks fluent Japanese and can join the Tokyo customer calls.",
        "Can {name} help with clients in Japan?",
    ),
    (
        "{name} reported that the VPN drops every few hours on the office wifi.",
        "What network connectivity problem did {name} complain about?",
    ),
    (
        "{name} is the main contact for the security audit with the external firm.",
        "What role does {name} have in the compliance review?",
    ),
    (
        "{name} asked to be copied on every email about the pricing change.",
        "Does {name} want updates on the price increase?",
    ),
    (
        "{name} recommended Postgres over MongoDB for the new billing service.",
        "Which database did {name} suggest for invoicing?",
    ),
    (
        "{name} has a one-on-one with the CTO every other Thursday.",
        "How often does {name} meet the head of engineering?",
    ),
)

# (note, question) around one identifier {id}; the question quotes it and says little else.
ID_FACTS: tuple[tuple[str, str, str], ...] = (
    (
        "OPS",
        "Incident {id}: {service} returned HTTP 502 errors for {n} minutes after a deploy; {name} rolled it back.",
        "What happened in {id}?",
    ),
    (
        "AC",
        "Customer {company} (account {id}) needs SAML single sign-on before their renewal in {month}.",
        "What does account {id} need?",
    ),
    (
        "BUG",
        "Bug {id}: the {component} crashes on files over 2 GB; the workaround is a chunked upload.",
        "Is there a workaround for {id}?",
    ),
    (
        "ADR",
        "{id}: we chose event sourcing for the {service} ledger so that every change can be audited.",
        "What did {id} decide?",
    ),
    (
        "INV",
        "Invoice {id} for {company} was paid twice in {month}; {name} requested the refund.",
        "Any problem with invoice {id}?",
    ),
    (
        "FLAG",
        "Feature flag {id} turns on the new checkout flow for {n} percent of users.",
        "What does the flag {id} control?",
    ),
)


@dataclass(frozen=True)
class Notes:
    corpus: list[dict[str, str]]
    queries: dict[str, list[dict[str, str]]]  # set name -> records
    qrels: list[tuple[str, str]]  # (query id, doc id)


def build(
    seed: int = DEFAULT_SEED,
    people: int = 150,
    facts_per_person: int = 4,
    per_id_kind: int = 100,
    queries_per_set: int = 200,
) -> Notes:
    """The collection for ``seed``: pure, so tests can check it without touching the disk."""
    if people > len(FIRST) * len(LAST):
        raise ValueError(f"at most {len(FIRST) * len(LAST)} people")
    if facts_per_person > len(PERSON_FACTS):
        raise ValueError(f"at most {len(PERSON_FACTS)} facts per person")
    rng = random.Random(seed)
    pairs = [(f, ln) for f in FIRST for ln in LAST]
    names = [f"{f} {ln}" for f, ln in rng.sample(pairs, people)]

    notes: list[tuple[str, str, str, str]] = []  # (kind, text, question, doc id)
    for p, name in enumerate(names):
        for fact in sorted(rng.sample(range(len(PERSON_FACTS)), facts_per_person)):
            note, question = PERSON_FACTS[fact]
            slots = {"name": name, "city": rng.choice(CITIES), "lang": rng.choice(LANGS)}
            notes.append(("names", note.format(**slots), question.format(**slots), f"p{p:03d}-f{fact:02d}"))
    used: set[int] = set()
    for prefix, note, question in ID_FACTS:
        for i in range(per_id_kind):
            num = rng.randrange(1000, 99999)
            while num in used:  # every identifier's number is unique across kinds
                num = rng.randrange(1000, 99999)
            used.add(num)
            ident = f"{prefix}-{num}"
            slots = {
                "id": ident,
                "service": rng.choice(SERVICES),
                "company": rng.choice(COMPANIES),
                "month": rng.choice(MONTHS),
                "component": rng.choice(COMPONENTS),
                "name": rng.choice(names),
                "n": str(rng.randrange(5, 95)),
            }
            notes.append(("ids", note.format(**slots), question.format(**slots), f"{prefix.lower()}-{i:03d}"))

    rng.shuffle(notes)
    corpus = [{"id": did, "text": text} for _, text, _, did in notes]
    if len({r["text"] for r in corpus}) != len(corpus):
        raise ValueError("duplicate note text; change the seed or the pools")
    queries: dict[str, list[dict[str, str]]] = {}
    qrels: list[tuple[str, str]] = []
    for set_name in ("ids", "names"):
        pool = [n for n in notes if n[0] == set_name]
        chosen = rng.sample(pool, min(queries_per_set, len(pool)))
        recs = []
        for j, (_, _, question, did) in enumerate(chosen, 1):
            qid = f"{set_name[0]}{j:04d}"
            recs.append({"id": qid, "text": question})
            qrels.append((qid, did))
        queries[set_name] = recs
    return Notes(corpus, queries, qrels)


def write(notes: Notes, out: Path) -> dict[str, int]:
    """Write the files ``bench/eval_recall.py --data`` reads; returns record counts."""
    out.mkdir(parents=True, exist_ok=True)

    def jsonl(path: Path, records: Sequence[dict[str, str]]) -> None:
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")

    jsonl(out / "corpus.jsonl", notes.corpus)
    for set_name, recs in notes.queries.items():
        jsonl(out / f"queries.{set_name}.jsonl", recs)
    (out / "qrels.tsv").write_text("".join(f"{q} 0 {d} 1\n" for q, d in notes.qrels), encoding="utf-8")
    return {"docs": len(notes.corpus), **{k: len(v) for k, v in notes.queries.items()}}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = ap.parse_args(argv)
    print(json.dumps(write(build(args.seed), args.out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
