"""Speaker attribution in recall (api/query/recall/speakers.py)."""

from __future__ import annotations

from memstream.api.query.recall import speakers
from memstream.api.query.recall.fusion import Candidate, ordered


def test_speaker_of_reads_the_name_a_turn_starts_with() -> None:
    assert speaker_of("Caroline: I went to a support group") == "caroline"
    assert speaker_of("[1:56 pm on 8 May, 2023] Melanie Smith: we went camping") == "melanie"
    assert speaker_of("a note: lower-case start") is None
    assert speaker_of("Remember to buy milk") is None
    assert speaker_of("[8 May 2023] no speaker here") is None


def speaker_of(text: str) -> str | None:
    return speakers.speaker_of(text)


def test_named_in_keeps_the_capitalised_words() -> None:
    assert speakers.named_in("What did Caroline paint for Melanie?") == {"what", "caroline", "melanie"}
    assert speakers.named_in("what did she paint") == set()


def _cands() -> list[Candidate]:
    return ordered([Candidate("mem:1", rrf=0.03, fused=1.0), Candidate("mem:2", rrf=0.02, fused=0.8)])


CONTENT = {"mem:1": "[8 May] Melanie: a sunrise", "mem:2": "[8 May] Caroline: a lake at dawn", "ep:1": None}


def test_boost_moves_the_named_speakers_turn_up_and_keeps_rrf() -> None:
    out = speakers.boost(_cands(), CONTENT.get, {"caroline"}, 0.5)
    assert [c.ref for c in out] == ["mem:2", "mem:1"]
    assert out[0].fused == 0.8 * 1.5 and out[0].rrf == 0.02  # the gate's value is untouched


def test_boost_is_inert_without_a_match_a_name_or_a_share() -> None:
    for names, share in (({"melanie"}, 0.5), (set(), 0.5), ({"caroline"}, 0.0), ({"nobody"}, 0.5)):
        out = speakers.boost(_cands(), CONTENT.get, names, share)
        assert out[0].ref == "mem:1"
    named_first = speakers.boost(_cands(), CONTENT.get, {"melanie"}, 0.5)
    assert named_first[0].fused == 1.5 and named_first[1].fused == 0.8


def test_boost_skips_rows_without_text() -> None:
    cands = [Candidate("ep:1", fused=1.0), Candidate("mem:2", fused=0.5)]
    out = speakers.boost(cands, CONTENT.get, {"caroline"}, 0.5)
    assert [c.ref for c in out] == ["ep:1", "mem:2"] and out[1].fused == 0.75
