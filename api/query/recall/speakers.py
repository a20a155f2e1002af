"""Speaker attribution: a turn by the person a question names moves up.

Agents often store a conversation as ``Speaker: text`` turns (``[date] Speaker: text`` in the
LoCoMo task). "What did Caroline paint?" is about a turn Caroline wrote far more often than one
Melanie wrote, yet the speaker's name is in half the turns, so BM25 gives it almost no weight
and the embedding little more. Measured on the LoCoMo development split: docs/eval.md, "Second
pass".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from memstream.api.query.recall.fusion import Candidate, ordered

# A leading ``[...]`` (a date, a session label), then a capitalised name of one or two words and
# a colon: "Caroline: ...", "[1:56 pm on 8 May, 2023] Melanie Smith: ...".
_SPEAKER: Final = re.compile(r"^(?:\[[^\]]*\]\s*)?([A-Z][\w'-]*)(?: [A-Z][\w'-]*)?:\s")
_NAME: Final = re.compile(r"\b[A-Z][a-z]+\b")


def speaker_of(content: str) -> str | None:
    """The first word of the name a turn starts with, lower-cased; None when it starts with none."""
    m = _SPEAKER.match(content)
    return m.group(1).lower() if m else None


def named_in(query: str) -> set[str]:
    """The capitalised words of a question, lower-cased: the names it may mention."""
    return {w.lower() for w in _NAME.findall(query)}


def spoken_by(content: Mapping[str, str | None], names: Iterable[str]) -> set[str]:
    """The refs whose content is a turn by a speaker in ``names``."""
    wanted = set(names)
    out = set()
    for ref, text in content.items():
        if text is not None and wanted and speaker_of(text) in wanted:
            out.add(ref)
    return out


def boost(
    cands: list[Candidate], content_of: Callable[[str], str | None], names: Iterable[str], share: float
) -> list[Candidate]:
    """Candidates reordered with the fused value of each turn whose speaker the question names
    raised by ``share`` (× (1 + share)). Only the order moves: ``rrf`` and the cosine, which the
    gate and ``match_reason`` read, stay as they were. Unchanged when nothing matches."""
    wanted = set(names)
    if share <= 0 or not wanted:
        return cands
    moved = False
    for c in cands:
        content = content_of(c.ref)
        speaker = speaker_of(content) if content is not None else None
        if speaker is not None and speaker in wanted:
            c.fused *= 1 + share
            moved = True
    return ordered(cands) if moved else cands
