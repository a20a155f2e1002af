"""The recall-evaluation harness on files written to a temporary directory: loading qrels (TREC
and BEIR) and datasets, subsetting, the dev/test halves of a loaded dataset, and the agent-notes
build written out equals the committed data. No servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.bench import REPO, bench_module

er = bench_module("eval_recall", REPO / "bench" / "eval_recall.py")


# -- qrels and dataset loading ----------------------------------------------------------------


def test_load_qrels_trec_and_beir(tmp_path: Path):
    trec = tmp_path / "qrels.txt"
    trec.write_text("# comment\nq1 0 d1 1\nq1 0 d2 2\n\nq2 0 d3 0\nq1 0 d1 3\n")
    assert er.load_qrels(trec) == {"q1": {"d1": 3, "d2": 2}, "q2": {"d3": 0}}  # last grade wins
    beir = tmp_path / "test.tsv"
    beir.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td9\t2\n")
    assert er.load_qrels(beir) == {"q1": {"d1": 1}, "q2": {"d9": 2}}
    bad = tmp_path / "bad.tsv"
    bad.write_text("q1 0 d1 1\nq1 d2\n")
    with pytest.raises(ValueError, match="3 or 4 columns"):
        er.load_qrels(bad)
    bad.write_text("q1 0 d1 1\nq1 0 d2 high\n")
    with pytest.raises(ValueError, match="not an integer"):
        er.load_qrels(bad)


def _write_dataset(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    docs = [{"id": f"doc{i}", "text": f"text {i}"} for i in range(10)]
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    queries = [
        {"id": "d1", "set": "dictionary", "text": "query one"},
        {"id": "d2", "set": "dictionary", "text": "query two"},
        {"id": "e1", "set": "examples", "text": "query three"},
        {"id": "e2", "set": "examples", "text": "no judgments"},
    ]
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (root / "qrels.tsv").write_text("d1\t0\tdoc9\t1\nd2\t0\tdoc8\t1\ne1\t0\tdoc7\t1\ne1\t0\tdoc0\t0\n")


def test_load_dataset_and_subset(tmp_path: Path):
    _write_dataset(tmp_path / "ds")
    ds = er.load_dataset(tmp_path / "ds")
    assert list(ds.docs)[:2] == ["doc0", "doc1"] and len(ds.docs) == 10
    assert {n: list(q) for n, q in ds.query_sets.items()} == {"dictionary": ["d1", "d2"], "examples": ["e1", "e2"]}
    assert ds.relevant("e1") == {"doc7"}
    assert set(ds.meta["sha256"]) == {"corpus.jsonl", "queries.jsonl", "qrels.tsv"}

    small = er.subset(ds, max_docs=4, max_queries=1)
    # one query per set (e2 has no relevant doc and is never kept), their answers first
    assert {n: list(q) for n, q in small.query_sets.items()} == {"dictionary": ["d1"], "examples": ["e1"]}
    assert set(small.docs) == {"doc9", "doc7", "doc0", "doc1"}
    assert small.qrels == {"d1": {"doc9": 1}, "e1": {"doc7": 1, "doc0": 0}}

    tight = er.subset(ds, max_docs=2)  # room for the answers of two queries only
    kept = [q for qs in tight.query_sets.values() for q in qs]
    assert len(tight.docs) == 2 and len(kept) == 2
    assert all(tight.relevant(q) <= set(tight.docs) for q in kept)

    assert er.subset(ds).docs == ds.docs  # no caps: everything (minus unanswerable queries)


# -- dev / test halves ----------------------------------------------------------------------------


def test_assign_halves_only_half_and_by_half(tmp_path: Path):
    _write_dataset(tmp_path / "ds")
    ds = er.assign_halves(er.load_dataset(tmp_path / "ds"), seed=1)
    for name, qs in ds.query_sets.items():
        dev, test = er.split_halves(qs, seed=1)
        assert {q for q in qs if ds.half_of[q] == "dev"} == set(dev), name
        assert {q for q in qs if ds.half_of[q] == "test"} == set(test), name
    dev_only = er.only_half(ds, "dev")
    assert all(dev_only.half_of[q] == "dev" for qs in dev_only.query_sets.values() for q in qs)
    assert sum(len(qs) for qs in dev_only.query_sets.values()) == 2 and dev_only.docs == ds.docs
    # the halves survive subsetting (they were fixed on the full sets)
    assert er.subset(ds, max_queries=1).half_of == ds.half_of
    with pytest.raises(ValueError, match="half must be"):
        er.only_half(ds, "train")
    with pytest.raises(ValueError, match="no halves"):
        er.only_half(er.load_dataset(tmp_path / "ds"), "dev")

    runs = {"d1": ["doc9"], "d2": ["doc0"], "e1": ["doc7"]}
    halves = er.by_half(runs, ds, ["d1", "d2", "e1"])
    for half, res in halves.items():
        part = [q for q in ("d1", "d2", "e1") if ds.half_of[q] == half]
        assert res == er.evaluate(runs, ds.qrels, part)


# -- the agent-notes collection (lexical-strong check) ---------------------------------------------


def test_agent_notes_build_is_deterministic_and_is_the_committed_data(tmp_path: Path):
    import agent_notes

    notes = agent_notes.build()
    assert notes == agent_notes.build(agent_notes.DEFAULT_SEED)
    assert agent_notes.build(agent_notes.DEFAULT_SEED + 1).corpus != notes.corpus
    agent_notes.write(notes, tmp_path / "an")
    committed = REPO / "bench" / "eval_data" / "agent-notes"
    for name in ("corpus.jsonl", "queries.ids.jsonl", "queries.names.jsonl", "qrels.tsv"):
        assert (tmp_path / "an" / name).read_bytes() == (committed / name).read_bytes(), name


# -- LoCoMo conversations -----------------------------------------------------------------------


def _write_locomo(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    conv = {
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_2_date_time": "9:00 am on 2 May, 2023",
        "session_2": [{"speaker": "Bo", "dia_id": "D2:1", "text": "I painted a sunrise."}],
        "session_1_date_time": "1:56 pm on 1 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi Bo!"},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "Look.", "blip_caption": "a photo of a dog"},
        ],
        "qa": [
            {"question": "What did Bo paint?", "answer": "a sunrise", "evidence": ["D2:1"], "category": 4},
            {"question": "Two at once?", "answer": "x", "evidence": ["D1:1; D2:1"], "category": 1},
            {"question": "Gone turn?", "answer": "x", "evidence": ["D9:9", "D"], "category": 2},
            {"question": "A false premise?", "answer": "", "evidence": [], "category": 5},
            {"question": "Why?", "answer": "x", "evidence": ["D1:2"], "category": 3},
        ],
    }
    (root / "conv-7.json").write_text(json.dumps(conv))
    (root / "conv-8.json").write_text(json.dumps({**conv, "qa": conv["qa"][:1]}))


def test_load_locomo_turns_questions_and_agents(tmp_path: Path):
    _write_locomo(tmp_path / "lc")
    ds = er.load_dataset(tmp_path / "lc")  # no qrels.tsv, conv-*.json: a LoCoMo folder
    assert ds.meta["task"] == "locomo" and ds.meta["conversations"] == ["conv-7", "conv-8"]
    # turns in session order (session_1 before session_2 whatever the file order), one doc each
    assert list(ds.docs)[:3] == ["conv-7/D1:1", "conv-7/D1:2", "conv-7/D2:1"]
    assert ds.docs["conv-7/D1:1"] == "[1:56 pm on 1 May, 2023] Ann: Hi Bo!"
    assert ds.docs["conv-7/D1:2"] == "[1:56 pm on 1 May, 2023] Bo: Look. [shares a photo: a photo of a dog]"
    assert len(ds.docs) == 6
    # categories 1-4 with a findable evidence turn; 5 and evidence naming no turn are not asked
    assert {n: list(q) for n, q in ds.query_sets.items()} == {
        "multi-hop": ["conv-7/q1"],
        "open-domain": ["conv-7/q4"],
        "single-hop": ["conv-7/q0", "conv-8/q0"],
    }
    assert ds.qrels["conv-7/q1"] == {"conv-7/D1:1": 1, "conv-7/D2:1": 1}  # "D1:1; D2:1" is two ids
    assert ds.agent_of["conv-7/q0"] == ds.agent_of["conv-7/D2:1"] == "locomo-conv-7"
    assert ds.agent_of["conv-8/q0"] == "locomo-conv-8"


def test_locomo_store_keeps_each_agents_order_and_recall_asks_its_agent(tmp_path: Path):
    _write_locomo(tmp_path / "lc")
    ds = er.load_dataset(tmp_path / "lc")
    seen: list[tuple[str, str]] = []

    def store(did: str, text: str, agent: str) -> dict:
        seen.append((agent, did))
        return {"ok": True, "result": "stored", "id": len(seen)}

    stats, refs = er.store_all(store, ds.docs, 8, "t", ds.agent_of)
    assert stats["outcomes"] == {"stored": 6} and len(refs) == 6
    for agent in ("locomo-conv-7", "locomo-conv-8"):
        assert [d for a, d in seen if a == agent] == [d for d in ds.docs if ds.agent_of[d] == agent]

    asked: list[str] = []

    def recall(query: str, agent: str) -> list[dict]:
        asked.append(agent)
        conv = agent.removeprefix("locomo-")
        return [{"id": f"{conv}/D1:1"}, {"id": f"{conv}/D2:1"}]  # best last

    sets = er.run_queries(recall, ds)
    assert sorted(asked) == sorted(ds.agent_of[q] for qs in ds.query_sets.values() for q in qs)
    assert sets["single-hop"]["recall@10"] == 1.0 and sets["single-hop"]["recall@5"] == 1.0
    assert sets["multi-hop"]["recall@10"] == 1.0 and sets["open-domain"]["recall@10"] == 0.0
    summary = er.locomo_summary({"query_sets": sets})
    assert summary["all"]["queries"] == 4 and summary["all"]["recall@10"] == 0.75
    table = er.locomo_table([{"system": "s", "mode": "m", "query_sets": sets}])
    assert "| s | m | 0.750 |" in table
