"""One recall, from retrieved lists to gated, ordered candidates (R1–R9).

``run_recall`` is synchronous and runs under the engine's read lock (``Engine.read``): it reads
the projections, fuses, gates and orders, and hands back candidates plus what the response
needs to say about them. The query's embedding is computed before, outside the lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from memstream.api.query.recall import coverage, expand, fusion, neighbours, rerank, speakers
from memstream.api.query.recall import window as turn_window
from memstream.api.query.recall.gate import GateConfig, apply_gate, autocut, confidence_of, episode_factor, keyed_signal
from memstream.api.query.recall.models import RecallModels, Row
from memstream.api.query.recall.options import RecallSettings
from memstream.projections.records import MemoryRow
from memstream.projections.scope import ScopeFilter
from memstream.streams.events import parse_time


@dataclass(slots=True)
class RecallRequest:
    scope: ScopeFilter
    query: str
    limit: int
    deep: bool = False
    source_id: str = ""
    exclude: tuple[str, ...] = ()
    after: datetime | None = None
    before: datetime | None = None
    # Declared names the query mentions (reconstruct's stage 1, A3): added to the lexical and
    # keyword searches only; the embedding search sees the query as written.
    lexical_terms: tuple[str, ...] = ()


@dataclass(slots=True)
class RecallResult:
    candidates: list[fusion.Candidate]  # best first, cut to the limit (profile excluded)
    profile: str | None = None  # the profile row's text when it is injected
    gate_fallback: bool = False
    lists: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    # Every candidate that passed the gate, before the limit cut (best first).
    admitted: list[fusion.Candidate] = field(default_factory=list)


def row_of(engine: RecallModels, ref: str) -> Row | None:
    """The memory or episode row a ref names (None when it is gone)."""
    kind, _, ident = ref.partition(":")
    table = engine.memories.rows if kind == "mem" else engine.episodes.rows
    return table.get(int(ident))


def row_time(row: Row) -> datetime | None:
    """The instant a row describes (its timestamp, else when it was written)."""
    raw = getattr(row, "timestamp", None) or getattr(row, "start_time", None) or row.created_at
    try:
        return parse_time(raw)
    except ValueError:
        return None


def _content(engine: RecallModels, ref: str) -> str | None:
    """A memory's text (episodes are not conversation turns: None)."""
    row = row_of(engine, ref)
    return row.content if isinstance(row, MemoryRow) else None


def _excluded(text: str, exclude: tuple[str, ...]) -> bool:
    low = text.lower()
    return any((len(e) < 32 and low == e) or (len(e) >= 32 and low.startswith(e)) for e in exclude)


def _admit(engine: RecallModels, req: RecallRequest, ref: str) -> bool:
    """Filters a retriever cannot know about: source, exclusions, time cue."""
    row = row_of(engine, ref)
    if row is None:
        return False
    if req.source_id:
        if not isinstance(row, MemoryRow):  # as its ref says: mem: names memory rows only
            if not req.scope.channel:
                return False  # episodes carry no per-user source; a channel scope admits them
        elif (row.source or {}).get("id") != req.source_id:
            return False
    text = row.content if isinstance(row, MemoryRow) else f"[Episode] {row.summary}"
    if req.exclude and _excluded(text, req.exclude):
        return False
    if req.after or req.before:
        t = row_time(row)
        if t is None or (req.after and t < req.after) or (req.before and t > req.before):
            return False
    return True


def recent_rows(engine: RecallModels, req: RecallRequest) -> list[str]:
    """An empty query: the newest rows in scope, as refs, newest first."""
    out: list[str] = []
    mems = engine.memories.of_agent(req.scope.agent_id)
    for row in reversed(mems):
        if req.scope.admits(row.project_id, row.channel) and _admit(engine, req, f"mem:{row.id}"):
            out.append(f"mem:{row.id}")
            if len(out) >= req.limit:
                break
    return out


