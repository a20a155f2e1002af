"""The lexical read model: the fold of memory and episode texts into per-agent indexes, and its snapshot."""

from __future__ import annotations

import hashlib
import logging
import struct
from collections.abc import Iterable
from sys import intern
from typing import Any, Final

import numpy as np
import orjson

from memstream.projections.lexical import sidecar
from memstream.projections.lexical.bm25 import bm25
from memstream.projections.lexical.index import AgentIndex, Row
from memstream.projections.lexical.keyword import keyword
from memstream.projections.lexical.rows import SnapshotRows, rows_of
from memstream.projections.lexical.text import keyword_terms, query_tokens
from memstream.projections.scope import ScopeFilter
from memstream.projections.vectors.sidecar import release_pages
from memstream.projections.vectors.spill import page_out
from memstream.streams.decision.whole_agent import names_every_record
from memstream.streams.snapshots import SnapshotStore

log = logging.getLogger(__name__)

# 2: English stemming of BM25 tokens; 3: the analysed index in a sidecar (``sidecar.py``);
# 4: the rows as columns (``rows.py``).
SNAPSHOT_VERSION: Final = 4
# Snapshots this version still loads: a version-2 one by analysing its texts again.
LOADS: Final = frozenset({2, 3, 4})
SIDECARS: Final = frozenset({3, 4})  # the versions whose snapshot names a sidecar
_HASHED_ROWS: Final = 4096  # rows dumped per part while hashing them (``_rows_hash``)


def _text_of_episode(p: dict[str, Any]) -> str:
    kw = p.get("keywords") or ""
    return f"{p['summary']}\n{kw}" if kw else p["summary"]


