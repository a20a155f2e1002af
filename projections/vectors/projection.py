"""The vector read model: the fold, the reads, and its snapshot (the rows go to sidecars)."""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable
from typing import Any, Final

import numpy as np
import orjson

from memstream.projections.scope import ScopeFilter
from memstream.projections.vectors import search as vector_search
from memstream.projections.vectors import sidecar
from memstream.projections.vectors.agent import Agent
from memstream.projections.vectors.content_hash import MOD, ghost_hash, model_hash, row_hash, row_hash_sum
from memstream.projections.vectors.graph import Graph, HnswConfig, add_pending
from memstream.projections.vectors.rows import EP, KIND_OF, MEM, Hit, ref_of, row_key
from memstream.projections.vectors.segment import Segment, inv_norm
from memstream.projections.vectors.spill import Spill
from memstream.streams.decision.whole_agent import names_every_record
from memstream.streams.snapshots import SnapshotStore

log = logging.getLogger(__name__)

_HANDLED: Final = frozenset(
    {
        "memory.stored",
        "memory.updated",
        "memory.reembedded",
        "embedding.switched",
        "memory.deleted",
        "episode.archived",
        "episode.deleted",
        "agent_data.deleted",
    }
)


class SnapshotRejected(ValueError):
    """A snapshot whose sidecar is missing, damaged or not its own: no snapshot at all."""


