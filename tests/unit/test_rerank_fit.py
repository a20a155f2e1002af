"""Fitting recall's second stage (bench/rerank_fit.py): the logistic fit, pairs, and the pool it
sees, on hand-made data (no embedder, no dataset)."""

from __future__ import annotations

import numpy as np
import pytest

from memstream.api.query.recall import rerank
from tests.support.bench import REPO, bench_module
from tests.unit.test_locomo_dev import TURNS

rf = bench_module("rerank_fit", REPO / "bench" / "rerank_fit.py")
ld = bench_module("locomo_dev", REPO / "bench" / "locomo_dev.py")
N = len(rerank.FEATURES)


def _query(qid: str, conv: str, rng: np.random.Generator, informative: int, shift: float = 2.0) -> object:
    """Twenty candidates with noise features; the evidence turns (the first three) are higher
    on feature ``informative`` only, by ``shift`` standard deviations."""
    x = rng.normal(size=(20, N))
    y = np.zeros(20)
    y[:3] = 1.0
    x[:3, informative] += shift
    return rf.Query(qid, conv, [], x, y, None)


def test_logistic_recovers_the_sign_of_an_informative_feature() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2000, 3))
    y = (x[:, 1] - 0.5 * x[:, 2] + rng.normal(scale=0.5, size=2000) > 0).astype(float)
    w = rf.logistic(x, y, l2=0.001, bias=True)
    assert w.shape == (3,)
    assert w[1] > 1.0 and w[2] < -0.3 and abs(w[0]) < 0.3


@pytest.mark.parametrize("kind", ["pointwise", "pairwise"])
def test_fit_weighs_the_feature_that_separates_evidence(kind: str) -> None:
    rng = np.random.default_rng(5)
    informative = rerank.FEATURES.index("previous_cosine")
    qs = [_query(f"q{i}", f"c{i % 3}", rng, informative) for i in range(40)]
    model = rf.fit(qs, kind, 0.001)
    weights = np.abs(model.weights)
    assert int(np.argmax(weights)) == informative
    # and it ranks a fresh question's evidence first, when that feature sets it well apart
    fresh = _query("new", "c9", rng, informative, shift=8.0)
    scores = [model.score(row) for row in fresh.x]
    assert set(np.argsort(scores)[::-1][:3]) == {0, 1, 2}


def test_fit_skips_questions_the_second_stage_does_not_run_on() -> None:
    rng = np.random.default_rng(8)
    good = [_query(f"q{i}", "c", rng, 0) for i in range(20)]
    bad = [_query(f"b{i}", "c", rng, 1) for i in range(20)]
    for q in bad:
        q.applies = False  # their labels point the other way; they must not count
    model = rf.fit(good + bad, "pairwise", 0.001)
    assert int(np.argmax(np.abs(model.weights))) == 0


def test_pool_of_fuses_each_list_to_the_pool_depth_with_its_signals() -> None:
    from tests.unit.test_locomo_dev import agent, lists_for

    ag = agent()
    ls = lists_for(ag, "What did Caroline make in pottery", np.array([1, 0.2, 0.9, 0, 0, 0, 1.5], dtype=np.float32))
    cands, sig = ld.pool_of(ag, ls, 30)
    refs = {c.ref for c in cands}
    assert refs == {r for r, _ in (*sig.vector, *sig.lexical)}
    assert len(sig.vector) == len(ag.doc_ids)  # six turns: the whole conversation fits in the pool
    assert sig.speakers == {"mem:1", "mem:3", "mem:5"}  # Caroline's turns
    assert sig.adjacency["mem:1"] == (None, "mem:2") and sig.adjacency["mem:6"] == ("mem:5", None)
    assert rerank.conversational(sig.content, sig.content)
    rows = rerank.feature_rows(cands, sig)
    assert all(len(r) == N for r in rows)


