"""The recall-evaluation harness's own arithmetic: metrics against hand-computed values, reading
ascending recall answers from the tail, the committed datasets, the HTTP client against a mock
transport, and the dev/test halves. No servers. Loading qrels and datasets written to a temporary
directory, and the agent-notes build written out: tests/system/test_eval_recall_files.py."""

from __future__ import annotations

import json
import math

import httpx
import pytest

from tests.support.bench import REPO, bench_module

er = bench_module("eval_recall", REPO / "bench" / "eval_recall.py")


def log2(x: float) -> float:
    return math.log2(x)


# -- NDCG@10 ------------------------------------------------------------------------------------


def test_ndcg_single_relevant_at_each_rank():
    judg = {"d": 1}
    assert er.ndcg_at_k(["d", "x", "y"], judg) == pytest.approx(1.0)
    assert er.ndcg_at_k(["x", "d"], judg) == pytest.approx(1 / log2(3))  # 0.6309
    assert er.ndcg_at_k(["a", "b", "d"], judg) == pytest.approx(0.5)  # 1/log2(4)
    ten = [f"x{i}" for i in range(9)] + ["d"]
    assert er.ndcg_at_k(ten, judg) == pytest.approx(1 / log2(11))  # rank 10 still counts
    assert er.ndcg_at_k([*ten[:9], "y", "d"], judg) == 0.0  # rank 11 does not
    assert er.ndcg_at_k([], judg) == 0.0


def test_ndcg_graded_hand_computed():
    # judgments a=3, b=2, c=1, z=0 (judged non-relevant), ranking [b, z, a, q]
    judg = {"a": 3, "b": 2, "c": 1, "z": 0}
    dcg = 2 / log2(2) + 0 / log2(3) + 3 / log2(4) + 0 / log2(5)  # 2 + 1.5 = 3.5
    idcg = 3 / log2(2) + 2 / log2(3) + 1 / log2(4)  # 3 + 1.26186 + 0.5 = 4.76186
    assert er.ndcg_at_k(["b", "z", "a", "q"], judg) == pytest.approx(dcg / idcg)
    assert er.ndcg_at_k(["b", "z", "a", "q"], judg) == pytest.approx(0.735007, abs=1e-6)


def test_ndcg_ideal_uses_all_relevant_and_caps_at_k():
    judg = {f"r{i}": 1 for i in range(12)}  # 12 relevant, only 10 fit
    assert er.ndcg_at_k([f"r{i}" for i in range(10)], judg) == pytest.approx(1.0)
    two = {"a": 1, "b": 1}
    assert er.ndcg_at_k(["a"], two) == pytest.approx(1 / (1 + 1 / log2(3)))  # 0.6131


def test_ndcg_no_relevant_is_zero_and_duplicates_do_not_count_twice():
    assert er.ndcg_at_k(["a", "b"], {"a": 0}) == 0.0
    assert er.ndcg_at_k(["a", "b"], {}) == 0.0
    judg = {"a": 1, "b": 1}
    assert er.ndcg_at_k(["a", "a", "b"], judg) == pytest.approx(1.0)  # dedup: a@1, b@2


def test_negative_grades_are_not_relevant():
    assert er.ndcg_at_k(["a"], {"a": -1, "b": 1}) == 0.0
    assert er.recall_at_k(["a"], {"a": -1, "b": 1}) == 0.0


# -- recall@10, MRR -----------------------------------------------------------------------------


def test_recall_at_10_hand_computed():
    judg = {"a": 1, "b": 2, "c": 1, "d": 0}
    assert er.recall_at_k(["a", "x", "c"], judg) == pytest.approx(2 / 3)
    assert er.recall_at_k(["x"] * 3, judg) == 0.0
    ranked = [f"x{i}" for i in range(10)] + ["a", "b", "c"]
    assert er.recall_at_k(ranked, judg) == 0.0  # past the cut-off
    assert er.recall_at_k(["b", "a", "c"], judg) == 1.0
    # BEIR's definition: the denominator is all relevant documents, even past k
    many = {f"r{i}": 1 for i in range(20)}
    assert er.recall_at_k([f"r{i}" for i in range(10)], many) == pytest.approx(0.5)
    assert er.recall_at_k(["a"], {}) == 0.0


def test_mrr():
    judg = {"a": 1}
    assert er.mrr_at_k(["x", "y", "a"], judg) == pytest.approx(1 / 3)
    assert er.mrr_at_k([f"x{i}" for i in range(10)] + ["a"], judg) == 0.0
    assert er.mrr_at_k(["x", "x", "a"], judg) == pytest.approx(1 / 2)  # a repeated row counts once


