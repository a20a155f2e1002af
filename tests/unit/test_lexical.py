"""The lexical projection: BM25, the keyword channel, isolation, CJK, snapshots and replay (R2, R10, H2).
The fold of a real engine's log: tests/system/test_lexical_engine.py."""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstream.projections.lexical import LexicalProjection, pruning, sidecar
from memstream.projections.lexical import bm25 as bm25mod
from memstream.projections.lexical import index as indexmod
from memstream.projections.lexical import words as wordsmod
from memstream.projections.lexical.rows import SnapshotRows, rows_of
from memstream.projections.lexical.text import keyword_terms, normalize, query_tokens, tokens
from memstream.projections.runner import ProjectionRunner, digest_of, replay
from memstream.projections.scope import ScopeFilter
from memstream.streams.events import Event
from memstream.streams.log.port import LogRecord
from tests.support.hits import refs

# -- events shaped like Event.model_dump() (occurred_at as the ISO string the log holds) ------


def make_event(type_: str, payload: dict[str, Any], agent: str = "a", project: str = "", channel: str = "") -> dict:
    ev = {
        "id": f"e-{type_}-{payload.get('id', '')}",
        "type": type_,
        "v": 1,
        "scope": {"agent_id": agent, "project_id": project, "channel": channel},
        "actor": {"client_id": "tester", "agent_id": agent, "session_id": ""},
        "occurred_at": "2026-01-02T03:04:05+00:00",
        "command_id": "cmd",
        "payload": payload,
    }
    Event.model_validate(ev)  # the envelope is the real one
    return ev


def stored(mid: int, content: str, **scope: str) -> dict:
    return make_event("memory.stored", {"id": mid, "content": content, "msg_id": None, "locked": False}, **scope)


def updated(mid: int, content: str, agent: str = "a") -> dict:
    return make_event("memory.updated", {"id": mid, "content": content, "metadata": None}, agent=agent)


def deleted(mid: int, agent: str = "a") -> dict:
    return make_event("memory.deleted", {"id": mid}, agent=agent)


def archived(eid: int, summary: str, keywords: str = "", **scope: str) -> dict:
    return make_event("episode.archived", {"id": eid, "summary": summary, "keywords": keywords}, **scope)


def ep_deleted(eid: int, agent: str = "a") -> dict:
    return make_event("episode.deleted", {"id": eid}, agent=agent)


def wiped(mids: list[int], eids: list[int], agent: str = "a") -> dict:
    payload = {"memory_ids": mids, "episode_ids": eids, "profile": False, "kept_locked": []}
    return make_event("agent_data.deleted", payload, agent=agent)


class Log:
    """An in-memory event log with the read side ``ProjectionRunner`` uses."""

    num_partitions = 1

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def append(self, ev: dict) -> int:
        self.values.append(orjson.dumps(ev))
        return len(self.values) - 1

    def end_offset(self) -> int:
        return len(self.values)

    def read(self, start: int = 0, stop: int | None = None, *, limit: int = 10_000, **_: Any) -> list[LogRecord]:
        stop = len(self.values) if stop is None else min(stop, len(self.values))
        return [LogRecord(i, 0, "", orjson.loads(v)["type"], v) for i, v in enumerate(self.values[start:stop], start)][
            :limit
        ]


def fold(*events: dict, proj: LexicalProjection | None = None) -> LexicalProjection:
    p = proj or LexicalProjection()
    for ev in events:
        p.offset += 1
        p.apply(p.offset, ev)
    return p


def via_sidecar(p: LexicalProjection) -> LexicalProjection:
    """``p`` restored as a restart restores it: the snapshot's rows, the index from its sidecar
    (the sidecar's bytes held in memory instead of a file)."""
    body = orjson.loads(orjson.dumps(p.to_snapshot()))
    rows_hash = body["blob"].removeprefix("lexical-")
    blob = bytearray(b"".join(sidecar.encode(p.agents, rows_hash)))
    restored = LexicalProjection()
    restored.agents = sidecar.read(memoryview(blob), rows_hash, rows_of(body))
    restored.offset = p.offset
    return restored


A = ScopeFilter("a")


# -- BM25 -------------------------------------------------------------------------------------


def test_bm25_exact_term_outranks_unrelated_and_rare_terms_weigh_more() -> None:
    p = fold(
        stored(1, "the cat sat on the mat"),
        stored(2, "quarterly revenue report for the finance team"),
        stored(3, "dogs chase the cats in the yard"),
        stored(4, "the weather report says rain"),
    )
    hits = p.search(A, "revenue report", 10)
    assert hits[0][0] == "mem:2"
    assert "mem:1" not in refs(hits) and "mem:3" not in refs(hits)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    assert all(s > 0 for _, s in hits)
    # "revenue" is in one row, "report" in two: the row holding the rarer word leads.
    assert refs(p.search(A, "report revenue", 1)) == ["mem:2"]
    assert p.search(A, "nothing matches this", 10) == []
    assert p.search(A, "", 10) == [] and p.search(A, "cat", 0) == []
    # Words are stemmed (English Snowball): "cats" meets "cat"; substrings never match.
    assert set(refs(p.search(A, "cat", 10))) == {"mem:1", "mem:3"}