class VectorProjection:
    """Embeddings of memories and episodes, searched by cosine (docs/vectors.md). Not
    thread-safe: folds and searches must not overlap (the engine serialises them under its
    read lock)."""

    name = "vectors"
    needs_vectors = True

    def __init__(
        self,
        blobs: SnapshotStore | None = None,
        *,
        hnsw: bool = True,
        hnsw_threshold: int = 20_000,
        flush_batch: int = 1024,
        exact_far_limit: int = 16_384,
        hnsw_config: HnswConfig | None = None,
    ) -> None:
        self.blobs = blobs  # where snapshot sidecars go; None: no sidecars
        # Full vector chunks are file-backed there too, out of the process once full (spill.py).
        self.spill = Spill(blobs.directory) if blobs is not None else None
        self.hnsw = hnsw
        self.hnsw_threshold = hnsw_threshold
        self.flush_batch = flush_batch
        self.exact_far_limit = exact_far_limit
        self.hnsw_config = hnsw_config or HnswConfig()
        self.offset = -1
        self._agents: dict[str, Agent] = {}
        self._hash = 0
        self._rows = 0
        self._ghosts = 0
        self._blob_hash: int | None = None
        self.stats = {"exact_far": 0, "hnsw_far": 0, "hnsw_fallback": 0, "graph_builds": 0}

    # -- fold -------------------------------------------------------------------------------

    # Sees events an erasure redacted (projections/redaction.py): their agent and model stay.
    sees_redacted = True

    def apply(self, offset: int, ev: dict[str, Any]) -> None:
        t = ev["type"]
        if t not in _HANDLED:
            return
        if offset <= self.offset:
            return  # at-least-once delivery: seen already
        p = ev["payload"]
        agent_id = ev["scope"]["agent_id"]
        ag: Agent | None
        if ev.get("redacted"):
            # An erased record's store (its key destroyed): no row, but the agent and its model
            # are what the live fold kept after dropping the row (projections/redaction.py).
            if (t == "memory.stored" or t == "episode.archived") and p.get("embedding"):
                self._set_model(self._agent(agent_id), p["embedding"]["model"], only_if_unset=True)
            elif t == "memory.stored" or t == "episode.archived":
                self._agent(agent_id)
            self.offset = offset
            return
        if t == "memory.stored" or t == "episode.archived":
            ag = self._agent(agent_id)
            key = row_key(MEM if t == "memory.stored" else EP, p["id"])
            self._forget(ag, key)  # a re-used id replaces (never happens in a decided log)
            s = ev["scope"]
            bucket = ag.bucket(s.get("project_id", ""), s.get("channel", ""))
            vec = self._vector(ev, offset)
            if vec is None:
                self._add_ghost(ag, key, bucket, offset)
            else:
                self._set_model(ag, p["embedding"]["model"], only_if_unset=True)
                self._add_row(ag, key, bucket, offset, p["embedding"]["model"], vec)
        elif t == "memory.updated":
            ag = self._agents.get(agent_id)
            if ag is None:
                return
            self._revector(ag, row_key(MEM, p["id"]), ev, offset)
        elif t == "memory.reembedded":
            ag = self._agents.get(agent_id)
            if ag is None:
                return
            self._add_model(ag, row_key(KIND_OF.get(p.get("kind", "mem"), MEM), p["id"]), ev, offset)
        elif t == "embedding.switched":
            self._switch(self._agent(agent_id), p["model"])
        elif t == "memory.deleted":
            ag = self._agents.get(agent_id)
            if ag is not None:
                self._forget(ag, row_key(MEM, p["id"]))
        elif t == "episode.deleted":
            ag = self._agents.get(agent_id)
            if ag is not None:
                self._forget(ag, row_key(EP, p["id"]))
        else:  # agent_data.deleted, or an erasure (projections/redaction.py)
            ag = self._agents.get(agent_id)
            if ag is not None:
                if names_every_record(p):  # every record of the agent: all its rows and ghosts
                    keys = [k for seg in ag.segs.values() for k in seg.live_keys()] + list(ag.ghosts)
                else:
                    keys = [row_key(MEM, mid) for mid in p.get("memory_ids", ())]
                    keys += [row_key(EP, eid) for eid in p.get("episode_ids", ())]
                built: list[tuple[str, Graph]] = []
                if p.get("erased"):
                    # A graph only marks a removed node: its vector stays in the index and its
                    # file. An erasure rebuilds the agent's graphs from the live rows instead
                    # (so the rows need not leave the old graphs one by one first).
                    built = [(model, g) for model, g in ag.graphs.items() if g.index is not None]
                    for _, g in built:
                        g.index = None
                        g.removed = 0
                self._forget_many(ag, keys)
                for model, g in built:
                    g.pending = ag.model_keys(model)
        if t.endswith("deleted") and agent_id in self._agents:
            ag = self._agents[agent_id]
            for model, g in ag.graphs.items():
                if g.index is None and g.pending:  # a graph dropped for too many removals
                    self._maintain(ag, model, g)
        self.offset = offset

    def _agent(self, agent_id: str) -> Agent:
        ag = self._agents.get(agent_id)
        if ag is None:
            ag = self._agents[agent_id] = Agent(agent_id)
        return ag

    @staticmethod
    def _vector(ev: dict[str, Any], offset: int) -> np.ndarray | None:
        header = ev["payload"].get("embedding")
        if not header:
            return None
        blob = ev.get("vector")
        dim = int(header.get("dim", 0))
        if blob is None or header.get("dtype", "f32") != "f32" or dim <= 0 or len(blob) != 4 * dim:
            # A header without a matching attachment is a damaged record; every replay reads
            # the same bytes, so skipping it (as if unembedded) keeps live and rebuilt equal.
            log.warning("event at offset %d declares an embedding but carries no matching vector", offset)
            return None
        return np.frombuffer(blob, dtype="<f4")

    def _add_row(self, ag: Agent, key: int, bucket: int, recency: int, model: str, vec: np.ndarray) -> None:
        kind = key & 1
        seg = ag.segs.get((model, kind))
        if seg is None:
            seg = ag.segs[(model, kind)] = Segment(model, kind, vec.shape[0], spill=self.spill)
        elif seg.dim != vec.shape[0]:
            log.warning("%s: model %s vector of dim %d, expected %d; skipped", ref_of(key), model, len(vec), seg.dim)
            self._add_ghost(ag, key, bucket, recency)
            return
        seg.append(key, recency, bucket, vec)
        ag.counts[bucket] += 1
        self._rows += 1
        self._hash = (self._hash + row_hash(key, ag.name, ag.bucket_list[bucket], model, recency, vec.tobytes())) % MOD
        if self.hnsw:
            g = ag.graphs.get(model)
            if g is None:
                g = ag.graphs[model] = Graph()
            g.pending.add(key)
            self._maintain(ag, model, g)

    def _add_ghost(self, ag: Agent, key: int, bucket: int, recency: int) -> None:
        ag.ghosts[key] = (bucket, recency)
        self._ghosts += 1
        self._hash = (self._hash + ghost_hash(key, ag.name, ag.bucket_list[bucket], recency)) % MOD

    def _remove_row(self, ag: Agent, seg: Segment, key: int) -> tuple[int, int]:
        pos = seg.at(key)
        bucket, recency = int(seg.buckets[pos]), int(seg.offs[pos])
        vec = seg.row(pos).tobytes()
        self._hash = (self._hash - row_hash(key, ag.name, ag.bucket_list[bucket], seg.model, recency, vec)) % MOD
        seg.kill(key)
        # A dead row waits for compaction; zeroed, no checkpoint sidecar keeps its vector
        # (an erased one must not survive anywhere: docs/erasure.md).
        seg.row(pos)[:] = 0
        ag.counts[bucket] -= 1
        self._rows -= 1
        g = ag.graphs.get(seg.model)
        if g is not None:
            if key in g.pending:
                g.pending.discard(key)
            elif g.index is not None:
                g.index.remove(key)
                g.removed += 1
                self._after_removals(ag, seg, g)
        seg.maybe_compact_dead()
        return bucket, recency

    @staticmethod
    def _after_removals(ag: Agent, seg: Segment, g: Graph) -> None:
        if g.index is not None and g.removed > 1000 and g.removed * 3 > len(g.index) + g.removed:
            g.index = None  # rebuilt from the live rows at the next maintenance
            g.removed = 0
            g.pending = ag.model_keys(seg.model)

    def _forget(self, ag: Agent, key: int) -> tuple[int, int] | None:
        where = None
        for seg in ag.find_all(key):
            where = self._remove_row(ag, seg, key)
        if where is not None:
            return where
        ghost = ag.ghosts.pop(key, None)
        if ghost is not None:
            self._ghosts -= 1
            self._hash = (self._hash - ghost_hash(key, ag.name, ag.bucket_list[ghost[0]], ghost[1])) % MOD
        return ghost

    def _forget_many(self, ag: Agent, keys: list[int]) -> None:
        """``_forget`` of every key, the rows found in one pass per segment: an erasure or an
        agent's deletion drops up to all of an agent's rows, which one by one took seconds."""
        if not keys:
            return
        wanted = np.unique(np.asarray(keys, dtype=np.int64))
        found: list[np.ndarray] = []
        for seg in list(ag.segs.values()):
            n = seg.n
            pos = np.flatnonzero(np.isin(seg.keys[:n], wanted[(wanted & 1) == seg.kind]) & seg.alive[:n])
            if len(pos):
                found.append(seg.keys[pos])
                self._drop_rows(ag, seg, pos)
        if ag.ghosts:
            held = np.unique(np.concatenate(found)) if found else np.empty(0, np.int64)
            for key in wanted[~np.isin(wanted, held)].tolist():
                ghost = ag.ghosts.pop(key, None)
                if ghost is not None:
                    self._ghosts -= 1
                    self._hash = (self._hash - ghost_hash(key, ag.name, ag.bucket_list[ghost[0]], ghost[1])) % MOD

    def _drop_rows(self, ag: Agent, seg: Segment, pos: np.ndarray) -> None:
        """Drop the live rows at ascending positions ``pos``: their hash terms, counts, graph
        entries; zeroed, as ``_remove_row`` leaves each (no sidecar may keep an erased vector)."""
        keys, offs, buckets = seg.keys[pos], seg.offs[pos], seg.buckets[pos]
        rows = (seg.row(p).tobytes() for p in pos.tolist())
        self._hash = (self._hash - row_hash_sum(ag.name, ag.bucket_list, seg.model, keys, offs, buckets, rows)) % MOD
        seg.kill_many(pos)
        for b, c in enumerate(np.bincount(buckets, minlength=len(ag.counts)).tolist()):
            ag.counts[b] -= c
        self._rows -= len(pos)
        g = ag.graphs.get(seg.model)
        if g is not None:
            key_list = keys.tolist()
            if g.index is not None:
                in_index = [k for k in key_list if k not in g.pending]
                if in_index:
                    g.index.remove(np.asarray(in_index, dtype=np.uint64))
                    g.removed += len(in_index)
            if g.pending:
                g.pending.difference_update(key_list)
            self._after_removals(ag, seg, g)
        seg.maybe_compact_dead()

    def _overwrite(self, ag: Agent, seg: Segment, key: int, vec: np.ndarray) -> None:
        """Replace a row's vector in place: it keeps its position, so the window needs no sort."""
        pos = seg.at(key)
        bucket, recency = int(seg.buckets[pos]), int(seg.offs[pos])
        bk = ag.bucket_list[bucket]
        old = seg.row(pos)
        self._hash = (self._hash - row_hash(key, ag.name, bk, seg.model, recency, old.tobytes())) % MOD
        self._hash = (self._hash + row_hash(key, ag.name, bk, seg.model, recency, vec.tobytes())) % MOD
        old[:] = vec
        seg.inv[pos] = inv_norm(vec)
        g = ag.graphs.get(seg.model)
        if g is not None:
            if g.index is not None and key not in g.pending:
                g.index.remove(key)
                g.removed += 1
            g.pending.add(key)
            self._maintain(ag, seg.model, g)

    def _revector(self, ag: Agent, key: int, ev: dict[str, Any], offset: int) -> None:
        """An update: the new text's vector (or none) replaces every vector the row had."""
        segs = ag.find_all(key)
        vec = self._vector(ev, offset)
        model = ev["payload"]["embedding"]["model"] if vec is not None else None
        if len(segs) == 1 and vec is not None and segs[0].model == model and segs[0].dim == vec.shape[0]:
            self._overwrite(ag, segs[0], key, vec)
            return
        where = self._forget(ag, key)
        if where is None:
            return  # unknown record (deleted, or never stored here): nothing to re-vector
        bucket, recency = where
        if vec is None or model is None:
            self._add_ghost(ag, key, bucket, recency)
        else:
            self._set_model(ag, model, only_if_unset=True)
            self._add_row(ag, key, bucket, recency, model, vec)

    def _add_model(self, ag: Agent, key: int, ev: dict[str, Any], offset: int) -> None:
        """A re-embed: the row gains (or refreshes) its vector of the event's model and keeps
        the others, so recall goes on answering from the agent's model until the switch."""
        vec = self._vector(ev, offset)
        if vec is None:
            return
        model = ev["payload"]["embedding"]["model"]
        segs = ag.find_all(key)
        same = [seg for seg in segs if seg.model == model]
        if same and same[0].dim == vec.shape[0]:
            self._overwrite(ag, same[0], key, vec)
            return
        if same:
            self._remove_row(ag, same[0], key)
            segs = ag.find_all(key)
        if segs:
            pos = segs[0].at(key)
            bucket, recency = int(segs[0].buckets[pos]), int(segs[0].offs[pos])
        else:
            ghost = ag.ghosts.get(key)
            if ghost is None:
                return  # unknown record (deleted, or never stored here)
            self._forget(ag, key)
            bucket, recency = ghost
        self._set_model(ag, model, only_if_unset=True)
        self._add_row(ag, key, bucket, recency, model, vec)

    def _switch(self, ag: Agent, model: str) -> None:
        """Recall moves to ``model``; vectors of every other model are dropped (the decider
        accepted the switch only once every live record had one of ``model``)."""
        self._set_model(ag, model)
        for (m, _kind), seg in list(ag.segs.items()):
            if m == model:
                continue
            for key in seg.live_keys():
                others = [s for s in ag.find_all(key) if s.model == model]
                bucket, recency = self._remove_row(ag, seg, key)
                if not others:  # only in a log the decider did not write; keep the record known
                    self._add_ghost(ag, key, bucket, recency)
            del ag.segs[(m, _kind)]
        for m in [m for m in ag.graphs if m != model]:
            del ag.graphs[m]

    def _set_model(self, ag: Agent, model: str, *, only_if_unset: bool = False) -> None:
        if ag.model == model or (only_if_unset and ag.model is not None):
            return
        if ag.model is not None:
            self._hash = (self._hash - model_hash(ag.name, ag.model)) % MOD
        ag.model = model
        self._hash = (self._hash + model_hash(ag.name, model)) % MOD

    # -- the graph ----------------------------------------------------------------------------

    def _maintain(self, ag: Agent, model: str, g: Graph, force: bool = False) -> None:
        if not g.pending:
            return
        if g.index is None:
            if ag.model_live(model) < self.hnsw_threshold and not (force and ag.model_live(model)):
                return
        elif len(g.pending) < self.flush_batch and not force:
            return
        dim = next(s.dim for (m, _), s in ag.segs.items() if m == model)
        segments = [seg for seg in (ag.segs.get((model, MEM)), ag.segs.get((model, EP))) if seg is not None]
        if add_pending(g, dim, segments, self.hnsw_config):
            self.stats["graph_builds"] += 1

    def flush(self) -> None:
        """Add every pending row to its graph now (graphs above the threshold only)."""
        for ag in self._agents.values():
            for model, g in ag.graphs.items():
                self._maintain(ag, model, g, force=g.index is not None)

    # -- reads --------------------------------------------------------------------------------

    def count(self, scope: ScopeFilter) -> int:
        """Rows with vectors (memories + episodes, every model) in scope."""
        ag = self._agents.get(scope.agent_id)
        if ag is None:
            return 0
        return sum(c for (p, ch), c in zip(ag.bucket_list, ag.counts, strict=True) if scope.admits(p, ch))

    def model_of(self, agent_id: str) -> str | None:
        """The model recall searches for an agent (None before its first vector)."""
        ag = self._agents.get(agent_id)
        return ag.model if ag is not None else None

    def holds(self, agent_id: str, ref: str, model: str) -> bool:
        """Whether the record (``mem:<id>`` / ``ep:<id>``) has a vector of ``model``."""
        ag = self._agents.get(agent_id)
        if ag is None:
            return False
        kind, _, ident = ref.partition(":")
        key = row_key(KIND_OF[kind], int(ident))
        seg = ag.segs.get((model, key & 1))
        return seg is not None and seg.has(key)

    def models(self, agent_id: str) -> dict[str, int]:
        """Live rows per model for an agent."""
        ag = self._agents.get(agent_id)
        out: dict[str, int] = {}
        if ag is not None:
            for (m, _), seg in ag.segs.items():
                if seg.live:
                    out[m] = out.get(m, 0) + seg.live
        return out

    def search(
        self,
        scope: ScopeFilter,
        query: np.ndarray,
        k: int,
        *,
        window: int = 10_000,
        reach: int = 0,
        model: str | None = None,
    ) -> tuple[list[Hit], list[Hit]]:
        """(window_hits, far_hits), each best first, at most ``k`` each, as (ref, cosine)."""
        ag = self._agents.get(scope.agent_id)
        if ag is None or k <= 0 or window <= 0:
            return [], []
        if model is None:
            model = ag.model
            if model is None:
                return [], []
        expansion = self.hnsw_config.expansion_search
        return vector_search.search(
            ag, scope, query, k, window, reach, model, self.exact_far_limit, expansion, self.stats
        )

    def cosines(
        self, agent_id: str, query: np.ndarray, refs: Iterable[str], model: str | None = None
    ) -> dict[str, float]:
        """Each record's (``mem:<id>`` / ``ep:<id>``) exact cosine with ``query``, as ``search``
        reports it, for records no search returned: recall's second stage reads a candidate's
        neighbours this way. Records without a ``model`` vector (default: the agent's model)
        are left out; scope is the caller's to check."""
        ag = self._agents.get(agent_id)
        model = model or (ag.model if ag is not None else None)
        if ag is None or model is None:
            return {}
        keys = []
        for ref in refs:
            kind, _, ident = ref.partition(":")
            if kind in KIND_OF and ident.isdigit():
                keys.append(row_key(KIND_OF[kind], int(ident)))
        return dict(vector_search.cosines(ag, query, keys, model))

    # -- snapshots ----------------------------------------------------------------------------

    @property
    def content_hash(self) -> str:
        return f"{self._hash:064x}"

    def drop_stale_sidecars(self) -> None:
        """Once the snapshot naming the current sidecar is on disk, drop every older sidecar
        (the runner calls it after each checkpoint): an erased vector must not linger in one."""
        if self.blobs is not None:
            sidecar.collect_garbage(self.blobs, self.name, keep={self._blob_name()})

    def _blob_name(self) -> str:
        return f"{self.name}-{self.content_hash[:32]}"

    def to_snapshot(self) -> dict[str, Any]:
        name = self._blob_name()
        body = {
            "format": sidecar.FORMAT,
            "hash": self.content_hash,
            "rows": self._rows,
            "ghosts": self._ghosts,
            "blob": name,
        }
        # Written again when gone too: another writer of the directory (a rebuild beside the
        # server) collects the sidecars its own checkpoint does not name.
        if self.blobs is not None and (self._blob_hash != self._hash or not self.blobs.blob_path(name).exists()):
            sidecar.write(self.blobs, name, self._agents, self.content_hash)
            self._blob_hash = self._hash
            sidecar.collect_garbage(self.blobs, self.name, keep={name})
        return body

    def _reset(self) -> None:
        self._agents = {}
        self._hash = 0
        self._rows = 0
        self._ghosts = 0
        self._blob_hash = None

    def load_snapshot(self, body: dict[str, Any]) -> None:
        """Raises ``SnapshotRejected`` (the projection left empty) when the sidecar is missing,
        damaged or not this snapshot's: the runner then rebuilds the projection from the log."""
        self._reset()
        if body.get("format") != sidecar.FORMAT:
            raise SnapshotRejected(f"format {body.get('format')!r}")
        if self.blobs is None:
            raise SnapshotRejected("no sidecar store attached")
        mv = self.blobs.map_blob(body["blob"])  # the vectors stay in the page cache, not copied
        if mv is None:
            raise SnapshotRejected(f"sidecar {body['blob']} missing or damaged")
        try:
            self._agents, self._rows, self._ghosts = sidecar.read_vectors(mv, body)
        except (ValueError, KeyError, TypeError, struct.error, orjson.JSONDecodeError) as exc:
            self._reset()
            raise SnapshotRejected(f"sidecar {body['blob']} unreadable: {exc}") from exc
        sidecar.release_pages(mv)
        for ag in self._agents.values():
            for seg in ag.segs.values():
                seg.spill = self.spill  # rows appended from here on spill too
        self._hash = int(body["hash"], 16)
        self._blob_hash = self._hash
        if self.hnsw:
            self._attach_graphs(sidecar.read_graphs(self.blobs, body["blob"] + ".hnsw", self.content_hash))

    def _attach_graphs(self, loaded: dict[tuple[str, str], Any]) -> None:
        """Give every (agent, model) its graph: the loaded one when it holds exactly that model's
        rows (those it lacks are pending), else one rebuilt from the rows."""
        for ag in self._agents.values():
            for model in {m for m, _ in ag.segs}:
                g = ag.graphs[model] = Graph()
                keys = ag.model_keys(model)
                index = loaded.get((ag.name, model))
                if index is not None:
                    arr = np.fromiter(keys, dtype=np.uint64, count=len(keys))
                    inside = np.asarray(index.contains(arr), dtype=np.bool_) if len(arr) else np.empty(0, bool)
                    if int(inside.sum()) == len(index):
                        g.index = index
                        g.pending = set(arr[~inside].astype(np.int64).tolist())
                        continue
                    log.warning("graph of %s/%s does not match its rows; rebuilt", ag.name, model)
                g.pending = keys
                self._maintain(ag, model, g)

    # -- introspection (bench, tests) ---------------------------------------------------------

    def memory_bytes(self) -> dict[str, int]:
        vec = meta = graph = 0
        for ag in self._agents.values():
            for seg in ag.segs.values():
                vec += sum(c.nbytes for c in seg.chunks)
                meta += seg.keys.nbytes + seg.offs.nbytes + seg.buckets.nbytes + seg.alive.nbytes
            for g in ag.graphs.values():
                if g.index is not None:
                    graph += int(g.index.memory_usage)
        return {"vectors": vec, "row_metadata": meta, "graphs": graph}