def test_evaluate_means_and_missing_queries_score_zero():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}}
    runs = {"q1": ["a"], "q2": ["x", "b"]}  # q3 never answered
    res = er.evaluate(runs, qrels, ["q1", "q2", "q3"])
    assert res["queries"] == 3
    assert res["ndcg@10"] == pytest.approx(round((1 + 1 / log2(3) + 0) / 3, 4))
    assert res["recall@10"] == pytest.approx(round(2 / 3, 4))
    assert res["mrr@10"] == pytest.approx(round(1.5 / 3, 4))
    assert er.evaluate({}, qrels, [])["queries"] == 0


# -- reading ascending answers from the tail ------------------------------------------------------


def test_ranked_ids_reads_best_last():
    msgs = [
        {"ref": "mem:3", "id": "worst", "content": "..."},
        {"ref": "mem:2", "id": "middle"},
        {"ref": "mem:1", "id": "best"},
    ]
    assert er.ranked_ids(msgs) == ["best", "middle", "worst"]
    judg = {"best": 1}
    assert er.ndcg_at_k(er.ranked_ids(msgs), judg) == pytest.approx(1.0)
    # reading from the head would have put it at rank 3
    assert er.ndcg_at_k([m["id"] for m in msgs], judg) == pytest.approx(0.5)


def test_ranked_ids_tail_cut_keeps_the_best_ten():
    # 12 rows ascending: rows 0..11, the best is the last; the top 10 are rows 11..2
    msgs = [{"ref": f"mem:{i}", "id": f"d{i}"} for i in range(12)]
    ranked = er.ranked_ids(msgs)
    assert ranked[:10] == [f"d{i}" for i in range(11, 1, -1)]
    assert er.recall_at_k(ranked, {"d0": 1}) == 0.0  # the worst row is past the cut
    assert er.recall_at_k(ranked, {"d2": 1}) == 1.0
    # CPersona puts an extra reservation ("block") row at the low end: it falls past the cut
    cp = [{"ref": "mem:99", "id": "blk", "match_reason": {"signal": "block"}}, *msgs[2:]]
    assert er.ranked_ids(cp)[:10] == [f"d{i}" for i in range(11, 1, -1)]


def test_ranked_ids_falls_back_to_ref_and_dedups():
    msgs = [
        {"ref": "mem:7"},  # no id: looked up by ref
        {"ref": "mem:9", "id": ""},  # empty id: same
        {"ref": "mem:5", "id": "a"},
        {"ref": "ep:1"},  # unknown ref: kept as itself, never relevant
        {"ref": "mem:5", "id": "a"},  # duplicate of the best
    ]
    ranked = er.ranked_ids(msgs, {"mem:7": "seven", "mem:9": "nine"})
    assert ranked == ["a", "ep:1", "nine", "seven"]
    assert er.ranked_ids([{"content": "no id, no ref"}]) == []
    assert er.ranked_ids([]) == []


# -- the committed datasets ----------------------------------------------------------------------


def test_committed_dataset_is_consistent():
    ds = er.load_dataset()
    assert len(ds.docs) == 5000 and len(set(ds.docs.values())) == 5000  # distinct texts
    assert {n: len(q) for n, q in ds.query_sets.items()} == {"dictionary": 400, "examples": 400}
    for qs in ds.query_sets.values():
        for q in qs:
            rel = ds.relevant(q)
            assert len(rel) == 1 and rel <= ds.docs.keys()


def test_confirmation_collection_is_consistent_and_shares_no_query_with_wn_gcide():
    """docs/eval.md, "Confirmation collection": fusion was never chosen on it, so nothing it
    judges may have been judged by the collection fusion was chosen on."""
    confirm = er.load_dataset(er.DATA_DIR.parent / "wn-gcide-confirm")
    assert len(confirm.docs) == 12000 and len(set(confirm.docs.values())) == 12000
    assert {n: len(q) for n, q in confirm.query_sets.items()} == {"dictionary": 2000, "examples": 2000}
    for qs in confirm.query_sets.values():
        for q in qs:
            rel = confirm.relevant(q)
            assert len(rel) == 1 and rel <= confirm.docs.keys()
    synsets, words = er._judged(er.DATA_DIR)
    confirm_synsets, confirm_words = er._judged(er.DATA_DIR.parent / "wn-gcide-confirm")
    assert len(synsets) == 800 and len(confirm_synsets) > 3900  # two headwords may share a synset
    assert not synsets & confirm_synsets and not words & confirm_words
    original = {t for qs in er.load_dataset().query_sets.values() for t in qs.values()}
    assert not original & {t for qs in confirm.query_sets.values() for t in qs.values()}


# -- the memstream HTTP client, against a mock transport ----------------------------------------