def bm25_reference(docs: dict[str, tuple[str, str, int, str]], scope: ScopeFilter, query: str) -> dict[str, float]:
    """Textbook BM25 (k1 1.2, b 0.75, Lucene idf) over an agent's live rows, filtered by scope."""
    toks = {ref: tokens(text) for ref, (_, _, _, text) in docs.items()}
    n = len(docs)
    if not n:
        return {}
    avgdl = sum(len(t) for t in toks.values()) / n
    if not avgdl:
        return {}
    out: dict[str, float] = {}
    for ref, (project, channel, _, _) in docs.items():
        if not scope.admits(project, channel):
            continue
        tf = Counter(toks[ref])
        score = 0.0
        for q in query_tokens(query):
            if tf[q]:
                df = sum(1 for t in toks.values() if q in t)
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                score += idf * tf[q] * 2.2 / (tf[q] + 1.2 * (0.25 + 0.75 * len(toks[ref]) / avgdl))
        if score > 0:
            out[ref] = score
    return out


def test_bm25_scores_are_textbook_bm25() -> None:
    texts = [
        "alpha beta gamma",
        "alpha alpha delta",
        "beta beta beta epsilon zeta eta theta",
        "gamma delta",
        "alpha",
        "an unrelated row about iota and kappa and alpha",
    ]
    p = fold(*(stored(i + 1, t) for i, t in enumerate(texts)))
    docs = {f"mem:{i + 1}": ("", "", i, t) for i, t in enumerate(texts)}
    for q in ("alpha", "beta gamma", "alpha delta zeta", "kappa alpha alpha"):
        ref = bm25_reference(docs, A, q)
        got = dict(p.search(A, q, 100))
        assert got.keys() == ref.keys()
        for r, s in ref.items():
            assert got[r] == pytest.approx(s, rel=1e-12)


# -- updates, deletes, agent_data.deleted ----------------------------------------------------------


def test_update_replaces_old_terms() -> None:
    p = fold(stored(1, "apple pie recipe with cinnamon"), stored(2, "notes about the garden"))
    assert refs(p.search(A, "apple", 5)) == ["mem:1"]
    fold(updated(1, "banana bread recipe"), proj=p)
    assert p.search(A, "apple", 5) == [] and p.search(A, "cinnamon", 5) == []
    assert p.keyword(A, "apple", 5) == []
    assert refs(p.search(A, "banana", 5)) == ["mem:1"]
    assert refs(p.keyword(A, "banana", 5)) == ["mem:1"]
    assert p.count(A) == 2
    # An update of a memory this projection never saw (or of another agent's id) changes nothing.
    before = digest_of(p)
    fold(updated(99, "ghost"), updated(1, "ghost", agent="b"), proj=p)
    assert digest_of(p) == before


def test_deletes_remove_memories_and_episodes() -> None:
    p = fold(
        stored(1, "the launch checklist for friday"),
        archived(2, "we reviewed the launch plan", "launch, checklist, friday"),
        stored(3, "friday lunch order"),
    )
    assert set(refs(p.search(A, "launch", 10))) == {"mem:1", "ep:2"}
    assert set(refs(p.keyword(A, "checklist", 10))) == {"mem:1", "ep:2"}
    assert p.count(A) == 3
    fold(deleted(1), proj=p)
    assert refs(p.search(A, "launch", 10)) == ["ep:2"]
    fold(ep_deleted(2), proj=p)
    assert p.search(A, "launch", 10) == [] and p.keyword(A, "checklist", 10) == []
    assert p.count(A) == 1
    fold(deleted(1), ep_deleted(2), deleted(42), proj=p)  # again / unknown: no effect
    assert p.count(A) == 1 and refs(p.search(A, "friday", 10)) == ["mem:3"]


def test_agent_data_deleted_removes_listed_rows_and_keeps_the_rest() -> None:
    p = fold(
        stored(1, "secret project codename bluebird"),
        stored(2, "locked memory about bluebird"),  # a locked memory is not in memory_ids
        archived(3, "bluebird retrospective"),
        stored(4, "bluebird for agent b", agent="b"),
    )
    fold(wiped([1], [3]), proj=p)
    assert refs(p.search(A, "bluebird", 10)) == ["mem:2"]
    assert refs(p.keyword(A, "bluebird", 10)) == ["mem:2"]
    assert p.count(A) == 1
    assert refs(p.search(ScopeFilter("b"), "bluebird", 10)) == ["mem:4"]  # other agents untouched
    fold(wiped([2], []), proj=p)
    assert p.count(A) == 0 and p.search(A, "bluebird", 10) == []
    assert "a" not in p.to_snapshot()["agents"]


@pytest.mark.parametrize("removed", [3, 12, 20])  # under half the rows (one by one), over, all
def test_removing_many_rows_at_once_answers_as_removing_them_one_by_one(removed: int) -> None:
    rows = [stored(i, f"row {i} about topic{i % 3} and tag{i:02d}x{'z' * (i % 4)}") for i in range(1, 21)]
    at_once, one_by_one = fold(*rows), fold(*rows)
    fold(wiped(list(range(1, removed + 1)), []), proj=at_once)
    for i in range(1, removed + 1):
        fold(deleted(i), proj=one_by_one)
    assert at_once.to_snapshot() == one_by_one.to_snapshot()
    for q in ("topic0", "topic1", "row", "tag05", "tag19xzzz", "about"):
        assert at_once.search(A, q, 20) == one_by_one.search(A, q, 20)
        assert at_once.keyword(A, q, 20) == one_by_one.keyword(A, q, 20)
    if removed == 20:  # an erased agent keeps no word of its texts in the index
        assert not at_once.agents["a"].kw.words and not at_once.agents["a"].post


def test_episode_text_is_summary_and_keywords() -> None:
    p = fold(archived(1, "talked about the quarterly plan", "okr, roadmap"))
    assert refs(p.search(A, "roadmap", 5)) == ["ep:1"]
    assert refs(p.search(A, "quarterly", 5)) == ["ep:1"]
    assert refs(p.keyword(A, "okr", 5)) == ["ep:1"]


