"""Dates in a question against a turn's session date, without a model: the second stage's date signals.

A turn stored as ``[1:56 pm on 8 May, 2023] Name: text`` carries the date of its session; a
question that names a day or a month ("on 9 November, 2022", "in December 2023") points at the
turns of that session, and a "when" question at the turns that say when ("last Saturday",
"yesterday", "in 2022"). Only the stored text and the question are read. What the signals gain:
docs/eval.md, "Fourth pass".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

MONTHS: Final = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_MONTH: Final = "|".join(MONTHS)  # capitalised only: "may" is a verb
_ORD: Final = r"(?:st|nd|rd|th)?"
_DAY_MONTH: Final = re.compile(rf"\b(\d{{1,2}}){_ORD}\s+({_MONTH})\b|\b({_MONTH})\s+(\d{{1,2}}){_ORD}\b")
_MONTH_ONLY: Final = re.compile(rf"\b({_MONTH})\b")
_YEAR: Final = re.compile(r"\b(19\d\d|20\d\d)\b")
_PREFIX: Final = re.compile(r"^\[([^\]]*)\]\s*")
_WHEN: Final = re.compile(r"\bwhen\b", re.I)
_TIME_WORDS: Final = re.compile(
    rf"\b(?:yesterday|today|tonight|tomorrow|ago|last|next|this (?:past|week|month|year|weekend)|recently|"
    rf"weekend|{_MONTH}|monday|tuesday|wednesday|thursday|friday|saturday|sunday|19\d\d|20\d\d)\b",
    re.I,
)


@dataclass(frozen=True, slots=True)
class Date:
    """The parts of a date a text names; None for each part it does not name."""

    year: int | None
    month: int | None
    day: int | None

    @property
    def named(self) -> bool:
        return self.year is not None or self.month is not None


def date_in(text: str) -> Date:
    """The first day-and-month (else month) and the first year ``text`` names."""
    year = int(m.group(1)) if (m := _YEAR.search(text)) else None
    if dm := _DAY_MONTH.search(text):
        return Date(year, MONTHS.index(dm.group(2) or dm.group(3)) + 1, int(dm.group(1) or dm.group(4)))
    if mm := _MONTH_ONLY.search(text):
        return Date(year, MONTHS.index(mm.group(1)) + 1, None)
    return Date(year, None, None)


@dataclass(frozen=True, slots=True)
class Question:
    """What a question says about time."""

    date: Date
    when: bool  # it asks "when"


def question(text: str) -> Question:
    return Question(date_in(text), bool(_WHEN.search(text)))


def session_date(turn: str) -> Date | None:
    """The date in a turn's leading ``[...]``; None when it has no such prefix."""
    m = _PREFIX.match(turn)
    return date_in(m.group(1)) if m else None


def signals(q: Question, turn: str | None) -> tuple[float, float, float]:
    """(day, month, when) for one turn: 1.0 when the session date is the day the question names
    (day and month, and the year when it names one); 1.0 when it is in the month or year the
    question names; 1.0 when the question asks "when" and the turn's words say a time."""
    if not turn:
        return 0.0, 0.0, 0.0
    when = 1.0 if q.when and _TIME_WORDS.search(_PREFIX.sub("", turn)) else 0.0
    at = session_date(turn)
    qd = q.date
    if at is None or not qd.named or at.year is None:
        return 0.0, 0.0, when
    year_ok = qd.year is None or qd.year == at.year
    month_ok = qd.month is None or qd.month == at.month
    day = 1.0 if qd.day is not None and (qd.day, qd.month) == (at.day, at.month) and year_ok else 0.0
    return day, 1.0 if month_ok and year_ok else 0.0, when
