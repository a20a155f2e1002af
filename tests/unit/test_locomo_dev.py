"""The LoCoMo replica's query-side variants (bench/locomo_dev.py) on a hand-made conversation."""

from __future__ import annotations

import numpy as np
import pytest

from memstream.projections.lexical import LexicalProjection
from tests.support.bench import REPO, bench_module

ld = bench_module("locomo_dev", REPO / "bench" / "locomo_dev.py")

TURNS = [
    "[1 May 2023] Caroline: I went to the pottery class yesterday",
    "[1 May 2023] Melanie: What did you make there?",
    "[1 May 2023] Caroline: A blue vase with a glazed sunflower",
    "[1 May 2023] Melanie: That sounds lovely, I painted a sunrise",
    "[8 May 2023] Caroline: My kids loved the camping trip",
    "[8 May 2023] Melanie: We saw the meteor shower at the lake",
]


def agent(vectors: np.ndarray | None = None) -> ld.Agent:
    lex = LexicalProjection()
    for i, text in enumerate(TURNS):
        scope = {"agent_id": "a", "project_id": "", "channel": ""}
        lex.apply(i, {"type": "memory.stored", "scope": scope, "payload": {"id": i + 1, "content": text}})
    if vectors is None:  # one axis per turn plus a shared one: every cosine is moderate, so the gate passes
        vectors = np.hstack([np.eye(len(TURNS)), np.ones((len(TURNS), 1))]).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return ld.Agent("a", [f"D1:{i + 1}" for i in range(len(TURNS))], vectors, lex, list(TURNS))


def lists_for(ag: ld.Agent, text: str, qvec: np.ndarray) -> ld.Lists:
    return ld.retrieve(ag, qvec / np.linalg.norm(qvec), text, 5 * ld.K)


def test_feedback_terms_are_the_rows_rare_words_the_question_lacks() -> None:
    ag = agent()
    terms = ld.feedback_terms(ag, ["mem:3"], "what did Caroline make in pottery", 3, max_df=0.5)
    # "caroline" is asked; the date and speaker words are in half the turns or more
    assert "caroline" not in terms and "may" not in terms
    assert set(terms) <= {"blue", "vase", "with", "glazed", "sunflower"}
    assert len(terms) == 3


def test_feedback_terms_skip_words_most_rows_hold() -> None:
    ag = agent()
    # every word of turn 1 but "pottery"/"class"/"yesterday"/"went" is in other turns too;
    # with max_df 1/6 only words held by one turn qualify
    terms = ld.feedback_terms(ag, ["mem:1"], "a question", 10, max_df=1 / 6)
    assert set(terms) == {"went", "pottery", "class", "yesterday"}


def test_weighted_at_the_default_equals_the_kept_default() -> None:
    rng = np.random.default_rng(7)
    vecs = rng.normal(size=(len(TURNS), 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ag = agent(vecs)
    for q in ("what did Melanie paint", "camping trip with the kids", "pottery vase", "meteor"):
        ls = lists_for(ag, q, rng.normal(size=8).astype(np.float32))
        assert ld.weighted(2.0, 1.0)(ag, ls) == ld.VARIANTS["product-f20-0.25"](ag, ls)


def test_a_heavier_lexical_weight_moves_a_lexical_match_up() -> None:
    ag = agent()
    # the vector favours turn 5, then 6; the words hold half the query each in turns 1 and 6
    ls = lists_for(ag, "meteor pottery", np.array([0, 0, 0, 0, 1, 0.2, 1.5], dtype=np.float32))
    plain, heavy = ld.weighted(2.0, 1.0)(ag, ls), ld.weighted(2.0, 3.0)(ag, ls)
    assert plain.index("mem:6") < plain.index("mem:1")
    assert heavy.index("mem:1") < heavy.index("mem:6")


def test_speaker_boost_moves_up_the_named_speakers_turn() -> None:
    ag = agent()
    # the vector favours turn 4 (Melanie's) over 3 (Caroline's); lexically turns 1, 3, 5 are alike
    ls = lists_for(ag, "Caroline", np.array([0, 0, 0, 1, 0.9, 0, 1.5], dtype=np.float32))
    plain, boosted = ld.VARIANTS["product-f20-0.25"](ag, ls), ld.speaker_boost(0.5)(ag, ls)
    assert plain.index("mem:4") < plain.index("mem:3")
    assert boosted.index("mem:3") < boosted.index("mem:4")


def test_only_takes_names_and_patterns_in_variant_order() -> None:
    assert ld.chosen("base,speaker-*") == ["base", "speaker-0.1", "speaker-0.25", "speaker-0.5"]
    assert ld.chosen("speaker-0.5,speaker-*") == ["speaker-0.5", "speaker-0.1", "speaker-0.25"]
    assert ld.chosen(None) == list(ld.VARIANTS)
    with pytest.raises(SystemExit, match="no variant matches"):
        ld.chosen("nothing-*")