# -- isolation (R10) -----------------------------------------------------------------------------


def scoped_store() -> LexicalProjection:
    return fold(
        stored(1, "shared token global", project="", channel=""),
        stored(2, "shared token in x", project="X", channel=""),
        stored(3, "shared token in y", project="Y", channel=""),
        stored(4, "shared token in x on c", project="X", channel="C"),
        stored(5, "shared token on d", project="", channel="D"),
        archived(6, "shared token episode in y on c", project="Y", channel="C"),
        stored(7, "shared token of another agent", agent="b"),
    )


@pytest.mark.parametrize(
    ("project", "channel", "expected"),
    [
        (None, None, {1, 2, 3, 4, 5, 6}),
        (None, "", {1, 2, 3, 4, 5, 6}),
        ("X", None, {1, 2, 4, 5}),
        ("", None, {1, 5}),
        ("Y", None, {1, 3, 5, 6}),
        (None, "C", {1, 2, 3, 4, 6}),
        ("X", "C", {1, 2, 4}),
        ("Y", "D", {1, 3, 5}),
        ("Z", "Q", {1}),
    ],
)
def test_scope_isolation(project: str | None, channel: str | None, expected: set[int]) -> None:
    p = scoped_store()
    scope = ScopeFilter("a", project, channel)
    want = {f"ep:{i}" if i == 6 else f"mem:{i}" for i in expected}
    assert set(refs(p.search(scope, "shared token", 100))) == want
    assert set(refs(p.keyword(scope, "token", 100))) == want
    assert p.count(scope) == len(want)
    # k applies after the scope filter: the best k of the rows the scope admits.
    assert len(p.search(scope, "shared token", 1)) == 1 and p.search(scope, "shared token", 1)[0][0] in want


def test_other_agents_rows_are_never_read() -> None:
    p = scoped_store()
    b = ScopeFilter("b")
    assert refs(p.search(b, "shared token", 100)) == ["mem:7"]
    assert refs(p.keyword(b, "shared", 100)) == ["mem:7"]
    assert p.count(b) == 1
    assert p.search(ScopeFilter("nobody"), "shared", 10) == [] and p.count(ScopeFilter("")) == 0
    assert "mem:7" not in refs(p.search(A, "another agent", 100))


# -- CJK and normalisation -------------------------------------------------------------------------


def test_cjk_queries_find_cjk_memories() -> None:
    p = fold(
        stored(1, "昨日は東京タワーに行きました"),
        stored(2, "我喜欢吃北京烤鸭"),
        stored(3, "서울에서 회의가 있었다"),
        stored(4, "東京でPython勉強会をした"),
        stored(5, "大阪の天気は晴れ"),
        stored(6, "an english row"),
    )
    assert refs(p.search(A, "東京タワー", 10))[0] == "mem:1"
    assert refs(p.search(A, "北京烤鸭", 10)) == ["mem:2"]
    assert refs(p.search(A, "서울 회의", 10)) == ["mem:3"]
    assert refs(p.search(A, "python 勉強", 10))[0] == "mem:4"
    assert refs(p.search(A, "大阪の天気を教えて", 10))[0] == "mem:5"
    assert p.search(A, "京都", 10) == []  # shares no bigram
    assert refs(p.keyword(A, "タワー", 10)) == ["mem:1"]  # substring, any length
    assert refs(p.keyword(A, "烤", 10)) == ["mem:2"]  # one Han character is a term


def test_tokens_bigram_cjk_and_split_mixed_text() -> None:
    assert tokens("東京タワー") == ["東京", "京タ", "タワ", "ワー"]
    assert tokens("東京でPython勉強") == ["東京", "京で", "python", "勉強"]
    assert tokens("猫") == ["猫"]
    assert tokens("sha256:AB12 snake_case") == ["sha256", "ab12", "snake", "case"]
    assert tokens("हिन्दी भाषा") == ["हिन्दी", "भाषा"]  # combining vowel signs stay inside words


def test_nfkc_and_casefold() -> None:
    p = fold(stored(1, "Ｐｙｔｈｏｎ ﬁle STRASSE ｶﾀｶﾅ"))
    for q in ("python", "PYTHON", "file", "straße", "カタカナ"):
        assert refs(p.search(A, q, 5)) == ["mem:1"], q
        assert refs(p.keyword(A, q, 5)) == ["mem:1"], q
    assert normalize("ＡＢＣ") == "abc"


# -- keyword channel ---------------------------------------------------------------------------------


def test_keyword_finds_identifiers_inside_text() -> None:
    p = fold(
        stored(1, "flashed register 0xef0101 after the reset"),
        stored(2, "checksum sha256:ab12cd34ef56 verified for the release build"),
        stored(3, "the release build went out on time"),
        stored(4, "reset the board twice"),
    )
    assert refs(p.keyword(A, "0xef0101", 10)) == ["mem:1"]
    assert refs(p.keyword(A, "ef0101", 10)) == ["mem:1"]  # inside a token
    assert p.search(A, "ef0101", 10) == []  # ... which BM25's whole-word tokens cannot find
    assert refs(p.keyword(A, "sha256:ab12", 10)) == ["mem:2"]
    assert refs(p.keyword(A, "SHA256:AB12CD34", 10)) == ["mem:2"]
    assert refs(p.keyword(A, "what was the checksum (sha256:ab12cd34ef56)?", 10))[0] == "mem:2"
    assert p.keyword(A, "sha256:ffff", 10) == []
    assert p.keyword(A, "", 10) == [] and p.keyword(A, "a e i", 10) == []  # one-letter terms dropped


