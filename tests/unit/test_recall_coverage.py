"""Query-time context for the second stage (api/query/recall/coverage.py): the share of the
question a turn holds with its neighbour, and run_recall handing the neighbours' text to it."""

from __future__ import annotations

import numpy as np
import pytest

from memstream.api.query.recall import coverage, rerank
from memstream.api.query.recall.fusion import Candidate
from memstream.api.query.recall.pipeline import RecallRequest, run_recall
from memstream.projections.lexical import LexicalProjection
from memstream.projections.lexical.text import query_tokens, tokens
from memstream.projections.scope import ScopeFilter
from tests.unit.test_recall_neighbours import DIM, Models, Opts, _stored, _vec


def _lexical(texts: list[str]) -> LexicalProjection:
    lex = LexicalProjection()
    for i, text in enumerate(texts, start=1):
        scope = {"agent_id": "a", "project_id": "", "channel": ""}
        lex.apply(i, {"type": "memory.stored", "scope": scope, "payload": {"id": i, "content": text}})
    return lex


def test_coverage_reads_which_query_words_each_row_holds_from_the_postings() -> None:
    texts = ["Caroline: the lake", "Caroline: the sunrise", "Melanie: the lake again", "Melanie: what did you paint?"]
    lex = _lexical(texts)
    cov = coverage.coverage_of(lex, "a", "Did Caroline paint the sunrise?", [f"mem:{i}" for i in range(1, 5)])
    words = query_tokens("Did Caroline paint the sunrise?")
    assert len(cov.idf) == len(words)
    # rarer words weigh more: "sunrise" (1 row of 4) over "Caroline" (2) over "the" (3)
    weight = dict(zip(words, cov.idf, strict=True))
    assert weight["sunris"] > weight["carolin"] > weight["the"] > 0
    total = sum(cov.idf)
    assert cov.share("mem:2") == pytest.approx((weight["carolin"] + weight["the"] + weight["sunris"]) / total)
    # the reply and the question together hold every word of the question
    assert cov.share("mem:2", "mem:4") == pytest.approx(1.0)
    assert cov.signals("mem:2", "mem:4", None) == pytest.approx((1.0, cov.share("mem:2")))
    assert cov.share(None) == cov.share("mem:99") == 0.0  # a row not read holds nothing
    # an agent without rows: nothing is held, and every word weighs as a word no row holds
    none = coverage.coverage_of(lex, "nobody", "Caroline sunrise", ["mem:1"])
    assert none.share("mem:1") == 0.0 and len(set(none.idf)) == 1


def test_coverage_equals_the_shares_of_the_texts_tokenised_again() -> None:
    texts = [f"Speaker{i % 3}: word{i % 7} common{i % 2} rare{i}" for i in range(40)]
    lex = _lexical(texts)
    query = "word3 common1 rare17 absent"
    refs = [f"mem:{i}" for i in range(1, 41)]
    cov = coverage.coverage_of(lex, "a", query, refs)
    weight = dict(zip(query_tokens(query), cov.idf, strict=True))
    for i in range(1, 40):
        held = set(tokens(texts[i - 1])) | set(tokens(texts[i]))
        expect = sum(v for w, v in weight.items() if w in held) / sum(cov.idf)
        assert cov.share(f"mem:{i}", f"mem:{i + 1}") == pytest.approx(expect)


def test_run_recall_hands_the_second_stage_each_candidates_neighbours_text(monkeypatch: pytest.MonkeyPatch) -> None:
    m = Models()
    texts = [
        "Melanie: how was the weekend?",
        "Caroline: quiet, mostly reading",
        "Melanie: what did you paint last week?",
        "Caroline: a sunrise over the lake",
        "Melanie: lovely",
    ]
    for mid, text in enumerate(texts, start=1):
        m.apply(mid, _stored(mid, content=text, vec=_vec(0.2 * mid, 1 + mid % (DIM - 1))))
    seen: list[rerank.Signals] = []
    real = rerank.rerank

    def spy(cands: list[Candidate], s: rerank.Signals, model: rerank.Model) -> list[Candidate]:
        seen.append(s)
        return real(cands, s, model)

    monkeypatch.setattr(rerank, "rerank", spy)
    qvec = np.zeros(DIM, dtype=np.float32)
    qvec[0] = 1.0
    run_recall(m, Opts(recall_rerank="learned"), RecallRequest(ScopeFilter("a"), "what did you paint", 2), qvec, "m1")
    (s,) = seen
    listed = sorted({r for r, _ in (*s.vector, *s.lexical)})
    assert "mem:4" in listed
    features = rerank.feature_rows([Candidate(r) for r in listed], s)
    rows = {r: dict(zip(rerank.FEATURES, x, strict=True)) for r, x in zip(listed, features, strict=True)}
    # the reply holds none of the question's words; with the question before it, all of them
    assert s.coverage.share("mem:4") == 0.0
    assert rows["mem:4"]["cover_previous"] == pytest.approx(1.0)
    assert rows["mem:4"]["cover_next"] == 0.0