def test_the_replicas_default_is_the_second_stage_on_turns_and_the_first_stage_elsewhere() -> None:
    from tests.unit.test_locomo_dev import agent, lists_for

    ag = agent()
    ls = lists_for(ag, "pottery vase sunrise", np.array([1, 0.2, 0.9, 0.5, 0, 0, 1.5], dtype=np.float32))
    words_only = rerank.Model(tuple(1.0 if f == "words" else 0.0 for f in rerank.FEATURES))
    ranked = ld.second_stage(words_only)(ag, ls)
    lengths = [len(ag.texts[int(r.split(":")[1]) - 1].split()) for r in ranked]
    assert lengths == sorted(lengths, reverse=True)  # turns: ordered by the model alone
    notes = ld.Agent(ag.name, ag.doc_ids, ag.vectors, ag.lexical, [t.split(": ", 1)[1] for t in ag.texts])
    assert ld.second_stage(words_only)(notes, ls) == ld.VARIANTS["first-stage"](notes, ls)


def test_the_extra_signals_read_the_question_and_the_stored_turns() -> None:
    from memstream.api.query.recall.fusion import Candidate

    content: dict[str, str | None] = {
        "mem:1": "[8 May, 2023] Caroline: I joined the Pride parade in Boston",
        "mem:2": "[8 May, 2023] Melanie: Boston sounds fun",
        "mem:3": "[9 June, 2023] Melanie: my kids painted",
        "mem:4": "[9 June, 2023] Caroline: so cute",
    }
    cands = [Candidate(ref) for ref in content]
    cue = rf.cue_rows("What did Caroline see at the Pride parade in Boston in May?", cands, content)
    # Caroline and Melanie are the speakers and May a month: the proper nouns left are Pride, Boston
    assert cue["entity"] == [1.0, 0.5, 0.0, 0.0]
    assert cue["session_share"] == [0.5, 0.5, 0.5, 0.5]
    cue = rf.cue_rows("what happened", cands[:3], content)
    assert cue["entity"] == [0.0, 0.0, 0.0]
    assert cue["session_share"] == pytest.approx([2 / 3, 2 / 3, 1 / 3])
    # a guess about a named person: that person's turns; a plain question about them: none
    assert cue["guess_speaker"] == [0.0, 0.0, 0.0]
    assert rf.cue_rows("Would Melanie likely enjoy painting?", cands, content)["guess_speaker"] == [0, 1, 1, 0]
    assert rf.cue_rows("What did Melanie paint?", cands, content)["guess_speaker"] == [0, 0, 0, 0]


def test_cluster_is_each_candidates_mean_cosine_to_the_others_at_the_top() -> None:
    from memstream.api.query.recall.fusion import Candidate
    from tests.unit.test_locomo_dev import agent

    ag = agent()
    cands = [Candidate(f"mem:{i}") for i in (1, 2, 3)]
    got = rf.cluster(ag, cands, top=2)
    v = ag.vectors[[0, 1, 2]]
    v = v / np.linalg.norm(v, axis=1, keepdims=True)
    assert got == pytest.approx([v[0] @ v[1], v[1] @ v[0], (v[2] @ v[0] + v[2] @ v[1]) / 2])