def test_keyword_ranks_by_matched_terms_then_recency() -> None:
    p = fold(
        stored(1, "deploy alpha service"),
        stored(2, "deploy beta service"),
        stored(3, "rollback alpha"),
        stored(4, "unrelated row one"),
        stored(5, "unrelated row two"),
        stored(6, "unrelated row three"),
    )
    hits = p.keyword(A, "alpha deploy", 10)
    assert hits[0] == ("mem:1", 2.0)  # both terms
    assert hits[1:] == [("mem:3", 1.0), ("mem:2", 1.0)]  # one term each: newest first
    # An update keeps the row's place in recency (its creation), like CPersona's created_at order.
    fold(updated(2, "deploy beta service again"), proj=p)
    assert p.keyword(A, "alpha deploy", 10)[1:] == [("mem:3", 1.0), ("mem:2", 1.0)]


def test_keyword_terms_most_rows_hold_do_not_count() -> None:
    rows = [stored(i, f"the note number {i}") for i in range(1, 8)]
    p = fold(*rows, stored(8, "the register 0xef0101"))
    assert refs(p.keyword(A, "the 0xef0101", 10)) == ["mem:8"]  # "the" is in every row
    assert len(p.keyword(A, "the", 100)) == 8  # alone, a common term still answers


def test_keyword_long_terms_match_as_substrings_not_as_trigram_sets() -> None:
    rows = ("abcxbcaxcab", "xxabcabxx", "ワー東京京タワ", "昨日東京タワーへ")
    p = fold(*(stored(i + 1, t) for i, t in enumerate(rows)))
    assert refs(p.keyword(A, "abcab", 10)) == ["mem:2"]  # row 1 holds abc, bca, cab but not abcab
    assert refs(p.keyword(A, "東京タワー", 10)) == ["mem:4"]  # row 3 holds every bigram of it, apart
    assert refs(p.keyword(A, "京タ", 10)) == ["mem:4", "mem:3"]  # newest first
    assert refs(p.keyword(A, "x東京", 10)) == []


def test_top_k_over_many_rows_is_the_head_of_the_full_ranking() -> None:
    rng = random.Random(5)
    vocab = [f"w{i}" for i in range(40)]
    p = fold(*(stored(i, " ".join(rng.choice(vocab) for _ in range(rng.randint(1, 8)))) for i in range(1, 2001)))
    for q in ("w1", "w2 w3", "w5 w6 w7 w8", "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9"):
        full = p.search(A, q, 5000)
        assert len(full) > 100
        for k in (1, 10, 50):
            assert p.search(A, q, k) == full[:k]
        kw_full = p.keyword(A, q, 5000)
        for k in (1, 10, 50):
            assert p.keyword(A, q, k) == kw_full[:k]
    # Identical rows tie on score: newest first, even across the pre-selection's blocks.
    p2 = fold(*(stored(i, "same words here") for i in range(1, 1001)))
    assert refs(p2.search(A, "words", 3)) == ["mem:1000", "mem:999", "mem:998"]


def _zipf_events(rng: random.Random, first: int, rows: int) -> list[dict]:
    """Rows of Zipf-distributed words (a few very common, many rare), some updated or deleted,
    spread over projects: the shape where MaxScore pruning applies."""
    vocab = [f"z{i}" for i in range(3000)]
    weights = [1.0 / (i + 1) for i in range(len(vocab))]

    def text() -> str:
        return " ".join(rng.choices(vocab, weights, k=rng.randint(2, 14)))

    evs = []
    for i in range(first, first + rows):
        evs.append(stored(i, text(), project=rng.choice(["", "p1", "p2"])))
        if i % 37 == 0:
            evs.append(updated(rng.randint(1, i), text()))
        if i % 53 == 0:
            evs.append(deleted(rng.randint(1, i)))
    return evs


def _zipf_queries(rng: random.Random, n: int) -> list[str]:
    vocab = [f"z{i}" for i in range(3000)]
    weights = [1.0 / (i + 1) for i in range(len(vocab))]
    return [
        " ".join(rng.choices(vocab[:8], k=rng.randint(1, 3)) + rng.choices(vocab, weights, k=rng.randint(1, 5)))
        for _ in range(n)
    ]


