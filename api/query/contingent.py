"""The contingent rule (CONTRACTS S2, seed 003): no towers on unverified lemmas. Joins the
agent's declared standings with the memories that carry a value, and infers nothing.
See docs/context-packets.md, "S1–S3: standings".
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from memstream.projections.standings import SET_ASIDE

# A contingent row's value is cut here, as seed 003 clips it (CONTINGENT_VALUE_CHARS).
VALUE_CHARS: Final = 200

_HEX = re.compile(r"0x([0-9a-f]+)")
_DIGIT_GROUPS = re.compile(r"(?<=\d)[,_](?=\d{3}\b)")


@dataclass(frozen=True, slots=True)
class Value:
    value: str
    forms: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Carriers:
    refs: tuple[str, ...]
    truncated: bool = False


def canonical_form(value: str) -> str:
    """One spelling per value: NFKC, case-folded, trimmed; a ``0x`` hex prefix and digit-group
    separators dropped (``0xEF0101`` and ``ef0101`` share a form, as do ``1,000`` and ``1000``)."""
    v = unicodedata.normalize("NFKC", value).casefold().strip()
    v = _DIGIT_GROUPS.sub("", v)
    m = _HEX.fullmatch(v)
    return m.group(1) if m else v


def occurs(text: str, form: str) -> bool:
    """``form`` in ``text`` (both already case-folded), not inside a longer word or number."""
    if not form:
        return False
    start = text.find(form)
    while start >= 0:
        end = start + len(form)
        before_ok = start == 0 or not text[start - 1].isalnum()
        after_ok = end == len(text) or not text[end].isalnum()
        if before_ok and after_ok:
            return True
        start = text.find(form, start + 1)
    return False


def find_carriers(forms: Sequence[str], corpus: Iterable[tuple[str, str]], limit: int) -> Carriers:
    """The refs (in corpus order) whose text carries any of ``forms``; ``truncated`` once more
    than ``limit`` do, since "every carrier" cannot be read off a prefix. ``corpus`` yields
    (ref, case-folded text)."""
    wanted = [unicodedata.normalize("NFKC", f).casefold() for f in forms if f.strip()]
    found: list[str] = []
    for ref, text in corpus:
        if any(occurs(text, f) for f in wanted):
            if len(found) == limit:
                return Carriers(tuple(found), truncated=True)
            found.append(ref)
    return Carriers(tuple(found))


def clip(value: str) -> str:
    if len(value) <= VALUE_CHARS:
        return value
    return f"{value[:VALUE_CHARS]} …[clipped {len(value) - VALUE_CHARS} chars]"


def contingent_rows(
    values: Sequence[Value],
    carriers_of: Callable[[Value], Carriers],
    standing_of: Callable[[str], str | None],
    *,
    corpus_truncated: bool,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(contingent rows, values not judged and why). Nothing is judged from a cut corpus."""
    if corpus_truncated:
        return [], [{"value": clip(v.value), "reason": "corpus_truncated"} for v in values]
    rows: list[dict[str, Any]] = []
    unjudged: list[dict[str, Any]] = []
    seen: set[str] = set()
    for v in values:
        canonical = canonical_form(v.value)
        if canonical in seen:
            continue
        seen.add(canonical)
        carriers = carriers_of(v)
        if carriers.truncated:
            unjudged.append({"value": clip(v.value), "reason": "carriers_truncated"})
            continue
        if not carriers.refs:
            continue  # carried by nothing in memory: not a tower on memory at all
        judged: list[dict[str, str]] = []
        for ref in carriers.refs:
            standing = standing_of(ref)
            if standing is None or standing not in SET_ASIDE:
                judged = []  # undeclared or stood on: the value stands
                break
            judged.append({"ref": ref, "standing": standing})
        if judged:
            rows.append({"kind": "contingent", "value": clip(v.value), "carriers": judged})
    return rows, unjudged