def test_memstream_client_store_and_recall_shapes():
    seen: list[tuple[str, dict]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append((request.url.path, body))
        if request.url.path == "/v1/tools/store":
            return httpx.Response(200, json={"ok": True, "result": "stored", "id": 1})
        return httpx.Response(200, json={"messages": [{"ref": "mem:2", "id": "b"}, {"ref": "mem:1", "id": "a"}]})

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        assert er.memstream_store(client, "http://m")("a", "text a")["result"] == "stored"
        msgs = er.memstream_recall(client, "http://m")("what is a")
    assert seen[0] == ("/v1/tools/store", {"agent_id": er.AGENT, "content": "text a", "id": "a"})
    assert seen[1] == ("/v1/tools/recall", {"agent_id": er.AGENT, "query": "what is a", "limit": 10})
    assert er.ranked_ids(msgs) == ["a", "b"]


def test_memstream_client_reports_missing_recall_and_failures():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/recall"):
            return httpx.Response(404, json={"ok": False, "error": "Unknown tool: recall"})
        return httpx.Response(400, json={"ok": False, "error": "bad"})

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(er.RecallUnavailable):
            er.memstream_recall(client, "http://m")("q")
        assert er.memstream_store(client, "http://m")("a", "t")["result"] == "http_400"


def test_run_queries_and_store_all_with_fakes():
    ds = er.Dataset(
        docs={"a": "alpha", "b": "beta"},
        query_sets={"s": {"q1": "find alpha", "q2": "find beta", "q3": "broken"}},
        qrels={"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"a": 1}},
    )
    stats, refs = er.store_all(lambda d, t: {"ok": True, "result": "stored", "id": ord(d)}, ds.docs, 2, "t")
    assert stats["outcomes"] == {"stored": 2} and refs == {"mem:97": "a", "mem:98": "b"}

    def recall(q: str) -> list[dict]:
        if q == "broken":
            raise RuntimeError("boom")
        target = "a" if "alpha" in q else "b"
        other = "b" if target == "a" else "a"
        return [{"ref": "x", "id": target}, {"ref": "y", "id": other}]  # relevant one is LAST-but-one

    res = er.run_queries(recall, ds)["s"]
    assert res["queries"] == 3 and res["errors"] == 1
    assert res["ndcg@10"] == pytest.approx(round(2 * (1 / log2(3)) / 3, 4))
    assert res["mean_rows"] == 2.0


def test_markdown_table_shape():
    results = [
        {
            "system": "memstream",
            "mode": "dense",
            "query_sets": {
                "s": {"ndcg@10": 0.5, "recall@10": 0.75, "mrr@10": 0.4, "mean_rows": 9.5, "recall_ms_p50": 12.0}
            },
        },
        {
            "system": "reference",
            "mode": "exact-cosine",
            "query_sets": {"s": {"ndcg@10": 0.6, "recall@10": 0.8, "mrr@10": 0.5}},
        },
    ]
    table = er.markdown_table(results, ["s"]).splitlines()
    assert table[0].startswith("| system | mode | s NDCG@10 | s R@10 | s MRR@10 |")
    assert table[2] == "| memstream | dense | 0.500 | 0.750 | 0.400 | 9.5 | 12 |"
    assert table[3].endswith("| – | – |")


def test_evaluate_standard_error_and_per_query():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    res = er.evaluate({"q1": ["a"], "q2": ["x"]}, qrels, ["q1", "q2"], per_query=True)
    assert res["per_query_ndcg@10"] == {"q1": 1.0, "q2": 0.0}
    assert res["ndcg@10_se"] == pytest.approx(round(math.sqrt(0.5) / math.sqrt(2), 4))  # stdev([1, 0]) / sqrt(2)
    assert "per_query_ndcg@10" not in er.evaluate({}, qrels, ["q1"])


def test_paired_diff_and_report():
    a = {"q1": 1.0, "q2": 0.5, "q3": 0.0}
    b = {"q1": 0.5, "q2": 0.5, "q4": 1.0}  # q3, q4 not shared
    d = er.paired_diff(a, b)
    assert d == {"mean": 0.25, "se": pytest.approx(0.25), "queries": 2}  # diffs [0.5, 0]
    assert er.paired_diff({}, b) == {"mean": 0.0, "se": 0.0, "queries": 0}
    key = "per_query_ndcg@10"
    results = [
        {"system": "cpersona", "mode": "rrf", "query_sets": {"s": {key: b}}},
        {"system": "memstream", "mode": "rrf", "query_sets": {"s": {key: a}}},
    ]
    rep = er.paired_report(results, ("cpersona", "rrf"))
    assert rep == {"memstream/rrf": {"s": d}}
    assert er.paired_report(results, ("nobody", "x")) == {}


# -- dev / test halves ----------------------------------------------------------------------------


def test_split_halves_is_deterministic_disjoint_and_seeded():
    qids = [f"q{i:03d}" for i in range(101)]
    dev, test = er.split_halves(qids, seed=1)
    assert len(dev) == 50 and len(test) == 51 and not set(dev) & set(test) and set(dev) | set(test) == set(qids)
    assert dev == sorted(dev) and test == sorted(test)  # input order kept
    assert er.split_halves(list(reversed(qids)), seed=1)[0] == list(reversed(dev))  # membership: ids + seed only
    assert er.split_halves(qids, seed=2)[0] != dev
    assert er.split_halves([], seed=1) == ([], [])


def test_paired_report_per_half_and_baseline_choice():
    key = "per_query_ndcg@10"
    a = {"q1": 1.0, "q2": 0.5, "q3": 0.0, "q4": 1.0}
    b = {"q1": 0.5, "q2": 0.5, "q3": 0.5, "q4": 0.0}
    results = [
        {"system": "memstream", "mode": "dense", "query_sets": {"s": {key: b}}},
        {"system": "memstream", "mode": "rrf", "query_sets": {"s": {key: a}}},
    ]
    half_of = {"q1": "dev", "q2": "dev", "q3": "test", "q4": "test"}
    rep = er.paired_report(results, ("memstream", "dense"), half_of)["memstream/rrf"]["s"]
    assert rep["mean"] == pytest.approx(0.25) and rep["queries"] == 4
    assert rep["halves"]["dev"] == er.paired_diff({"q1": 1.0, "q2": 0.5}, b)  # +0.25
    assert rep["halves"]["test"] == er.paired_diff({"q3": 0.0, "q4": 1.0}, b)  # +0.25
    assert "halves" not in er.paired_report(results, ("memstream", "dense"))["memstream/rrf"]["s"]

    assert er.pick_baseline(results, None) == ("memstream", "dense")
    assert er.pick_baseline(results, "memstream/rrf") == ("memstream", "rrf")
    assert er.pick_baseline(results, "cpersona/rrf") is None
    with_cp = [{"system": "cpersona", "mode": "rsf", "query_sets": {}}, *results]
    assert er.pick_baseline(with_cp, None) == ("cpersona", "rsf")
    assert er.pick_baseline(results[1:], None) is None


def test_markdown_table_for_one_half():
    s = {
        "ndcg@10": 0.5,
        "recall@10": 0.75,
        "mrr@10": 0.4,
        "halves": {"test": {"ndcg@10": 0.25, "recall@10": 0.5, "mrr@10": 0.2}},
    }
    results = [{"system": "memstream", "mode": "rrf", "query_sets": {"s": s}}]
    assert (
        er.markdown_table(results, ["s"], "test").splitlines()[2]
        == "| memstream | rrf | 0.250 | 0.500 | 0.200 | – | – |"
    )
    assert er.markdown_table(results, ["s"], "dev").splitlines()[2] == "| memstream | rrf | – | – | – | – | – |"


def test_parse_args_split_and_modes():
    args = er.parse_args(
        ["--split", "dev", "--memstream-modes", "dense,rrf,rrf-classic", "--baseline", "memstream/dense"]
    )
    assert (args.split, args.split_seed, args.baseline) == ("dev", er.SPLIT_SEED, "memstream/dense")
    assert er.MEMSTREAM_MODES["rrf-classic"]["MEMSTREAM_RRF_EVIDENCE"] == "false"
    with pytest.raises(SystemExit):
        er.parse_args(["--split", "train"])


# -- the agent-notes collection (lexical-strong check) ---------------------------------------------


def test_agent_notes_queries_name_their_one_note():
    import re

    import agent_notes

    ds = er.load_dataset(REPO / "bench" / "eval_data" / "agent-notes")
    assert len(ds.docs) == 1200 and len(set(ds.docs.values())) == 1200
    assert {n: len(q) for n, q in ds.query_sets.items()} == {"ids": 200, "names": 200}
    people = [f"{f} {last}" for f in agent_notes.FIRST for last in agent_notes.LAST]
    for name, qs in ds.query_sets.items():
        for qid, text in qs.items():
            [doc] = ds.relevant(qid)
            if name == "ids":
                [ident] = re.findall(r"[A-Z]+-\d+", text)
                assert [d for d, t in ds.docs.items() if ident in t] == [doc], qid  # the target's alone
            else:
                [person] = [p for p in people if p in text]
                holders = [d for d, t in ds.docs.items() if t.startswith(person + " ")]
                assert doc in holders and len(holders) >= 2, qid  # the name alone does not decide
