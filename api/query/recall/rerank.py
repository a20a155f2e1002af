"""A second stage: the fused candidates reordered by a learned combination of what recall knows.

The first stage (evidence-weighted rrf over the neighbour-reordered lists) ranks well inside
either retriever's view but weighs them with fixed rules; on the LoCoMo development split the
evidence turns sit in the top 20 of either list far more often than in the fused top 10. This
stage scores every candidate of the deeper lists with a logistic model over signals recall
already computed (no new search, no model call) and orders by that score. Only the order moves:
the cosine and ``rrf`` the gate and ``match_reason`` read stay each row's own. How the weights
were fitted, on what, and what they gain: docs/eval.md, "Third pass".
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from memstream.api.query.recall import dates
from memstream.api.query.recall.coverage import Coverage
from memstream.api.query.recall.forest import Forest
from memstream.api.query.recall.fusion import Candidate, ordered

Ranked = Sequence[tuple[str, float]]

# Each list is cut at this many times the rows recall returns, for the second stage to reorder:
# on the LoCoMo development split 6 finds more evidence than 3 (held out, recall@10 +0.016 ±
# 0.013) and 10 no more than 6 (docs/eval.md, "Fifth pass").
DEPTH_FACTOR: Final = 6

# Cosines read by id for the rows the vector list did not hold (``Signals.read``), and the
# neighbours of this many first candidates joining the pool (expand.py; None: every candidate's,
# 0: none). Chosen leave-one-conversation-out on the LoCoMo development split (docs/eval.md,
# "Sixth pass"); READ False with EXPAND 0 is the fifth pass's stage.
READ: Final = True
EXPAND: Final[int | None] = 20

# The turns either side of a candidate whose cosines give its window signals (window.py; 0: no
# window signals). Chosen leave-one-conversation-out on the LoCoMo development split
# (docs/eval.md, "Seventh pass"); it needs READ (the window's cosines are read by id).
WINDOW: Final = 2

# The signals, in the order of ``WEIGHTS``. Rows a list did not rank get 0 for its signals.
FEATURES: Final = (
    "fused",  # the first stage's order value, over the deeper lists
    "cosine",  # the row's cosine (clamped to [0, 1]) when the vector list holds it
    "cosine_gap",  # that cosine minus the list's best (0 at the top, negative below)
    "share",  # its share of the query's IDF mass when the lexical list holds it
    "share_rel",  # that share over the list's best share
    "vector_rr",  # 1 / its rank in the vector list
    "lexical_rr",  # 1 / its rank in the lexical list
    "both",  # 1 when both lists hold it
    "previous_cosine",  # the cosine of the memory written just before it, when the vector list holds it
    "next_cosine",  # likewise the memory written just after it
    "previous_share",  # the IDF share of the memory before it, when the lexical list holds it
    "next_share",  # likewise the memory after it
    "speaker",  # 1 when it is a "Name: text" turn whose speaker the query names
    "words",  # log(1 + its word count): a short reply ("Wow, great!") rarely holds the answer
    "date_day",  # 1 when its session date is the day the query names (dates.signals)
    "date_month",  # 1 when its session date is in the month or year the query names
    "when_time",  # 1 when the query asks "when" and the turn's words say a time
    "cover_previous",  # the share of the query's IDF mass it and the memory before it hold (coverage.py)
    "cover_next",  # likewise with the memory written just after it
    "window_best",  # the best cosine among it and the WINDOW memories written either side (window.py)
    "window_mean",  # their mean cosine
)


@dataclass(frozen=True, slots=True)
class Model:
    """A linear scorer over ``FEATURES``: score = Σ weight · feature, plus the trees of
    ``forest`` when there are some (fitted on top of the linear score). A logistic model's bias
    and the features' standardisation do not move the order, so only the weights are kept."""

    weights: tuple[float, ...]
    forest: Forest | None = None

    def score(self, x: Sequence[float]) -> float:
        return self.scores([x])[0]

    def scores(self, rows: Sequence[Sequence[float]]) -> list[float]:
        """Every row's score at once (the trees descend for all rows together)."""
        if len(rows) == 0:  # ``rows`` may be an array (bench/rerank_fit.py scores its matrices)
            return []
        x = np.asarray(rows, dtype=np.float64)
        out = x @ np.asarray(self.weights, dtype=np.float64)
        if self.forest is not None:
            out = out + self.forest.scores(x)
        return [float(v) for v in out]


# Fitted by ``bench/rerank_fit.py --pool 60 --kind pairwise --l2 0.001 --extra expand20,window2`` on
# the LoCoMo development split (5 conversations, 760 questions; every turn one memory, MiniLM-L6
# int8), with the reads, joins and window of ``READ`` / ``EXPAND`` / ``WINDOW``: a logistic model
# on pairs (an evidence turn against another candidate of its question) over standardised
# features, L2 0.001, written back on the raw scale (weight / feature's std). Fitted
# leave-one-conversation-out the same way, each conversation scored by the model of the other
# four: recall@10 0.801 and NDCG@10 0.650, against the sixth pass's 0.780 / 0.637 (+0.021 ± 0.011
# and +0.013 ± 0.008, paired; docs/eval.md, "Third pass" to "Seventh pass"). In FEATURES order.
DEFAULT_MODEL: Final = Model(
    (
        *(-0.4472, 1.1610, 1.2739, -4.0898, 1.1852, 0.6046, 1.9485, 0.0271, -0.1022, 0.9418),
        *(-0.5851, 0.4842, 2.4417, 1.0267, 2.8525, 2.5467, 1.3605, 5.0463, 2.2598, 8.0709, 4.3338),
    )
)