def run_recall(
    engine: RecallModels,
    settings: RecallSettings,
    req: RecallRequest,
    query_vec: np.ndarray | None,
    model: str | None,
    *,
    gate: bool = True,
) -> RecallResult:
    """Retrieve, fuse, score, gate and order. ``gate=False`` returns every fused candidate
    (calibration measures the gate's inputs, not its outputs)."""
    depth = max(req.limit, 1) * (3 if req.deep else 1)
    mode = settings.recall_mode
    # Adjacent-turn evidence (neighbours.py) reorders each list over a deeper cut of it, under
    # the evidence-weighted rrf with both retrievers; every other configuration is as before.
    # Speaker attribution (speakers.py) likewise moves only that configuration's order.
    evidence_rrf = mode == "rrf" and settings.rrf_evidence and settings.recall_retrievers == "all"
    neighbour_weight = settings.recall_neighbour_weight if evidence_rrf else 0.0
    # The second stage (rerank.py) sees each list three times as deep, and fuses all of it.
    second_stage = evidence_rrf and settings.recall_rerank == "learned"
    first_keep = depth * neighbours.DEPTH_FACTOR if neighbour_weight > 0 else depth
    keep = max(first_keep, depth * rerank.DEPTH_FACTOR) if second_stage else first_keep
    fetch = keep * 2 if (req.source_id or req.exclude or req.after or req.before) else keep
    use_vector = query_vec is not None and settings.recall_retrievers in ("all", "vector")
    use_lexical = settings.recall_retrievers in ("all", "lexical")

    def admitted(ranked: list[tuple[str, float]]) -> list[tuple[str, float]]:
        return [(r, s) for r, s in ranked if _admit(engine, req, r)][:keep]

    window: list[tuple[str, float]] = []
    far: list[tuple[str, float]] = []
    if use_vector and query_vec is not None:
        reach = settings.vector_reach if settings.recall_mode != "cascade" else 0
        window, far = engine.vectors.search(
            req.scope, query_vec, fetch, window=settings.max_memories, reach=reach, model=model
        )
        window, far = admitted(window), admitted(far)
        far_limit = req.limit if settings.vector_far_limit == 0 else min(req.limit, settings.vector_far_limit)
        far = far[:far_limit]
    lex_query = " ".join((req.query, *req.lexical_terms)) if req.lexical_terms else req.query
    shares: dict[str, float] = {}  # each lexical row's share of the query's IDF mass
    lexical: list[tuple[str, float]] = []
    if use_lexical:
        bm25_hits = engine.lexical.search_shares(req.scope, lex_query, fetch)
        lexical = admitted([(r, s) for r, s, _ in bm25_hits])
        shares = {r: sh for r, _, sh in bm25_hits}
    keyword_memo: list[list[tuple[str, float]]] = []

    def keyword() -> list[tuple[str, float]]:
        """The keyword channel's admitted rows, computed on first use only: a substring search
        whose cost grows with the agent's rows, needed when BM25 leaves the lexical vote short,
        by ``cascade`` and by the legacy gate's fallback, and by nothing else."""
        if not keyword_memo:
            hits = engine.lexical.keyword_shares(req.scope, lex_query, fetch) if use_lexical else []
            for r, _, sh in hits:
                shares.setdefault(r, sh)  # BM25's share of a row both found stands
            keyword_memo.append(admitted([(r, s) for r, s, _ in hits]))
        return keyword_memo[0]

    # The keyword channel is a fallback inside the lexical vote, not a vote of its own: it adds
    # rows BM25 did not rank (identifiers, hashes, terms its tokenizer splits) after BM25's
    # rows. Counted separately it would give lexical evidence two votes against the vector's
    # one, and the keyword channel's coarse order (matched-term counts) would outvote both.
    lexical_vote = list(lexical)
    if use_lexical and len(lexical) < keep:
        in_lexical = {r for r, _ in lexical}
        lexical_vote += [(r, s) for r, s in keyword() if r not in in_lexical][: keep - len(lexical)]
    content: dict[str, str | None] = {}
    if second_stage:
        content = {r: _content(engine, r) for r, _ in (*window, *lexical_vote)}
        if not rerank.conversational(content, content):  # the first stage alone, as with it off
            second_stage = False
            window, lexical_vote = window[:first_keep], lexical_vote[:first_keep]
    vector_ev = fusion.vector_evidence(window)
    lexical_ev = fusion.lexical_evidence({r: shares.get(r, 0.0) for r, _ in lexical_vote})
    adjacency: dict[str, tuple[str | None, str | None]] = {}
    ids: dict[str, list[int]] = {}  # the agent's memory ids in write order, sorted once per recall
    if neighbour_weight > 0 or second_stage:
        adjacency = neighbours.memory_adjacency(engine.memories, {r for r, _ in (*window, *lexical_vote)}, ids)
    if neighbour_weight > 0:
        window, vector_ev = neighbours.reorder(window, vector_ev, adjacency, neighbour_weight)
        lexical_vote, lexical_ev = neighbours.reorder(lexical_vote, lexical_ev, adjacency, neighbour_weight)
        if not second_stage:
            window, lexical_vote = window[:depth], lexical_vote[:depth]
    lists = {"vector": window, "far": far, "lexical": lexical_vote}
    if mode == "cascade":
        cands = fusion.cascade(window, [lexical, keyword()], settings.vector_min_similarity)
    elif mode == "rsf":
        cands = fusion.rsf({k: v for k, v in lists.items() if v})
    else:
        weights = {"lexical": settings.rrf_lexical_weight}
        evidence = None
        if settings.rrf_evidence:
            evidence = {"vector": vector_ev, "far": fusion.vector_evidence(far), "lexical": lexical_ev}
        cands = fusion.rrf({k: v for k, v in lists.items() if v}, k=settings.rrf_k, weights=weights, evidence=evidence)
        if evidence_rrf:
            named = speakers.named_in(req.query)
            cands = speakers.boost(
                cands,
                lambda ref: content[ref] if ref in content else _content(engine, ref),
                named,
                settings.recall_speaker_boost,
            )
            if second_stage:
                filtered = bool(req.source_id or req.exclude or req.after or req.before)
                widened = expand.widen(
                    engine,
                    req.scope.agent_id,
                    cands,
                    window,
                    adjacency,
                    content,
                    lambda ref: not filtered or _admit(engine, req, ref),
                    lambda ref: _content(engine, ref),
                    lambda refs: neighbours.memory_adjacency(engine.memories, refs, ids),
                    query_vec,
                    model,
                    rerank.READ,
                    rerank.EXPAND,
                )
                held = coverage.coverage_of(
                    engine.lexical, req.scope.agent_id, lex_query, {*widened.content, *widened.near}
                )
                spoken = speakers.spoken_by(widened.content, named)
                around = None
                if rerank.WINDOW and widened.read is not None and query_vec is not None:
                    qv = query_vec
                    around = turn_window.around(
                        [c.ref for c in widened.cands],
                        widened.adjacency,
                        lambda refs: neighbours.memory_adjacency(engine.memories, refs, ids),
                        rerank.WINDOW,
                        lambda ref: not filtered or _admit(engine, req, ref),
                        {**dict(window), **widened.read},
                        lambda refs: engine.vectors.cosines(req.scope.agent_id, qv, refs, model),
                    )
                signals = rerank.Signals(
                    window,
                    lexical_vote,
                    shares,
                    widened.adjacency,
                    spoken,
                    widened.content,
                    req.query,
                    held,
                    widened.read,
                    around,
                )
                cands = rerank.rerank(widened.cands, signals, rerank.DEFAULT_MODEL)

    cfg = GateConfig(
        rrf_k=settings.rrf_k,
        calibrated=engine.precision.gate_of(req.scope.agent_id),
        confidence_enabled=settings.confidence_enabled,
        ordering=settings.confidence_ordering,
    )
    now = datetime.now(UTC)
    prior_applied = settings.episode_penalty_enabled and _apply_episode_prior(engine, settings, req.scope, cands)
    if prior_applied and mode == "rsf":
        cands = fusion.ordered(cands)
    if settings.confidence_enabled:
        for c in cands:
            row = row_of(engine, c.ref)
            t = row_time(row) if row is not None else None
            age = (now - t).total_seconds() / 3600 if t else 0.0
            c.confidence = confidence_of(c, age, getattr(row, "resolved", None), cfg)

    pool = engine.lexical.count(req.scope)
    if not gate:
        return RecallResult(cands, None, False, lists)
    passed, blocked = apply_gate(cands, pool, cfg)
    gate_fallback = False
    if cfg.legacy_confidence:
        passed.sort(key=lambda c: -(c.confidence or 0.0))
        if not passed:
            lexical_refs = {r for r, _ in lexical} | {r for r, _ in keyword()}
            rescued = [c for c in blocked if c.ref in lexical_refs]
            if rescued:
                passed, gate_fallback = rescued, True
    if settings.autocut_enabled and passed:
        values = [keyed_signal(c, cfg) for c in passed]
        similarity_scale = cfg.legacy_confidence or (mode == "cascade" and all(sig == "cosine" for _, sig in values))
        if similarity_scale:
            passed = autocut(
                passed,
                [v or 0.0 for v, _ in values],
                settings.autocut_min_gap_ratio,
                settings.autocut_min_results,
            )

    profile_row = engine.profiles.rows.get(req.scope.agent_id)
    profile = None
    # At most one profile row, unscored, sorting last (R9); dropped on a pool under 50 rows,
    # and cut by the limit when scored rows fill it.
    if profile_row is not None and pool >= 50 and not req.source_id:
        profile = profile_row.content
    return RecallResult(passed[: req.limit], profile, gate_fallback, lists, passed)


def _apply_episode_prior(
    engine: RecallModels, settings: RecallSettings, scope: ScopeFilter, cands: list[fusion.Candidate]
) -> bool:
    """Scale memories older than the latest episode in the same scope (R7). True if any was."""
    boundary = None
    for ep in engine.episodes.of_agent(scope.agent_id):
        if scope.admits(ep.project_id, ep.channel):
            t = parse_time(ep.created_at)
            boundary = t if boundary is None or t > boundary else boundary
    if boundary is None:
        return False
    changed = False
    for c in cands:
        if not c.ref.startswith("mem:"):
            continue
        row = row_of(engine, c.ref)
        if row is None:
            continue
        written = parse_time(row.created_at)
        hours = (boundary - written).total_seconds() / 3600
        factor = episode_factor(hours, settings.episode_decay_rate, settings.episode_decay_floor)
        if factor < 1.0:
            changed = True
            c.prior = factor
            if c.cosine is not None:
                c.cosine *= factor
            if c.rsf is not None:
                c.rsf *= factor
                c.fused = c.rsf
    return changed