class LexicalProjection:
    """BM25 (``search``) and keyword (``keyword``) retrieval over memories and episodes
    (docs/lexical.md). Not thread-safe: fold and read from one thread (the API folds just
    before each read)."""

    name = "lexical"

    def __init__(self, blobs: SnapshotStore | None = None) -> None:
        self.blobs = blobs  # where the snapshot's sidecar goes; None: no sidecar (loads analyse)
        self.offset: int = -1
        self.agents: dict[str, AgentIndex] = {}
        self._blob: str | None = None  # the sidecar the last snapshot named
        # The sidecar the lexical checkpoint on disk names, as this process knows it: set by a
        # restore and once the runner has saved a checkpoint (``drop_stale_sidecars``). Until
        # then it is read from the file, which at 1M memories means parsing ~0.14 GB of rows.
        self._on_disk: str | None = None
        self._on_disk_known = False
        self._mapped: memoryview | None = None  # the loaded sidecar the packed postings are views of

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
            # Refs interned: the versions and history read models hold the same strings.
            if t == "memory.stored":
                ref, text = intern(f"mem:{p['id']}"), p["content"]
            else:
                ref, text = intern(f"ep:{p['id']}"), _text_of_episode(p)
            old = idx.slot_of.get(ref)
            seq = int(idx.seq[old]) if old is not None else offset  # a re-applied create keeps its place
            idx.add(ref, s.get("project_id", ""), s.get("channel", ""), seq, text)
        elif t == "memory.updated":
            p = ev["payload"]
            if p.get("kind", "mem") != "mem":
                return
            idx = self.agents.get(ev["scope"]["agent_id"])
            ref = intern(f"mem:{p['id']}")
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
            if idx is not None and names_every_record(p):
                idx.remove_many(list(idx.slot_of))  # every record of the agent: all its rows
            elif idx is not None:
                refs = [f"mem:{mid}" for mid in p.get("memory_ids", ())]
                idx.remove_many(refs + [f"ep:{eid}" for eid in p.get("episode_ids", ())])

    def apply_many(self, events: Iterable[tuple[int, dict[str, Any]]]) -> None:
        """``apply`` of each (offset, event) in turn, with the same result: runs of new texts
        go to each agent's index as one batch (``AgentIndex.add_many``), flushed before any
        other event and before a text whose ref is pending already."""
        pending: dict[str, list[Row]] = {}  # agent -> rows not added yet, in order
        pending_refs: set[str] = set()

        def flush() -> None:
            for agent, rows in pending.items():
                self._agent(agent).add_many(rows)
            pending.clear()
            pending_refs.clear()

        for offset, ev in events:
            t = ev["type"]
            if t == "memory.stored" or t == "episode.archived":
                s, p = ev["scope"], ev["payload"]
                ref = intern(f"mem:{p['id']}" if t == "memory.stored" else f"ep:{p['id']}")
                if ref in pending_refs:
                    flush()
                idx = self.agents.get(s["agent_id"])
                if idx is not None and ref in idx.slot_of:
                    flush()
                    self.apply(offset, ev)  # a re-applied create keeps its place
                    continue
                text = p["content"] if t == "memory.stored" else _text_of_episode(p)
                rows = pending.get(s["agent_id"])
                if rows is None:
                    rows = pending[s["agent_id"]] = []
                rows.append((ref, s.get("project_id", ""), s.get("channel", ""), offset, text))
                pending_refs.add(ref)
            else:
                if pending:
                    flush()
                self.apply(offset, ev)
        flush()

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
        """The logical content (canonical: it is what digests compare), naming the sidecar
        that holds the analysed index of the same content, written here if it is not there yet."""
        # The sidecar first, then the rows: held together they were the top of a cold start's
        # peak (docs/benchmarks.md, "The lexical checkpoint's peak (wave 10)").
        rows_hash = self._rows_hash()
        name = f"{self.name}-{rows_hash}"
        if self.blobs is not None and not self.blobs.blob_path(name).exists():
            sidecar.write(self.blobs, name, self.agents, rows_hash)
            if self._mapped is not None:  # the write read all of it: its clean pages go back
                page_out(np.frombuffer(self._mapped, dtype=np.uint8))
            keep = {name, *self._maybe_on_disk()}
            for old in self.blobs.blob_names(f"{self.name}-"):
                if old not in keep:
                    self.blobs.drop_blob(old)
        self._blob = name
        agents = {}
        for agent in sorted(self.agents):
            if self.agents[agent].slot_of:
                agents[agent] = SnapshotRows.of_index(self.agents[agent]).to_json()
        return {"version": SNAPSHOT_VERSION, "agents": agents, "blob": name}

    def _rows_hash(self) -> str:
        """The hash of the live rows, the sidecar's name: of ``orjson.dumps`` of each agent's rows
        as a [ref, project, channel, seq, text] list each (version 3's layout, so a version-3
        checkpoint's sidecar keeps its name), made a part of the rows at a time, so they are
        never all held for it. The sidecar's format is hashed in: a checkpoint of the same rows
        by a newer release writes its own sidecar instead of keeping an older format's under
        the same name."""
        digest = hashlib.sha256(b"%d:{" % sidecar.FORMAT)
        sep = b""
        for agent in sorted(self.agents):
            idx = self.agents[agent]
            if not idx.slot_of:
                continue
            digest.update(sep + orjson.dumps(agent) + b":[")
            for i, part in enumerate(idx.snapshot_row_parts(_HASHED_ROWS)):
                digest.update((b"," if i else b"") + orjson.dumps(part)[1:-1])
            digest.update(b"]")
            sep = b","
        digest.update(b"}")
        return digest.hexdigest()[:32]

    def _maybe_on_disk(self) -> set[str]:
        """The sidecars the checkpoint on disk may name, kept until a new checkpoint replaces it.
        Known here: the one it named when restored or last confirmed saved, and the one the
        previous snapshot named (a save that failed after its rename left that one on disk).
        Otherwise read from the file."""
        if self._on_disk_known:
            return {b for b in (self._on_disk, self._blob) if b is not None}
        assert self.blobs is not None
        try:
            body = self.blobs.load(self.name)
            return {str(body["state"]["blob"])} if body is not None else set()
        except (KeyError, TypeError):
            return set()

    def drop_stale_sidecars(self) -> None:
        """Once the snapshot naming the current sidecar is on disk, drop every other one (the
        runner calls it after each checkpoint): a deleted or erased text must not linger in one."""
        self._on_disk, self._on_disk_known = self._blob, True
        if self.blobs is not None and self._blob is not None:
            for old in self.blobs.blob_names(f"{self.name}-"):
                if old != self._blob:
                    self.blobs.drop_blob(old)

    def load_snapshot(self, body: dict[str, Any]) -> None:
        """Reads the analysed index from the sidecar the snapshot names; without a sound one
        (missing, damaged, another state's, or a version-2 snapshot) analyses the texts again."""
        version = body.get("version")
        if version not in LOADS:
            raise ValueError(f"lexical snapshot version {version!r}, expected one of {sorted(LOADS)}")
        self.agents = {}
        self._mapped = None
        rows_by_agent = rows_of(body)
        self._on_disk, self._on_disk_known = body.get("blob"), True
        if version in SIDECARS and self.blobs is not None:
            name = body["blob"]
            mv = self.blobs.map_blob(name)  # mapped: the packed postings stay views of it (sidecar.py)
            if mv is not None:
                try:
                    self.agents = sidecar.read(mv, name.removeprefix(f"{self.name}-"), rows_by_agent)
                    self._blob = name  # the one to keep when a restore drops stale sidecars
                    self._mapped = mv
                    release_pages(mv)  # the checksum read every page; queries read back the few they need
                    return
                except (ValueError, KeyError, TypeError, IndexError, struct.error, orjson.JSONDecodeError) as exc:
                    log.warning("lexical sidecar %s unusable (%s); re-analysing the texts", name, exc)
                    self.agents = {}
            else:
                log.warning("lexical sidecar %s missing or damaged; re-analysing the texts", name)
        for agent, rows in rows_by_agent.items():
            self._agent(agent).add_many(list(rows.rows()))