@pytest.mark.parametrize(("seed", "tables"), [(1, False), (2, False), (1, True), (3, True)])
def test_pruned_bm25_equals_the_exhaustive_ranking_to_the_last_bit(
    seed: int, tables: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MaxScore pruning (``pruning.pruned_top``) is exact: same rows, same order, bit-equal scores and
    shares, under scopes, for every k; with common terms read by binary search or from their
    per-slot tables, and those tables kept right through later stores, updates, deletes,
    growth and compaction."""
    monkeypatch.setattr(bm25mod, "PRUNE_MIN_POSTINGS", 0)
    monkeypatch.setattr(pruning, "PRUNE_FIRST_CANDIDATES", 64)
    monkeypatch.setattr(pruning, "DENSE_MIN_ROWS", 0 if tables else 10**12)
    monkeypatch.setattr(indexmod, "COMPACT_MIN_DEAD", 200)
    rng = random.Random(seed)
    p = fold(*_zipf_events(rng, 1, 3000))
    pruned = 0
    scopes = [A, ScopeFilter(agent_id="a", project_id="p1"), ScopeFilter(agent_id="a", project_id="p9")]

    def check(queries: list[str]) -> None:
        nonlocal pruned
        real = pruning.pruned_top
        answered: list[bool] = []

        def counting(*args: Any) -> Any:
            out = real(*args)
            answered.append(out is not None)
            return out

        for n, q in enumerate(queries):
            scope = scopes[n % len(scopes)]
            for k in (1, 10, 40):
                with monkeypatch.context() as m:
                    m.setattr(bm25mod, "PRUNE_MIN_POSTINGS", 10**12)
                    want = p.search_shares(scope, q, k)
                with monkeypatch.context() as m:
                    m.setattr(pruning, "pruned_top", counting)
                    got = p.search_shares(scope, q, k)
                assert got == want, (q, k, scope)
        pruned += sum(answered)

    check(_zipf_queries(rng, 150))
    assert bool(p.agents["a"].dense) == tables
    fold(*_zipf_events(rng, 3001, 6000), proj=p)  # grows the slot columns (and any tables) past 8k
    check(_zipf_queries(rng, 150))
    doomed = [deleted(i) for i in range(1, 9001) if i % 3]
    fold(*doomed, proj=p)  # compaction renumbers the slots; the tables are made again
    check(_zipf_queries(rng, 100))
    assert pruned > 600  # the pruned path did answer most of these, rather than the fallback


def test_keyword_terms_rules() -> None:
    assert keyword_terms("What is 0xEF0101? (sha256:ab12) a 猫") == ["what", "is", "0xef0101", "sha256:ab12", "猫"]
    long = " ".join(f"w{i:0{i % 7 + 2}d}" for i in range(30))
    assert len(keyword_terms(long)) == 12


# -- snapshots, rebuild, replay (H2) ----------------------------------------------------------------


def sample_events() -> list[dict]:
    return [
        stored(1, "first memory about kafka partitions", project="P"),
        stored(2, "second memory, 東京の会議", channel="C"),
        archived(3, "episode on replay", "replay, digest"),
        updated(1, "first memory about kafka consumer groups"),
        stored(4, "register 0xef0101", agent="b"),
        deleted(2),
        stored(5, "a memory stored after a delete"),
        wiped([5], [3]),
        stored(6, "after the wipe, 0xEF0101 again"),
    ]


QUERIES = ["kafka", "consumer groups", "東京", "replay digest", "0xef0101", "memory", "wipe again"]
SCOPES = [ScopeFilter("a"), ScopeFilter("a", "P"), ScopeFilter("a", "", "C"), ScopeFilter("b"), ScopeFilter("a", "Q")]


def answers(p: LexicalProjection) -> list[Any]:
    return [(p.search(s, q, 5), p.keyword(s, q, 5), p.count(s)) for s in SCOPES for q in QUERIES]


def test_snapshot_round_trip_is_canonical() -> None:
    live = fold(*sample_events())
    snap = live.to_snapshot()
    assert orjson.loads(orjson.dumps(snap)) == snap  # JSON-able as is
    restored = LexicalProjection()
    restored.load_snapshot(orjson.loads(orjson.dumps(snap)))
    assert digest_of(restored) == digest_of(live)
    assert restored.to_snapshot() == snap
    assert answers(restored) == answers(live)
    with pytest.raises(ValueError):
        LexicalProjection().load_snapshot({"version": 999, "agents": {}})


def test_sidecar_holds_only_what_live_rows_say() -> None:
    """A deleted, updated-away or wiped text leaves no word, term or gram in the sidecar: what
    an erasure removes from the rows does not survive in the analysed index on disk."""
    p = fold(
        stored(1, "zanzibarquux lives here"),
        stored(2, "keep this row"),
        updated(2, "keep this row, now with qwertyplover"),
        updated(2, "keep this row"),
        archived(3, "episode about blorptangle"),
        stored(4, "kept row four"),
        deleted(1),
        ep_deleted(3),
    )
    blob = bytes(b"".join(sidecar.encode(p.agents, "h")))
    for gone in ("zanzibarquux", "qwertyplover", "blorptangle", "zanzibarqu", "blorptangl"):
        assert gone.encode() not in blob
    assert b"keep" in blob
    restored = LexicalProjection()
    restored.agents = sidecar.read(
        memoryview(bytearray(blob)), "h", rows_of(orjson.loads(orjson.dumps(p.to_snapshot())))
    )
    assert answers(restored) == answers(p)
    assert restored.keyword(A, "zanzib", 5) == [] and restored.search(A, "blorptangle", 5) == []


def test_sidecar_of_other_rows_or_damaged_is_refused() -> None:
    p = fold(*sample_events())
    body = orjson.loads(orjson.dumps(p.to_snapshot()))
    rows_hash = body["blob"].removeprefix("lexical-")
    good = bytes(b"".join(sidecar.encode(p.agents, rows_hash)))
    with pytest.raises(ValueError):
        sidecar.read(memoryview(bytearray(good)), "another-hash", rows_of(body))
    other_rows = dict(rows_of(body), a=SnapshotRows.of_lists(p.agents["a"].snapshot_rows()[:-1]))
    with pytest.raises(ValueError):
        sidecar.read(memoryview(bytearray(good)), rows_hash, other_rows)
    with pytest.raises((ValueError, IndexError)):
        sidecar.read(memoryview(bytearray(good[: len(good) // 2])), rows_hash, rows_of(body))


def test_rebuild_from_log_equals_live() -> None:
    log = Log()
    live = LexicalProjection()
    runner = ProjectionRunner.over(log, [live])  # type: ignore[arg-type]
    for ev in sample_events():
        log.append(ev)
        runner.catch_up()  # folded event by event, read in between (read-your-writes)
        answers(live)
    rebuilt = replay(log, [LexicalProjection]).projections[0]  # type: ignore[arg-type]
    assert rebuilt.offset == live.offset == len(log.values) - 1
    assert digest_of(rebuilt) == digest_of(live)
    assert answers(rebuilt) == answers(live)


def test_equal_states_reached_differently_have_equal_snapshots() -> None:
    direct = fold(stored(1, "final text"), stored(2, "other"))
    churned = fold(
        stored(1, "draft text"),
        stored(2, "other"),
        updated(1, "second draft"),
        stored(3, "temporary"),
        deleted(3),
        updated(1, "final text"),
    )
    assert digest_of(direct) == digest_of(churned)
    assert answers(direct) == answers(churned)


def test_a_create_applied_twice_changes_nothing() -> None:
    ev = stored(1, "hello world")
    p = fold(ev, stored(2, "hello there"))
    before = digest_of(p), p.keyword(A, "hello", 5)
    fold(ev, proj=p)  # at-least-once delivery: the same event again, at a later offset
    assert (digest_of(p), p.keyword(A, "hello", 5)) == before


def test_compaction_keeps_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexmod, "COMPACT_MIN_DEAD", 4)
    monkeypatch.setattr(wordsmod.WordIndex, "MERGE_MIN", 3)
    p = fold(*(stored(i, f"row {i} about topic{i % 3} and 0xab{i:02x}") for i in range(1, 11)))
    before_snap = p.to_snapshot()
    before = [(p.search(A, f"topic{j}", 20), p.keyword(A, f"0xab0{j}", 20)) for j in range(3)]
    for i in range(1, 11):
        fold(updated(i, f"row {i} about topic{i % 3} and 0xab{i:02x}"), proj=p)
    idx = p.agents["a"]
    assert idx.n < 20  # compacted at least once: dead slots are gone
    assert p.to_snapshot() == before_snap
    assert [(p.search(A, f"topic{j}", 20), p.keyword(A, f"0xab0{j}", 20)) for j in range(3)] == before


# -- the share of the query's IDF mass a row holds (recall fusion's lexical evidence) -----------------


def test_token_share_is_the_matched_idf_mass_and_ignores_length_and_unknown_terms() -> None:
    filler = " ".join(f"word{i}" for i in range(200))
    p = fold(
        stored(1, "ticket OPS-4821 is closed"),
        stored(2, f"ticket OPS-7777 notes {filler} OPS-4821 mentioned once"),  # long row, same rare id
        stored(3, "ticket OPS-1000 is open"),
        stored(4, "an unrelated note"),
    )
    hits = {r: (s, sh) for r, s, sh in p.search_shares(A, "status of ticket ops-4821 zzzunknown", 10)}
    # "4821" is rare (2 rows), "ticket" and "ops" common (3 rows); "status", "of", "zzzunknown" no
    # row holds, so they are evidence for nothing and do not count.
    assert hits["mem:1"][1] == pytest.approx(1.0) and hits["mem:2"][1] == pytest.approx(1.0)
    assert hits["mem:1"][0] > hits["mem:2"][0]  # BM25 normalises length; the share does not
    idf = {df: math.log(1 + (4 - df + 0.5) / (df + 0.5)) for df in (2, 3)}
    assert hits["mem:3"][1] == pytest.approx(2 * idf[3] / (2 * idf[3] + idf[2]))
    assert "mem:4" not in hits
    assert p.search_shares(A, "zzzunknown", 10) == [] and p.search_shares(A, "ticket", 0) == []


def test_token_share_survives_update_delete_and_compaction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexmod, "COMPACT_MIN_DEAD", 2)
    p = fold(*(stored(i, f"row{i} shared text") for i in range(1, 7)))
    fold(updated(2, "row2 shared text plus rare"), deleted(1), deleted(3), deleted(4), proj=p)
    assert p.agents["a"].n < 8  # compacted: slots renumbered
    got = {r: sh for r, _, sh in p.search_shares(A, "rare row5 shared", 10)}
    n = 3  # rows 2, 5, 6 live
    idf = {df: math.log(1 + (n - df + 0.5) / (df + 0.5)) for df in (1, 3)}
    total = 2 * idf[1] + idf[3]
    assert got == pytest.approx(
        {"mem:2": (idf[1] + idf[3]) / total, "mem:5": (idf[1] + idf[3]) / total, "mem:6": idf[3] / total}
    )


def test_keyword_share_covers_substring_identifiers() -> None:
    p = fold(stored(1, "deploy key 0xef0101 rotated"), stored(2, "deploy notes"), stored(3, "other"), stored(4, "more"))
    # "ef0101" is inside the token "0xef0101": BM25 cannot see it, the keyword channel can.
    assert p.search_shares(A, "ef0101", 5) == []
    [(ref, count, share)] = p.keyword_shares(A, "ef0101", 5)
    assert (ref, count, share) == ("mem:1", 1.0, pytest.approx(1.0))
    shares = {r: sh for r, _, sh in p.keyword_shares(A, "deploy ef0101", 5)}
    idf = {df: math.log(1 + (4 - df + 0.5) / (df + 0.5)) for df in (1, 2)}
    assert shares == pytest.approx({"mem:1": 1.0, "mem:2": idf[2] / (idf[1] + idf[2])})


# -- property: any history replays to the same state and the same answers ---------------------------

WORDS = ["alpha", "beta", "gamma", "delta", "0xef01", "sha256:ab12", "東京", "会議", "서울", "the", "Kafka"]
text_st = st.lists(st.sampled_from(WORDS), min_size=0, max_size=6).map(" ".join)
agent_st = st.sampled_from(["a", "a", "b"])
op_st = st.one_of(
    st.tuples(st.just("store"), text_st, agent_st, st.sampled_from(["", "X", "Y"]), st.sampled_from(["", "C"])),
    st.tuples(st.just("archive"), text_st, agent_st, st.sampled_from(["", "X"]), st.sampled_from(["", "C"])),
    st.tuples(st.just("update"), st.integers(0, 99), text_st),
    st.tuples(st.just("delete"), st.integers(0, 99)),
    st.tuples(st.just("delete_ep"), st.integers(0, 99)),
    st.tuples(st.just("wipe"), agent_st, st.integers(0, 3)),
)
PROP_QUERIES = ["alpha", "beta gamma", "ef01", "sha256:ab12", "東京の会議", "서울", "kafka the", "delta 0xef01"]
PROP_SCOPES = [ScopeFilter(a, pj, ch) for a in ("a", "b") for pj in (None, "", "X") for ch in (None, "C")]


def to_events(ops: list[tuple]) -> list[dict]:
    """Ops as the deciders emit them: fresh ids shared by memories and episodes; updates and
    deletes pick a live row of the right kind (``pick`` modulo the live rows); a wipe keeps
    every ``keep``-th memory of the agent (as if locked) and drops all its episodes."""
    live: dict[int, tuple[str, str]] = {}  # id -> (kind, agent), in creation order
    out: list[dict] = []
    for op in ops:
        kind = op[0]
        if kind in ("store", "archive"):
            _, text, agent, project, channel = op
            i = len(out) + 1
            live[i] = ("mem" if kind == "store" else "ep", agent)
            if kind == "store":
                out.append(stored(i, text, agent=agent, project=project, channel=channel))
            else:
                out.append(archived(i, text or "empty", text, agent=agent, project=project, channel=channel))
            continue
        if kind == "wipe":
            _, agent, keep = op
            mine = [i for i, (k, a) in live.items() if a == agent and k == "mem"]
            mids = [m for n, m in enumerate(mine) if not keep or n % (keep + 1)]
            eids = [i for i, (k, a) in live.items() if a == agent and k == "ep"]
            out.append(wiped(mids, eids, agent=agent))
            for i in mids + eids:
                del live[i]
            continue
        want = "ep" if kind == "delete_ep" else "mem"
        pool = [i for i, (k, _) in live.items() if k == want]
        if not pool:
            continue
        i = pool[op[1] % len(pool)]
        agent = live[i][1]
        if kind == "update":
            out.append(updated(i, op[2], agent=agent))
        else:
            out.append(deleted(i, agent=agent) if kind == "delete" else ep_deleted(i, agent=agent))
            del live[i]
    return out


def reference_rows(events: list[dict]) -> dict[str, dict[str, tuple[str, str, int, str]]]:
    """agent -> ref -> (project, channel, creation offset, text): the logical state, by hand."""
    rows: dict[str, dict[str, tuple[str, str, int, str]]] = {}
    for off, ev in enumerate(events):
        t, p, agent = ev["type"], ev["payload"], ev["scope"]["agent_id"]
        mine = rows.setdefault(agent, {})
        if t == "memory.stored":
            mine[f"mem:{p['id']}"] = (ev["scope"]["project_id"], ev["scope"]["channel"], off, p["content"])
        elif t == "episode.archived":
            text = f"{p['summary']}\n{p['keywords']}" if p["keywords"] else p["summary"]
            mine[f"ep:{p['id']}"] = (ev["scope"]["project_id"], ev["scope"]["channel"], off, text)
        elif t == "memory.updated":
            pj, ch, seq, _ = mine[f"mem:{p['id']}"]
            mine[f"mem:{p['id']}"] = (pj, ch, seq, p["content"])
        elif t == "memory.deleted":
            del mine[f"mem:{p['id']}"]
        elif t == "episode.deleted":
            del mine[f"ep:{p['id']}"]
        elif t == "agent_data.deleted":
            for i in p["memory_ids"]:
                del mine[f"mem:{i}"]
            for i in p["episode_ids"]:
                del mine[f"ep:{i}"]
    return rows


def token_share_reference(docs: dict[str, tuple[str, str, int, str]], query: str, ref: str) -> float:
    """The row's share of the query's IDF mass, by hand: idf over the agent's live rows, query
    tokens no live row holds left out."""
    toks = {r: set(tokens(text)) for r, (_, _, _, text) in docs.items()}
    n = len(docs)
    total = matched = 0.0
    for q in query_tokens(query):
        df = sum(1 for t in toks.values() if q in t)
        if not df:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        total += idf
        matched += idf if q in toks[ref] else 0.0
    return matched / total if total else 0.0


def keyword_share_reference(docs: dict[str, tuple[str, str, int, str]], query: str, ref: str) -> float:
    n = len(docs)
    total = matched = 0.0
    for term in keyword_terms(query):
        holders = {r for r, (_, _, _, text) in docs.items() if term in normalize(text)}
        if holders:
            idf = math.log(1 + (n - len(holders) + 0.5) / (len(holders) + 0.5))
            total += idf
            matched += idf if ref in holders else 0.0
    return matched / total if total else 0.0


def keyword_reference(docs: dict[str, tuple[str, str, int, str]], scope: ScopeFilter, query: str) -> list:
    terms = keyword_terms(query)
    hits = []
    for term in terms:
        holders = {r for r, (_, _, _, text) in docs.items() if term in normalize(text)}
        if holders:
            hits.append(holders)
    telling = [h for h in hits if 2 * len(h) <= len(docs)] or hits
    counts = Counter(r for h in telling for r in h)
    rows = [(r, c) for r, c in counts.items() if scope.admits(docs[r][0], docs[r][1])]
    rows.sort(key=lambda rc: (-rc[1], -docs[rc[0]][2]))
    return [(r, float(c)) for r, c in rows]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op_st, min_size=1, max_size=60), st.integers(0, 10))
def test_any_history_replays_to_the_same_digest_and_answers(ops: list[tuple], read_every: int) -> None:
    check_history(to_events(ops), read_every)


def test_a_long_random_history_replays_to_the_same_digest_and_answers() -> None:
    """Hypothesis keeps histories short; one seeded history of 600 operations goes deep."""
    rng = random.Random(1234)
    ops: list[tuple] = []
    for _ in range(600):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 6)))
        r = rng.random()
        if r < 0.4:
            ops.append(("store", text, rng.choice("aab"), rng.choice(["", "X", "Y"]), rng.choice(["", "C"])))
        elif r < 0.5:
            ops.append(("archive", text, rng.choice("aab"), rng.choice(["", "X"]), rng.choice(["", "C"])))
        elif r < 0.75:
            ops.append(("update", rng.randint(0, 99), text))
        elif r < 0.9:
            ops.append(("delete", rng.randint(0, 99)))
        elif r < 0.98:
            ops.append(("delete_ep", rng.randint(0, 99)))
        else:
            ops.append(("wipe", rng.choice("ab"), rng.randint(0, 3)))
    check_history(to_events(ops), 7)
    check_history(to_events(ops), 4)


def check_history(events: list[dict], read_every: int) -> None:
    # Live: folded one event at a time, with reads in between; tiny thresholds so compaction and
    # the keyword postings merge happen inside short histories too.
    old = indexmod.COMPACT_MIN_DEAD, wordsmod.WordIndex.MERGE_MIN, indexmod.AgentIndex.REBUILD_MIN_WORDS
    indexmod.COMPACT_MIN_DEAD, wordsmod.WordIndex.MERGE_MIN = 2, 2
    indexmod.AgentIndex.REBUILD_MIN_WORDS = 0 if read_every % 2 else 1024  # both compaction paths
    try:
        live = LexicalProjection()
        for i, ev in enumerate(events):
            fold(ev, proj=live)
            if read_every and i % read_every == 0:
                live.search(PROP_SCOPES[i % len(PROP_SCOPES)], PROP_QUERIES[i % len(PROP_QUERIES)], 3)
                live.keyword(PROP_SCOPES[i % len(PROP_SCOPES)], PROP_QUERIES[i % len(PROP_QUERIES)], 3)
    finally:
        indexmod.COMPACT_MIN_DEAD, wordsmod.WordIndex.MERGE_MIN, indexmod.AgentIndex.REBUILD_MIN_WORDS = old
    for idx in live.agents.values():  # the slot bookkeeping compaction relies on
        assert idx.dead == idx.n - len(idx.slot_of) == idx.n - int(idx.alive[: idx.n].sum())
    rebuilt = fold(*events)
    restored = LexicalProjection()
    restored.load_snapshot(orjson.loads(orjson.dumps(live.to_snapshot())))
    from_sidecar = via_sidecar(live)
    # A restart from the sidecar half-way, then the rest of the history folded on top of it.
    resumed = fold(*events[len(events) // 2 :], proj=via_sidecar(fold(*events[: len(events) // 2])))
    assert digest_of(rebuilt) == digest_of(live) == digest_of(restored) == digest_of(from_sidecar)
    assert digest_of(resumed) == digest_of(live)
    for idx in from_sidecar.agents.values():  # what the sidecar holds is live rows only
        assert idx.dead == 0 and idx.n == len(idx.slot_of)

    def all_answers(p: LexicalProjection) -> list[Any]:
        return [(p.search(s, q, 4), p.keyword(s, q, 4), p.count(s)) for s in PROP_SCOPES for q in PROP_QUERIES]

    got = all_answers(live)
    assert got == all_answers(rebuilt) == all_answers(restored) == all_answers(from_sidecar) == all_answers(resumed)

    # ... and those answers are the right ones, by a brute-force model of the logical state.
    rows = reference_rows(events)
    for scope in PROP_SCOPES:
        docs = rows.get(scope.agent_id, {})
        assert live.count(scope) == sum(1 for pj, ch, _, _ in docs.values() if scope.admits(pj, ch))
        for q in PROP_QUERIES:
            ref = bm25_reference(docs, scope, q)
            hits = live.search(scope, q, 100)
            assert {r for r, _ in hits} == set(ref)
            for r, s in hits:
                assert s == pytest.approx(ref[r], rel=1e-9)
            seqs = {r: docs[r][2] for r in ref}
            assert hits == sorted(hits, key=lambda h: (-h[1], -seqs[h[0]]))
            assert live.keyword(scope, q, 100) == keyword_reference(docs, scope, q)
            assert live.keyword(scope, q, 2) == keyword_reference(docs, scope, q)[:2]
            # Each row's share of the query's IDF mass, through updates, deletes and compactions.
            with_shares = live.search_shares(scope, q, 100)
            assert [(r, s) for r, s, _ in with_shares] == hits
            for r, _, share in with_shares:
                assert share == pytest.approx(token_share_reference(docs, q, r), rel=1e-9, abs=1e-12)
            kw_shares = live.keyword_shares(scope, q, 100)
            assert [(r, c) for r, c, _ in kw_shares] == live.keyword(scope, q, 100)
            for r, _, share in kw_shares:
                assert share == pytest.approx(keyword_share_reference(docs, q, r), rel=1e-9, abs=1e-12)