@dataclass(frozen=True, slots=True)
class Signals:
    """What one recall computed, as the second stage reads it."""

    vector: Ranked  # the vector list in the order it was fused (best first), with cosines
    lexical: Ranked  # the lexical vote likewise
    shares: Mapping[str, float]  # each lexical row's IDF share
    adjacency: Mapping[str, tuple[str | None, str | None]]  # previous / next memory
    speakers: Collection[str]  # refs whose speaker the query names
    content: Mapping[str, str | None]  # each candidate's text (None for an episode)
    query: str  # the question, for its dates
    coverage: Coverage  # the query words each candidate and its neighbours hold (coverage.py)
    # Cosines read by memory id (``VectorProjection.cosines``) for rows the vector list did not
    # hold. With them, such a row (a lexical-only candidate, a neighbour, a row ``expand``
    # brought) gets its cosine from here and its share from ``coverage``, as a listed row gets
    # them from its list; None: they get 0 (before the sixth pass, docs/eval.md).
    read: Mapping[str, float] | None = None
    # Each candidate's (best, mean) cosine over the turns around it (window.py); a row not in
    # it gets 0 for both (before the seventh pass: every row).
    around: Mapping[str, tuple[float, float]] | None = None


def features(c: Candidate, s: Signals, index: _Index) -> list[float]:
    """The row's ``FEATURES`` vector."""
    cos = index.cosine_of(c.ref)
    share = index.share_of(c.ref, s)
    prev, nxt = s.adjacency.get(c.ref, (None, None))
    text = s.content.get(c.ref)
    return [
        c.fused,
        cos if cos is not None else 0.0,
        cos - index.top_cosine if cos is not None else 0.0,
        share if share is not None else 0.0,
        share / index.top_share if share is not None and index.top_share > 0 else 0.0,
        1.0 / index.vector_rank[c.ref] if c.ref in index.vector_rank else 0.0,
        1.0 / index.lexical_rank[c.ref] if c.ref in index.lexical_rank else 0.0,
        1.0 if c.ref in index.vector_rank and c.ref in index.lexical_rank else 0.0,
        index.cosine_of(prev) or 0.0,
        index.cosine_of(nxt) or 0.0,
        index.share_of(prev, s) or 0.0,
        index.share_of(nxt, s) or 0.0,
        1.0 if c.ref in s.speakers else 0.0,
        math.log1p(len(text.split())) if text else 0.0,
        *dates.signals(index.question, text),
        *s.coverage.signals(c.ref, prev, nxt),
        *(s.around or {}).get(c.ref, (0.0, 0.0)),
    ]


@dataclass(slots=True)
class _Index:
    cosine: dict[str, float]
    share: dict[str, float]
    vector_rank: dict[str, int]
    lexical_rank: dict[str, int]
    top_cosine: float
    top_share: float
    question: dates.Question

    def cosine_of(self, ref: str | None) -> float | None:
        return self.cosine.get(ref) if ref is not None else None

    def share_of(self, ref: str | None, s: Signals) -> float | None:
        """A listed row's share; with reads, any other row's from the postings (``coverage``)."""
        if ref is None:
            return None
        share = self.share.get(ref)
        if share is None and s.read is not None:
            return s.coverage.lexical_share(ref)
        return share


def index_of(s: Signals) -> _Index:
    read = {r: min(1.0, max(0.0, v)) for r, v in (s.read or {}).items()}
    listed = {r: min(1.0, max(0.0, v)) for r, v in s.vector}
    cosine = read | listed
    share = {r: min(1.0, max(0.0, s.shares.get(r, 0.0))) for r, _ in s.lexical}
    return _Index(
        cosine,
        share,
        {r: i for i, (r, _) in enumerate(s.vector, start=1)},
        {r: i for i, (r, _) in enumerate(s.lexical, start=1)},
        max(listed.values(), default=0.0),
        max(share.values(), default=0.0),
        dates.question(s.query),
    )


def feature_rows(cands: Sequence[Candidate], s: Signals) -> list[list[float]]:
    index = index_of(s)
    return [features(c, s, index) for c in cands]


# A conversation turn: an optional leading ``[...]`` (a date), then a speaker of one or two
# capitalised words in lower case after the capital ("Caroline", "Melanie Smith", "User"), a colon.
# Identifiers that open a note ("ADR-71205: ...", "Bug BUG-29880: ...") are not speakers.
_TURN: Final = re.compile(r"^(?:\[[^\]]*\]\s*)?[A-Z][a-z'-]*(?: [A-Z][a-z'-]*)?:\s")


def conversational(refs: Iterable[str], content: Mapping[str, str | None]) -> bool:
    """Whether at least half of the rows are conversation turns (``_TURN``): what the model was
    fitted on. On other text (definitions, notes) a model fitted on turns moves rows the wrong
    way (docs/eval.md, "Third pass"), so recall keeps the first stage there."""
    rows = list(refs)
    turns = sum(1 for r in rows if (text := content.get(r)) and _TURN.match(text))
    return bool(rows) and 2 * turns >= len(rows)


def rerank(cands: list[Candidate], s: Signals, model: Model) -> list[Candidate]:
    """The candidates ordered by ``model``'s score, which becomes their order value (``fused``,
    a logistic probability in (0, 1)). ``rrf``, the cosine and the lists a row came from stay."""
    scores = model.scores(feature_rows(cands, s))
    for c, v in zip(cands, scores, strict=True):
        c.fused = 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, v))))
    return ordered(cands)