def test_expanded_joins_the_first_candidates_neighbours_with_their_read_cosines() -> None:
    from tests.unit.test_locomo_dev import agent, lists_for

    ag = agent()
    ls = lists_for(ag, "What did Caroline make in pottery", np.array([1, 0.2, 0.9, 0, 0, 0, 1.5], dtype=np.float32))
    cands, sig = ld.pool_of(ag, ls, 1, read=True)  # one row of each list: the rest are outside
    assert sig.read is not None and not {r for r, _ in sig.vector} & sig.read.keys()
    wide, ws = ld.expanded(ag, ls, cands, sig, None)
    have = {c.ref for c in cands}
    joined = wide[len(cands) :]
    assert joined
    # every candidate's neighbours that were not candidates, once each, with its exact cosine
    around = {n for c in cands for n in sig.adjacency[c.ref] if n is not None}
    assert len(joined) == len({c.ref for c in joined})
    assert {c.ref for c in joined} == around - have
    for c in joined:
        p = int(c.ref.split(":")[1])
        assert c.cosine == pytest.approx(float(ls.cos[p - 1])) and ws.read is not None
        assert ws.read[c.ref] == c.cosine and ws.content[c.ref] == TURNS[p - 1]
        row = dict(zip(rerank.FEATURES, rerank.feature_rows([c], ws)[0], strict=True))
        assert row["cosine"] == pytest.approx(max(0.0, c.cosine)) and row["vector_rr"] == row["lexical_rr"] == 0.0
    # the first candidate's neighbours only, and without reads nothing is read
    top, _ = ld.expanded(ag, ls, cands, sig, 1)
    assert {c.ref for c in top[len(cands) :]} == {n for n in sig.adjacency[cands[0].ref] if n is not None} - have
    assert ld.pool_of(ag, ls, 1)[1].read is None


def test_spoken_joins_the_named_speakers_nearest_turns_that_are_not_candidates() -> None:
    from tests.unit.test_locomo_dev import agent, lists_for

    ag = agent()
    # the question is nearest Melanie's turn 6, then Caroline's 5, 3, 1; it names Caroline
    qvec = np.array([0.1, 0, 0.5, 0, 0.8, 1.0, 0.2], dtype=np.float32)
    ls = lists_for(ag, "Where did Caroline go camping", qvec)
    cands, sig = ld.pool_of(ag, ls, 1, read=True)
    have = {c.ref for c in cands}
    wide, ws = ld.spoken(ag, ls, cands, sig, 2)
    joined = [c.ref for c in wide[len(cands) :]]
    caroline = [f"mem:{p}" for p in (5, 3, 1) if f"mem:{p}" not in have]
    assert joined == caroline[:2]  # Caroline's turns only, nearest first, none twice
    assert ws.read is not None and all(ws.read[r] == pytest.approx(float(ls.cos[int(r[4:]) - 1])) for r in joined)
    assert set(joined) <= ws.speakers
    # a question naming no speaker, or no rows asked for: the pool as it was
    plain = lists_for(ag, "where was the meteor shower", qvec)
    c2, s2 = ld.pool_of(ag, plain, 1, read=True)
    assert ld.spoken(ag, plain, c2, s2, 2) == (c2, s2)
    assert ld.spoken(ag, ls, cands, sig, 0) == (cands, sig)


def test_where_places_each_evidence_turn_in_the_top_lower_in_the_pool_or_outside(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memstream.api.query.recall.fusion import Candidate
    from tests.unit.test_locomo_dev import agent

    ag = agent()
    # candidates mem:1..4 (mem:5, mem:6 outside); the model puts mem:4 first on its one feature
    cands = [Candidate(f"mem:{i}", cosine=0.5) for i in (1, 2, 3, 4)]
    x = np.zeros((4, N))
    x[:, 0] = [0.0, 0.1, 0.2, 1.0]
    q = rf.Query("q1", "c1", cands, x, np.zeros(4), ag)
    ds = rf.Dataset({}, {"multi-hop": {"q1": "?"}}, {"q1": {"D1:4": 1, "D1:6": 1, "D1:2": 0}})
    model = rerank.Model(tuple(1.0 if i == 0 else 0.0 for i in range(N)))
    assert rf.where([q], ds, model) == {"multi-hop/c1": {"top": 1, "pool": 0, "outside": 1}}
    # with room for one row only, mem:4 is it; a lower evidence turn stays in the pool
    monkeypatch.setattr(rf, "K", 1)
    ds.qrels["q1"]["D1:1"] = 1
    assert rf.where([q], ds, model) == {"multi-hop/c1": {"top": 1, "pool": 1, "outside": 1}}
