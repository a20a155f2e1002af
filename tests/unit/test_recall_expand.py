"""The second stage's pool widened (api/query/recall/expand.py): a candidate's neighbour that no
list retrieved joins with its cosine read by id, and every row outside the vector list gets its
cosine and share as a listed row does."""

from __future__ import annotations

import numpy as np
import pytest

from memstream.api.query.recall import rerank
from memstream.api.query.recall.fusion import Candidate
from memstream.api.query.recall.pipeline import RecallRequest, run_recall
from memstream.projections.scope import ScopeFilter
from tests.unit.test_recall_neighbours import DIM, Models, Opts, _stored, _vec

QUESTION = "what did you paint at the lake"


def _chat() -> Models:
    """Forty turns: mem:20 is worded like the question (cosine 0.9), its reply mem:21 holds none
    of the question's words and a cosine of 0.35, under thirty turns at 0.5-0.6; four turns
    share a word with the question at cosine 0.2 (for the lexical list alone)."""
    m = Models()
    for mid in range(1, 41):
        if mid == 20:
            text, vec = "Caroline: what did you paint at the lake, Melanie?", _vec(0.9, 1)
        elif mid == 21:
            text, vec = "Melanie: a sunrise, last summer", _vec(0.35, 2)
        elif mid in (3, 5, 7, 9):
            text, vec = f"Caroline: the lake shop {mid} sells groceries", _vec(0.2, 3)
        else:
            text, vec = f"Caroline: note {mid} about groceries", _vec(0.5 + 0.1 * (mid % 2), 3 + mid % (DIM - 3))
        m.apply(mid, _stored(mid, content=text, vec=vec))
    return m


def _query() -> np.ndarray:
    q = np.zeros(DIM, dtype=np.float32)
    q[0] = 1.0
    return q


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[Candidate], rerank.Signals]]:
    seen: list[tuple[list[Candidate], rerank.Signals]] = []
    real = rerank.rerank

    def spy(cands: list[Candidate], s: rerank.Signals, model: rerank.Model) -> list[Candidate]:
        seen.append((list(cands), s))
        return real(cands, s, model)

    monkeypatch.setattr(rerank, "rerank", spy)
    return seen


def _recall(m: Models, **kw: object) -> list[Candidate]:
    req = RecallRequest(ScopeFilter("a"), QUESTION, 1, **kw)  # type: ignore[arg-type]
    return run_recall(m, Opts(recall_rerank="learned"), req, _query(), "m1", gate=False).candidates


def test_a_neighbour_no_list_retrieved_joins_with_its_cosine(monkeypatch: pytest.MonkeyPatch) -> None:
    m = _chat()
    seen = _spy(monkeypatch)
    monkeypatch.setattr(rerank, "EXPAND", 0)
    assert "mem:21" not in {c.ref for c in _recall(m)}  # neither list reaches the reply
    monkeypatch.setattr(rerank, "EXPAND", None)
    joined = {c.ref: c for c in _recall(m)}
    reply = joined["mem:21"]
    assert reply.cosine == pytest.approx(0.35, abs=1e-6) and reply.lists == set() and reply.rrf is None
    _, s = seen[-1]
    assert s.read is not None and s.read["mem:21"] == reply.cosine
    assert s.content["mem:21"] == "Melanie: a sunrise, last summer"
    assert s.adjacency["mem:21"] == ("mem:20", "mem:22")
    row = dict(zip(rerank.FEATURES, rerank.feature_rows([reply], s)[0], strict=True))
    # the joined row's signals: its own cosine, no rank in either list, the question before it
    assert row["cosine"] == pytest.approx(0.35, abs=1e-6)
    assert row["vector_rr"] == row["lexical_rr"] == row["both"] == 0.0
    assert row["previous_cosine"] == pytest.approx(0.9, abs=1e-6)
    assert row["cover_previous"] > row["share"] == 0.0


def test_a_row_the_request_filters_out_never_joins(monkeypatch: pytest.MonkeyPatch) -> None:
    m = _chat()
    monkeypatch.setattr(rerank, "EXPAND", None)
    refs = {c.ref for c in _recall(m, exclude=("melanie: a sunrise, last summer",))}
    assert "mem:20" in refs and "mem:21" not in refs


def test_rows_outside_the_vector_list_read_their_cosine_and_share(monkeypatch: pytest.MonkeyPatch) -> None:
    m = _chat()
    seen = _spy(monkeypatch)
    monkeypatch.setattr(rerank, "EXPAND", 0)
    _recall(m)
    cands, s = seen[-1]
    listed = {r for r, _ in s.vector}
    assert s.read is not None and s.read and not listed & s.read.keys()
    lexical_only = [c for c in cands if c.lists == {"lexical"}]
    assert lexical_only  # the word-matched groceries notes below the vector list's cut
    for c in lexical_only:
        x = dict(zip(rerank.FEATURES, rerank.feature_rows([c], s)[0], strict=True))
        assert x["cosine"] == pytest.approx(s.read[c.ref]) and x["cosine"] > 0
        assert x["share"] == pytest.approx(s.shares[c.ref])  # its list's own share stands
    # the BM25 share and the share read from the postings agree on a row the list holds
    for r, _ in s.lexical:
        assert s.coverage.lexical_share(r) == pytest.approx(s.shares[r])
