"""The lexical read model: the fold of memory and episode texts into per-agent indexes, and its snapshot."""

from __future__ import annotations

from typing import Any, Final

from memstream.projections.lexical.bm25 import bm25
from memstream.projections.lexical.index import AgentIndex
from memstream.projections.lexical.keyword import keyword
from memstream.projections.lexical.text import keyword_terms, query_tokens
from memstream.projections.scope import ScopeFilter

SNAPSHOT_VERSION: Final = 2  # 2: English stemming of BM25 tokens


def _text_of_episode(p: dict[str, Any]) -> str:
    kw = p.get("keywords") or ""
    return f"{p['summary']}\n{kw}" if kw else p["summary"]


class LexicalProjection:
    """BM25 (``search``) and keyword (``keyword``) retrieval over memories and episodes
    (docs/lexical.md). Not thread-safe: fold and read from one thread (the API folds just
    before each read)."""

    name = "lexical"

    def __init__(self) -> None:
        self.offset: int = -1
        self.agents: dict[str, AgentIndex] = {}

    def _agent(self, agent_id: str) -> AgentIndex:
        idx = self.agents.get(agent_id)
        if idx is None:
            idx = self.agents[agent_id] = AgentIndex()
        return idx

    # -- the fold -----------------------------------------------------------------------

    def apply(self, offset: int, ev: dict[str, Any]) -> None:
        t = ev["type"]
        idx: AgentIndex | None
        if t == "memory.stored" or t == "episode.archived":
            s = ev["scope"]
            p = ev["payload"]
            idx = self._agent(s["agent_id"])
            if t == "memory.stored":
                ref, text = f"mem:{p['id']}", p["content"]
            else:
                ref, text = f"ep:{p['id']}", _text_of_episode(p)
            old = idx.slot_of.get(ref)
            seq = int(idx.seq[old]) if old is not None else offset  # a re-applied create keeps its place
            idx.add(ref, s.get("project_id", ""), s.get("channel", ""), seq, text)
        elif t == "memory.updated":
            p = ev["payload"]
            if p.get("kind", "mem") != "mem":
                return
            idx = self.agents.get(ev["scope"]["agent_id"])
            ref = f"mem:{p['id']}"
            if idx is None or ref not in idx.slot_of:
                return
            slot = idx.slot_of[ref]
            # The row keeps its bucket and its place in recency; only its text changes.
            idx.add(ref, idx.names[idx.proj[slot]], idx.names[idx.chan[slot]], int(idx.seq[slot]), p["content"])
        elif t == "memory.deleted" or t == "episode.deleted":
            p = ev["payload"]
            idx = self.agents.get(ev["scope"]["agent_id"])
            if idx is not None:
                kind = "ep" if t == "episode.deleted" else p.get("kind", "mem")
                idx.remove(f"{kind}:{p['id']}")
        elif t == "agent_data.deleted":
            p = ev["payload"]
            idx = self.agents.get(ev["scope"]["agent_id"])
            if idx is not None:
                for mid in p.get("memory_ids", ()):
                    idx.remove(f"mem:{mid}")
                for eid in p.get("episode_ids", ()):
                    idx.remove(f"ep:{eid}")

    # -- reads --------------------------------------------------------------------------

    def search(self, scope: ScopeFilter, query: str, k: int) -> list[tuple[str, float]]:
        """BM25 (k1 1.2, b 0.75, Lucene's idf), best first: ``[(ref, score)]``."""
        return [(ref, score) for ref, score, _ in self.search_shares(scope, query, k)]

    def search_shares(self, scope: ScopeFilter, query: str, k: int) -> list[tuple[str, float, float]]:
        """``search`` plus each row's share of the query's IDF mass, in [0, 1]: how much of
        what the query says (by term rarity) the row holds. Recall fusion weighs the lexical
        vote by it (``api/query/recall/fusion.py``)."""
        idx = self.agents.get(scope.agent_id)
        if idx is None or k <= 0:
            return []
        qtoks = query_tokens(query)
        return bm25(idx, scope, qtoks, k) if qtoks else []

    def keyword(self, scope: ScopeFilter, query: str, k: int) -> list[tuple[str, float]]:
        """Rows holding query terms as case-insensitive substrings of their normalised text.

        Terms are the query's whitespace-separated words (edge punctuation stripped; one-letter
        non-CJK terms dropped). Ranked by how many terms a row holds, then newest creation
        first; the score is that count. A term that more than half the agent's rows hold does
        not count unless all terms are that common."""
        return [(ref, score) for ref, score, _ in self.keyword_shares(scope, query, k)]

    def keyword_shares(self, scope: ScopeFilter, query: str, k: int) -> list[tuple[str, float, float]]:
        """``keyword`` plus each row's share of the terms' IDF mass (idf from how many rows
        hold each term as a substring), in [0, 1]."""
        idx = self.agents.get(scope.agent_id)
        if idx is None or k <= 0:
            return []
        terms = keyword_terms(query)
        return keyword(idx, scope, terms, k) if terms else []

    def count(self, scope: ScopeFilter) -> int:
        idx = self.agents.get(scope.agent_id)
        return idx.count(scope) if idx is not None else 0

    # -- snapshot -----------------------------------------------------------------------

    def to_snapshot(self) -> dict[str, Any]:
        agents = {}
        for agent in sorted(self.agents):
            rows = self.agents[agent].live_rows()
            if rows:
                agents[agent] = [list(r) for r in rows]
        return {"version": SNAPSHOT_VERSION, "agents": agents}

    def load_snapshot(self, body: dict[str, Any]) -> None:
        if body.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"lexical snapshot version {body.get('version')!r}, expected {SNAPSHOT_VERSION}")
        self.agents = {}
        for agent, rows in body["agents"].items():
            idx = self._agent(agent)
            for ref, project, channel, seq, text in rows:
                idx.add(ref, project, channel, int(seq), text)
