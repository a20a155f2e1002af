"""The vector read model: embeddings of memories and episodes, searched by cosine.

State (what the digest covers). One *row* per live memory or episode that carries a vector:
``(kind, id, agent, project, channel, model, recency, vector)``, where ``recency`` is the log
offset of the row's ``memory.stored`` / ``episode.archived`` event and ``vector`` the raw
little-endian float32 attachment exactly as the event carried it. Memories and episodes stored
without an embedding are kept as *ghosts* ``(kind, id, agent, project, channel, recency)``, so a
later ``memory.updated`` with a vector or a ``memory.reembedded`` gives them a row at their
original recency and in their original scope (update and re-embed events carry the caller's
scope, not the row's).

Fold. ``memory.stored`` / ``episode.archived`` add a row (a ghost without an embedding);
``memory.updated`` replaces the vector (without an embedding the row becomes a ghost: its old
vector described the old text); ``memory.reembedded`` gives a row or ghost (``kind`` says
memory or episode) a vector of the event's model *beside* the ones it has, so during a re-embed
a record sits in two models' segments and recall keeps answering from the agent's model;
``embedding.switched`` makes its model the agent's and drops every other model's vectors;
``memory.deleted``, ``episode.deleted`` and ``agent_data.deleted`` drop rows and ghosts.
Nothing else changes recency: an update or re-embed keeps its row's place in the window. An
agent's model (part of the state) is the model of its first vector until a switch names another,
the same rule the decider applies when it refuses writes embedded with any other model.

Search (CONTRACTS R8, seed 000 §4). For one agent and its model, rows in scope (R10) are
ordered newest first by recency. The *window* is the newest ``window`` memories plus the newest
``window`` episodes (each kind is scanned under the window), searched exactly: one
matrix-vector product over contiguous float32 rows, then the best candidates re-scored in
float64 so scores do not depend on where a row happens to sit in memory. With ``reach >
window`` the rows ranked ``window+1 .. reach`` (again per kind) form the *far* list, searched
exactly when it is small and through a per-(agent, model) usearch HNSW graph otherwise (over-
fetch, filter to the band, re-score exactly, fall back to exact when the filter leaves too few).
Ties break by recency (newer first). The graph is derived data, not state: it is built in
batches once an (agent, model) collection passes ``hnsw_threshold`` rows, extended in batches
of ``flush_batch``, rebuilt when a third of it is removed, and rows not yet in it are scanned
exactly.

Storage. Per agent, per (model, kind) a *segment*: rows in recency order (append order; an
out-of-order append, which only a model change makes, marks the segment for a sort at its next
search), vectors in fixed chunks of ``CHUNK`` rows (no large reallocations), deletes as
tombstones compacted when a quarter of the segment is dead. Scope is a small per-agent table of
(project, channel) buckets and a bucket column; when a scope admits every bucket of the agent
the window is simply the segment's tail.

Snapshot. ``to_snapshot()`` is a few fields: the content hash of the whole state (a sum of
per-row sha256 values modulo 2^256, kept incrementally, so equal states give equal snapshots
whatever order built them and digesting costs nothing), counts, and the name of a binary
sidecar holding the rows. With a ``SnapshotStore`` attached (``blobs=``), taking a snapshot
writes that sidecar (content-addressed by the hash; plus the graphs in a second sidecar) when
the state changed since the last one; loading verifies the sidecar's checksum and its hash
against the JSON, and a missing or damaged sidecar is treated as no snapshot: the projection
stays empty with offset -1 and is rebuilt from the log. A damaged graph sidecar only costs a
graph rebuild from the loaded vectors.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import orjson

from memstream.projections.scope import ScopeFilter

log = logging.getLogger(__name__)

MEM: Final = 0
EP: Final = 1
_KIND_OF: Final = {"mem": MEM, "ep": EP}
_PREFIX: Final = ("mem:", "ep:")

CHUNK: Final = 8192  # rows per vector chunk
FORMAT: Final = 2
_MOD: Final = 1 << 256
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

Hit = tuple[str, float]


def row_key(kind: int, ident: int) -> int:
    """One integer per record of an agent (also the graph's key): ``id << 1 | kind``."""
    return (ident << 1) | kind


def ref_of(key: int) -> str:
    return f"{_PREFIX[key & 1]}{key >> 1}"


def _enc(text: str) -> bytes:
    raw = text.encode("utf-8", "surrogatepass")
    return struct.pack("<I", len(raw)) + raw


def _row_hash(key: int, agent: str, bucket: tuple[str, str], model: str, recency: int, vec: bytes) -> int:
    h = hashlib.sha256(b"row")
    h.update(struct.pack("<qq", key, recency))
    h.update(_enc(agent) + _enc(bucket[0]) + _enc(bucket[1]) + _enc(model))
    h.update(vec)
    return int.from_bytes(h.digest(), "little")


def _ghost_hash(key: int, agent: str, bucket: tuple[str, str], recency: int) -> int:
    h = hashlib.sha256(b"ghost")
    h.update(struct.pack("<qq", key, recency))
    h.update(_enc(agent) + _enc(bucket[0]) + _enc(bucket[1]))
    return int.from_bytes(h.digest(), "little")


def _model_hash(agent: str, model: str) -> int:
    h = hashlib.sha256(b"model")
    h.update(_enc(agent) + _enc(model))
    return int.from_bytes(h.digest(), "little")


def _inv_norm(vec: np.ndarray) -> float:
    norm = float(np.sqrt(np.dot(vec.astype(np.float64), vec.astype(np.float64))))
    return 1.0 / norm if norm > 0 and math.isfinite(norm) else 0.0


# -- segments ---------------------------------------------------------------------------------


class _Segment:
    """The rows of one (agent, model, kind), recency-ordered when ``sorted``."""

    __slots__ = (
        "alive",
        "buckets",
        "chunks",
        "dead",
        "dim",
        "inv",
        "keys",
        "kind",
        "model",
        "n",
        "offs",
        "pos_of",
        "sorted",
    )

    def __init__(self, model: str, kind: int, dim: int, capacity: int = 64) -> None:
        self.model = model
        self.kind = kind
        self.dim = dim
        self.n = 0
        self.dead = 0
        self.sorted = True
        self.keys = np.empty(capacity, np.int64)
        self.offs = np.empty(capacity, np.int64)
        self.buckets = np.empty(capacity, np.int32)
        self.alive = np.empty(capacity, np.bool_)
        self.inv = np.empty(capacity, np.float32)  # 1/|v| (0 for a zero vector): derived, not state
        self.chunks: list[np.ndarray] = []
        self.pos_of: dict[int, int] = {}

    @property
    def live(self) -> int:
        return self.n - self.dead

    def _grow(self, need: int) -> None:
        cap = max(need, int(self.keys.shape[0] * 1.5) + 64)
        for name in ("keys", "offs", "buckets", "alive", "inv"):
            old = getattr(self, name)
            new = np.empty(cap, old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)

    def append(self, key: int, off: int, bucket: int, vec: np.ndarray) -> None:
        n = self.n
        if n == self.keys.shape[0]:
            self._grow(n + 1)
        c, i = divmod(n, CHUNK)
        if c == len(self.chunks):
            self.chunks.append(np.empty((CHUNK, self.dim), np.float32))
        self.chunks[c][i] = vec
        if n and off < self.offs[n - 1]:
            self.sorted = False
        self.keys[n] = key
        self.offs[n] = off
        self.buckets[n] = bucket
        self.alive[n] = True
        self.inv[n] = _inv_norm(vec)
        self.pos_of[key] = n
        self.n = n + 1

    def row(self, pos: int) -> np.ndarray:
        return self.chunks[pos // CHUNK][pos % CHUNK]

    def kill(self, key: int) -> int:
        pos = self.pos_of.pop(key)
        self.alive[pos] = False
        self.dead += 1
        return pos

    def gather(self, pos: np.ndarray) -> np.ndarray:
        """Vectors at ``pos`` (any order), as one (len, dim) float32 array."""
        out = np.empty((len(pos), self.dim), np.float32)
        if not len(pos):
            return out
        ci = pos // CHUNK
        order = np.argsort(ci, kind="stable")
        sci = ci[order]
        cuts = np.flatnonzero(np.diff(sci)) + 1
        for grp in np.split(order, cuts):
            c = int(ci[grp[0]])
            out[grp] = self.chunks[c][pos[grp] - c * CHUNK]
        return out

    def scores(self, pos: np.ndarray, q: np.ndarray) -> np.ndarray:
        """float32 cosines (up to |q|) of rows at ascending positions ``pos`` with ``q``."""
        out = np.empty(len(pos), np.float32)
        if not len(pos):
            return out
        ci = pos // CHUNK
        cuts = np.flatnonzero(np.diff(ci)) + 1
        start = 0
        for end in [*cuts.tolist(), len(pos)]:
            c = int(ci[start])
            local = pos[start:end] - c * CHUNK
            lo, hi = int(local[0]), int(local[-1]) + 1
            chunk = self.chunks[c]
            if (end - start) * 2 >= hi - lo:  # dense: one product over the span, then pick
                s = chunk[lo:hi] @ q
                out[start:end] = s if end - start == hi - lo else s[local - lo]
            else:
                out[start:end] = chunk[local] @ q
            start = end
        out *= self.inv[pos]
        return out

    def compact(self) -> None:
        """Drop tombstones and restore recency order (positions change)."""
        n = self.n
        order = np.flatnonzero(self.alive[:n])
        if not self.sorted:
            order = order[np.argsort(self.offs[order], kind="stable")]
        m = len(order)
        chunks = []
        for a in range(0, m, CHUNK):
            block = np.empty((CHUNK, self.dim), np.float32)
            sel = order[a : a + CHUNK]
            block[: len(sel)] = self.gather(sel)
            chunks.append(block)
        self.chunks = chunks
        for name in ("keys", "offs", "buckets", "inv"):
            arr = getattr(self, name)
            arr[:m] = arr[order]
        self.alive[:m] = True
        self.n = m
        self.dead = 0
        self.sorted = True
        self.pos_of = dict(zip(self.keys[:m].tolist(), range(m), strict=True))

    def maybe_compact(self) -> None:
        if not self.sorted or (self.dead > 1024 and self.dead * 4 > self.n):
            self.compact()

    def select(self, lut: np.ndarray | None, hi: int) -> np.ndarray:
        """Ascending positions of the newest ``hi`` live rows admitted by ``lut`` (sorted segment)."""
        n = self.n
        if hi <= 0 or n == 0:
            return np.empty(0, np.int64)
        if lut is None and self.dead == 0:
            return np.arange(max(0, n - hi), n, dtype=np.int64)
        found: list[np.ndarray] = []
        total = 0
        end = n
        block = max(2 * hi, 32_768)
        while end > 0 and total < hi:
            start = max(0, end - block)
            m = self.alive[start:end]
            if lut is not None:
                m = m & lut[self.buckets[start:end]]
            p = np.flatnonzero(m) + start
            found.append(p)
            total += len(p)
            end = start
            block *= 2
        allp = found[0] if len(found) == 1 else np.concatenate(found[::-1])
        return allp[max(0, len(allp) - hi) :]

    def newest_live_offset(self) -> int:
        n = self.n
        if self.live == 0:
            return -1
        if not self.sorted:
            return int(self.offs[:n][self.alive[:n]].max())
        end = n
        while end > 0:
            start = max(0, end - 4096)
            p = np.flatnonzero(self.alive[start:end])
            if len(p):
                return int(self.offs[start + p[-1]])
            end = start
        return -1


# -- the graph (derived, never part of the state) --------------------------------------------


def _usearch_index() -> Any:
    """usearch's Index class, imported only when a graph is first needed.

    onnxruntime (the default embedder's runtime) is imported first when it is installed:
    importing it *after* usearch's compiled module crashes the process (SIGSEGV at import,
    usearch 2.26.6 + onnxruntime 1.31.1 on this machine), and the engine loads its embedder
    lazily, so a graph built during restore would otherwise take the server down at the first
    store. The other order is fine.
    """
    with contextlib.suppress(ImportError):
        import onnxruntime  # noqa: F401
    from usearch.index import Index

    return Index


class _Graph:
    """usearch HNSW over one (agent, model): both kinds, keyed by ``row_key``."""

    __slots__ = ("index", "pending", "removed")

    def __init__(self) -> None:
        self.index: Any = None
        self.pending: set[int] = set()
        self.removed = 0


@dataclass(frozen=True, slots=True)
class HnswConfig:
    dtype: str = "f16"
    connectivity: int = 16
    expansion_add: int = 128
    expansion_search: int = 64


# -- per agent --------------------------------------------------------------------------------


class _Agent:
    __slots__ = ("bucket_ids", "bucket_list", "counts", "ghosts", "graphs", "lut_cache", "model", "name", "segs")

    def __init__(self, name: str) -> None:
        self.name = name
        # The model recall searches: the first one a write embedded with, then whatever the
        # last ``embedding.switched`` named (the decider's rule, so both agree on every log).
        self.model: str | None = None
        self.bucket_ids: dict[tuple[str, str], int] = {}
        self.bucket_list: list[tuple[str, str]] = []
        # live rows per bucket (all models, both kinds: a record being re-embedded counts twice)
        self.counts: list[int] = []
        self.segs: dict[tuple[str, int], _Segment] = {}
        self.ghosts: dict[int, tuple[int, int]] = {}  # key -> (bucket, recency)
        self.graphs: dict[str, _Graph] = {}
        self.lut_cache: dict[tuple[str | None, str | None], np.ndarray | None] = {}

    def bucket(self, project: str, channel: str) -> int:
        b = self.bucket_ids.get((project, channel))
        if b is None:
            b = self.bucket_ids[(project, channel)] = len(self.bucket_list)
            self.bucket_list.append((project, channel))
            self.counts.append(0)
            self.lut_cache.clear()
        return b

    def lut(self, scope: ScopeFilter) -> np.ndarray | None:
        """Admitted buckets as a boolean table; None when the scope admits every bucket."""
        ck = (scope.project_id, scope.channel)
        if ck in self.lut_cache:
            return self.lut_cache[ck]
        table = np.array([scope.admits(p, c) for p, c in self.bucket_list], dtype=np.bool_)
        out = None if table.all() else table
        self.lut_cache[ck] = out
        return out

    def find_all(self, key: int) -> list[_Segment]:
        """The segments holding the key: one, or one per model while a re-embed is under way."""
        kind = key & 1
        return [seg for (_, k), seg in self.segs.items() if k == kind and key in seg.pos_of]

    def model_live(self, model: str) -> int:
        return sum(s.live for (m, _), s in self.segs.items() if m == model)


# -- the projection ---------------------------------------------------------------------------


class VectorProjection:
    """See the module docstring. Not thread-safe: folds and searches must not overlap (the
    engine serialises them under its read lock)."""

    name = "vectors"
    needs_vectors = True

    def __init__(
        self,
        blobs: Any = None,
        *,
        hnsw: bool = True,
        hnsw_threshold: int = 20_000,
        flush_batch: int = 1024,
        exact_far_limit: int = 16_384,
        hnsw_config: HnswConfig | None = None,
    ) -> None:
        self.blobs = blobs  # a SnapshotStore (save_blob/load_blob), or None: no sidecars
        self.hnsw = hnsw
        self.hnsw_threshold = hnsw_threshold
        self.flush_batch = flush_batch
        self.exact_far_limit = exact_far_limit
        self.hnsw_config = hnsw_config or HnswConfig()
        self._offset = -1
        self._reject_offset = False
        self.snapshot_rejected = False
        self._agents: dict[str, _Agent] = {}
        self._hash = 0
        self._rows = 0
        self._ghosts = 0
        self._blob_hash: int | None = None
        self.stats = {"exact_far": 0, "hnsw_far": 0, "hnsw_fallback": 0, "graph_builds": 0}

    # ``offset`` is a property only so that a snapshot whose sidecar failed verification can
    # refuse the offset the runner assigns right after ``load_snapshot`` (the runner restores
    # the JSON's offset unconditionally): the projection then starts from -1, i.e. replays.
    @property
    def offset(self) -> int:
        return self._offset

    @offset.setter
    def offset(self, value: int) -> None:
        if self._reject_offset:
            self._reject_offset = False
            self._offset = -1
            return
        self._offset = value

    # -- fold -------------------------------------------------------------------------------

    def apply(self, offset: int, ev: dict[str, Any]) -> None:
        t = ev["type"]
        if t not in _HANDLED:
            return
        if offset <= self._offset:
            return  # at-least-once delivery: seen already
        p = ev["payload"]
        agent_id = ev["scope"]["agent_id"]
        ag: _Agent | None
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
            self._add_model(ag, row_key(_KIND_OF.get(p.get("kind", "mem"), MEM), p["id"]), ev, offset)
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
        else:  # agent_data.deleted
            ag = self._agents.get(agent_id)
            if ag is not None:
                for mid in p.get("memory_ids", ()):
                    self._forget(ag, row_key(MEM, mid))
                for eid in p.get("episode_ids", ()):
                    self._forget(ag, row_key(EP, eid))
        if t.endswith("deleted") and agent_id in self._agents:
            ag = self._agents[agent_id]
            for model, g in ag.graphs.items():
                if g.index is None and g.pending:  # a graph dropped for too many removals
                    self._maintain(ag, model, g)
        self._offset = offset

    def _agent(self, agent_id: str) -> _Agent:
        ag = self._agents.get(agent_id)
        if ag is None:
            ag = self._agents[agent_id] = _Agent(agent_id)
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

    def _add_row(self, ag: _Agent, key: int, bucket: int, recency: int, model: str, vec: np.ndarray) -> None:
        kind = key & 1
        seg = ag.segs.get((model, kind))
        if seg is None:
            seg = ag.segs[(model, kind)] = _Segment(model, kind, vec.shape[0])
        elif seg.dim != vec.shape[0]:
            log.warning("%s: model %s vector of dim %d, expected %d; skipped", ref_of(key), model, len(vec), seg.dim)
            self._add_ghost(ag, key, bucket, recency)
            return
        seg.append(key, recency, bucket, vec)
        ag.counts[bucket] += 1
        self._rows += 1
        self._hash = (
            self._hash + _row_hash(key, ag.name, ag.bucket_list[bucket], model, recency, vec.tobytes())
        ) % _MOD
        if self.hnsw:
            g = ag.graphs.get(model)
            if g is None:
                g = ag.graphs[model] = _Graph()
            g.pending.add(key)
            self._maintain(ag, model, g)

    def _add_ghost(self, ag: _Agent, key: int, bucket: int, recency: int) -> None:
        ag.ghosts[key] = (bucket, recency)
        self._ghosts += 1
        self._hash = (self._hash + _ghost_hash(key, ag.name, ag.bucket_list[bucket], recency)) % _MOD

    def _remove_row(self, ag: _Agent, seg: _Segment, key: int) -> tuple[int, int]:
        pos = seg.pos_of[key]
        bucket, recency = int(seg.buckets[pos]), int(seg.offs[pos])
        vec = seg.row(pos).tobytes()
        self._hash = (self._hash - _row_hash(key, ag.name, ag.bucket_list[bucket], seg.model, recency, vec)) % _MOD
        seg.kill(key)
        ag.counts[bucket] -= 1
        self._rows -= 1
        g = ag.graphs.get(seg.model)
        if g is not None:
            if key in g.pending:
                g.pending.discard(key)
            elif g.index is not None:
                g.index.remove(key)
                g.removed += 1
                if g.removed > 1000 and g.removed * 3 > len(g.index) + g.removed:
                    g.index = None  # rebuilt from the live rows at the next maintenance
                    g.removed = 0
                    g.pending = self._model_keys(ag, seg.model)
        if seg.dead > 1024 and seg.dead * 4 > seg.n:
            seg.compact()
        return bucket, recency

    def _forget(self, ag: _Agent, key: int) -> tuple[int, int] | None:
        where = None
        for seg in ag.find_all(key):
            where = self._remove_row(ag, seg, key)
        if where is not None:
            return where
        ghost = ag.ghosts.pop(key, None)
        if ghost is not None:
            self._ghosts -= 1
            self._hash = (self._hash - _ghost_hash(key, ag.name, ag.bucket_list[ghost[0]], ghost[1])) % _MOD
        return ghost

    def _overwrite(self, ag: _Agent, seg: _Segment, key: int, vec: np.ndarray) -> None:
        """Replace a row's vector in place: it keeps its position, so the window needs no sort."""
        pos = seg.pos_of[key]
        bucket, recency = int(seg.buckets[pos]), int(seg.offs[pos])
        bk = ag.bucket_list[bucket]
        old = seg.row(pos)
        self._hash = (self._hash - _row_hash(key, ag.name, bk, seg.model, recency, old.tobytes())) % _MOD
        self._hash = (self._hash + _row_hash(key, ag.name, bk, seg.model, recency, vec.tobytes())) % _MOD
        old[:] = vec
        seg.inv[pos] = _inv_norm(vec)
        g = ag.graphs.get(seg.model)
        if g is not None:
            if g.index is not None and key not in g.pending:
                g.index.remove(key)
                g.removed += 1
            g.pending.add(key)
            self._maintain(ag, seg.model, g)

    def _revector(self, ag: _Agent, key: int, ev: dict[str, Any], offset: int) -> None:
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

    def _add_model(self, ag: _Agent, key: int, ev: dict[str, Any], offset: int) -> None:
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
            pos = segs[0].pos_of[key]
            bucket, recency = int(segs[0].buckets[pos]), int(segs[0].offs[pos])
        else:
            ghost = ag.ghosts.get(key)
            if ghost is None:
                return  # unknown record (deleted, or never stored here)
            self._forget(ag, key)
            bucket, recency = ghost
        self._set_model(ag, model, only_if_unset=True)
        self._add_row(ag, key, bucket, recency, model, vec)

    def _switch(self, ag: _Agent, model: str) -> None:
        """Recall moves to ``model``; vectors of every other model are dropped (the decider
        accepted the switch only once every live record had one of ``model``)."""
        self._set_model(ag, model)
        for (m, _kind), seg in list(ag.segs.items()):
            if m == model:
                continue
            for key in list(seg.pos_of):
                others = [s for s in ag.find_all(key) if s.model == model]
                bucket, recency = self._remove_row(ag, seg, key)
                if not others:  # only in a log the decider did not write; keep the record known
                    self._add_ghost(ag, key, bucket, recency)
            del ag.segs[(m, _kind)]
        for m in [m for m in ag.graphs if m != model]:
            del ag.graphs[m]

    def _set_model(self, ag: _Agent, model: str, *, only_if_unset: bool = False) -> None:
        if ag.model == model or (only_if_unset and ag.model is not None):
            return
        if ag.model is not None:
            self._hash = (self._hash - _model_hash(ag.name, ag.model)) % _MOD
        ag.model = model
        self._hash = (self._hash + _model_hash(ag.name, model)) % _MOD

    # -- the graph ----------------------------------------------------------------------------

    def _model_keys(self, ag: _Agent, model: str) -> set[int]:
        keys: set[int] = set()
        for (m, _), seg in ag.segs.items():
            if m == model:
                keys.update(seg.pos_of)
        return keys

    def _maintain(self, ag: _Agent, model: str, g: _Graph, force: bool = False) -> None:
        if not g.pending:
            return
        if g.index is None:
            if ag.model_live(model) < self.hnsw_threshold and not (force and ag.model_live(model)):
                return
        elif len(g.pending) < self.flush_batch and not force:
            return
        self._flush(ag, model, g)

    def _flush(self, ag: _Agent, model: str, g: _Graph) -> None:
        Index = _usearch_index()
        keys = np.fromiter(g.pending, dtype=np.int64, count=len(g.pending))
        keys.sort()
        if g.index is None:
            dim = next(s.dim for (m, _), s in ag.segs.items() if m == model)
            cfg = self.hnsw_config
            g.index = Index(
                ndim=dim,
                metric="cos",
                dtype=cfg.dtype,
                connectivity=cfg.connectivity,
                expansion_add=cfg.expansion_add,
                expansion_search=cfg.expansion_search,
            )
            g.removed = 0
            self.stats["graph_builds"] += 1
        step = 65_536
        for kind in (MEM, EP):
            seg = ag.segs.get((model, kind))
            if seg is None:
                continue
            kk = keys[(keys & 1) == kind]
            for a in range(0, len(kk), step):
                part = kk[a : a + step]
                pos = np.fromiter((seg.pos_of[k] for k in part.tolist()), dtype=np.int64, count=len(part))
                g.index.add(part.astype(np.uint64), seg.gather(pos), threads=0)
        g.pending.clear()

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
        key = row_key(_KIND_OF[kind], int(ident))
        seg = ag.segs.get((model, key & 1))
        return seg is not None and key in seg.pos_of

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
        segs = [s for s in (ag.segs.get((model, MEM)), ag.segs.get((model, EP))) if s is not None and s.live]
        if not segs:
            return [], []
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        if q.shape[0] != segs[0].dim:
            raise ValueError(f"query has {q.shape[0]} components; model {model!r} vectors have {segs[0].dim}")
        qn = float(np.sqrt(np.dot(q.astype(np.float64), q.astype(np.float64))))
        if not math.isfinite(qn) or qn == 0.0:
            return [], []
        lut = ag.lut(scope)
        far = reach > window
        win_c: list[tuple[_Segment, np.ndarray]] = []
        bands: list[tuple[_Segment, np.ndarray]] = []
        for seg in segs:
            seg.maybe_compact()
            sel = seg.select(lut, reach if far else window)
            cut = max(0, len(sel) - window)
            win_c.append((seg, sel[cut:]))
            if far and cut:
                bands.append((seg, sel[:cut]))
        window_hits = self._exact(win_c, q, qn, k)
        if not bands:
            return window_hits, []
        return window_hits, self._far(ag, model, lut, bands, q, qn, k)

    def _exact(self, parts: list[tuple[_Segment, np.ndarray]], q: np.ndarray, qn: float, k: int) -> list[Hit]:
        cands: list[tuple[_Segment, np.ndarray]] = []
        take = 2 * k + 8
        for seg, pos in parts:
            if not len(pos):
                continue
            s = seg.scores(pos, q)
            if len(pos) > take:
                top = np.argpartition(-s, take - 1)[:take]
                # Every row tied with the last candidate comes along, so the recency tie-break
                # below sees all of them whatever their order in memory.
                pos = pos[s >= s[top].min() - 1e-6]
            cands.append((seg, pos))
        return self._rescore(cands, q, qn, k)

    @staticmethod
    def _rescore(cands: list[tuple[_Segment, np.ndarray]], q: np.ndarray, qn: float, k: int) -> list[Hit]:
        """Exact float64 cosines of candidate rows, sorted (cosine desc, recency desc)."""
        q64 = q.astype(np.float64)
        rows: list[tuple[float, int, int]] = []
        for seg, pos in cands:
            if not len(pos):
                continue
            v = seg.gather(pos).astype(np.float64)
            dots = (v * q64).sum(axis=1)
            norms = np.sqrt((v * v).sum(axis=1))
            with np.errstate(divide="ignore", invalid="ignore"):
                cos = np.nan_to_num(np.where(norms > 0, dots / (norms * qn), 0.0), nan=-1.0, posinf=1.0, neginf=-1.0)
            rows.extend(zip(cos.tolist(), seg.offs[pos].tolist(), seg.keys[pos].tolist(), strict=True))
        rows.sort(key=lambda r: (-r[0], -r[1]))
        return [(ref_of(key), cos) for cos, _, key in rows[:k]]

    def _far(
        self,
        ag: _Agent,
        model: str,
        lut: np.ndarray | None,
        bands: list[tuple[_Segment, np.ndarray]],
        q: np.ndarray,
        qn: float,
        k: int,
    ) -> list[Hit]:
        size = sum(len(pos) for _, pos in bands)
        g = ag.graphs.get(model)
        if size <= self.exact_far_limit or g is None or g.index is None or len(g.index) == 0:
            self.stats["exact_far"] += 1
            return self._exact(bands, q, qn, k)
        bounds = {seg.kind: (seg, int(pos[0]), int(pos[-1])) for seg, pos in bands}
        # Over-fetch in proportion to how much of the graph the band is, re-score exactly. Ten
        # candidates per wanted row (at least 100) measured 0.98 recall@10 on real vectors.
        fraction = size / max(1, len(g.index) + len(g.pending))
        count = min(len(g.index), 4096, math.ceil(max(10 * k, 100) / fraction))
        g.index.expansion_search = max(self.hnsw_config.expansion_search, count)
        found = g.index.search(q, count)
        keys = np.asarray(found.keys, dtype=np.int64)
        picked: dict[int, list[int]] = {MEM: [], EP: []}
        for key in keys.tolist():
            b = bounds.get(key & 1)
            if b is None:
                continue
            seg, lo, hi = b
            pos = seg.pos_of.get(key)
            if pos is None or not (lo <= pos <= hi):
                continue
            if lut is not None and not lut[seg.buckets[pos]]:
                continue
            picked[key & 1].append(pos)
        for key in g.pending:  # rows not in the graph yet: scanned exactly
            b = bounds.get(key & 1)
            if b is None:
                continue
            seg, lo, hi = b
            pos = seg.pos_of.get(key)
            if pos is not None and lo <= pos <= hi and (lut is None or lut[seg.buckets[pos]]):
                picked[key & 1].append(pos)
        total = len(picked[MEM]) + len(picked[EP])
        if total < min(k, size):
            self.stats["hnsw_fallback"] += 1
            return self._exact(bands, q, qn, k)
        self.stats["hnsw_far"] += 1
        cands = []
        for kind, plist in picked.items():
            if plist:
                seg = bounds[kind][0]
                cands.append((seg, np.unique(np.asarray(plist, dtype=np.int64))))
        return self._exact(cands, q, qn, k)

    # -- snapshots ----------------------------------------------------------------------------

    @property
    def content_hash(self) -> str:
        return f"{self._hash:064x}"

    def _blob_name(self) -> str:
        return f"{self.name}-{self.content_hash[:32]}"

    def to_snapshot(self) -> dict[str, Any]:
        body = {
            "format": FORMAT,
            "hash": self.content_hash,
            "rows": self._rows,
            "ghosts": self._ghosts,
            "blob": self._blob_name(),
        }
        if self.blobs is not None and self._blob_hash != self._hash:
            self._write_blobs()
        return body

    def _layout(self) -> tuple[dict[str, Any], list[Any]]:
        """The vectors sidecar: a JSON header (arrays as [offset, bytes]) then 64-aligned arrays."""
        parts: list[Any] = []
        pos = 0

        def put(arr: np.ndarray | Iterable[np.ndarray], nbytes: int) -> list[int]:
            nonlocal pos
            at = pos
            if isinstance(arr, np.ndarray):
                parts.append(np.ascontiguousarray(arr))
            else:
                parts.extend(arr)
            pad = (-nbytes) % 64
            if pad:
                parts.append(b"\0" * pad)
            pos += nbytes + pad
            return [at, nbytes]

        agents = []
        for name in sorted(self._agents):
            ag = self._agents[name]
            gk = np.fromiter(ag.ghosts, dtype=np.int64, count=len(ag.ghosts))
            gv = np.array(list(ag.ghosts.values()), dtype=np.int64).reshape(-1, 2)
            entry: dict[str, Any] = {
                "agent": name,
                "model": ag.model,
                "buckets": [list(b) for b in ag.bucket_list],
                "ghost_keys": put(gk, gk.nbytes),
                "ghost_vals": put(gv, gv.nbytes),
                "segments": [],
            }
            for (model, kind), seg in sorted(ag.segs.items()):
                seg.compact()
                n = seg.n
                if n == 0:
                    continue

                def vec_parts(s: _Segment = seg, m: int = n) -> Iterator[np.ndarray]:
                    for c, chunk in enumerate(s.chunks):
                        rows = min(CHUNK, m - c * CHUNK)
                        if rows > 0:
                            yield chunk[:rows]

                entry["segments"].append(
                    {
                        "model": model,
                        "kind": kind,
                        "dim": seg.dim,
                        "n": n,
                        "keys": put(seg.keys[:n], n * 8),
                        "offs": put(seg.offs[:n], n * 8),
                        "buckets": put(seg.buckets[:n], n * 4),
                        "inv": put(seg.inv[:n], n * 4),
                        "vecs": put(vec_parts(), n * seg.dim * 4),
                    }
                )
            agents.append(entry)
        return {"format": FORMAT, "hash": self.content_hash, "agents": agents}, parts

    def _write_blobs(self) -> None:
        header, parts = self._layout()
        head = orjson.dumps(header)
        head_len = len(head) + (-(len(head) + 8) % 64)
        name = self._blob_name()
        self.blobs.save_blob(name, [struct.pack("<Q", head_len), head.ljust(head_len, b" "), *parts])
        graphs = []
        for agent in sorted(self._agents):
            for model, g in sorted(self._agents[agent].graphs.items()):
                if g.index is not None:
                    graphs.append((agent, model, g.index.save()))
        gheader = orjson.dumps({"hash": self.content_hash, "graphs": [[a, m, len(b)] for a, m, b in graphs]})
        self.blobs.save_blob(name + ".hnsw", [struct.pack("<Q", len(gheader)), gheader, *(b for _, _, b in graphs)])
        self._blob_hash = self._hash
        self._collect_garbage(keep={name})

    def _collect_garbage(self, keep: set[str]) -> None:
        """Drop sidecars no snapshot refers to: keep the new one and the one on disk's JSON."""
        try:
            on_disk = self.blobs.load(self.name)
            if on_disk is not None:
                keep.add(on_disk["state"]["blob"])
        except (KeyError, TypeError, AttributeError):
            pass
        for blob in self.blobs.blob_names(f"{self.name}-"):
            if blob.split(".")[0] not in keep:
                self.blobs.drop_blob(blob)

    def _reset(self) -> None:
        self._agents = {}
        self._hash = 0
        self._rows = 0
        self._ghosts = 0
        self._blob_hash = None

    def _reject(self, why: str) -> None:
        log.warning("vector snapshot rejected (%s); the projection will be rebuilt from the log", why)
        self._reset()
        self._offset = -1
        self._reject_offset = True
        self.snapshot_rejected = True

    def load_snapshot(self, body: dict[str, Any]) -> None:
        self._reset()
        self.snapshot_rejected = False
        self._reject_offset = False
        if body.get("format") != FORMAT:
            return self._reject(f"format {body.get('format')!r}")
        if self.blobs is None:
            return self._reject("no sidecar store attached")
        mv = self.blobs.load_blob(body["blob"])
        if mv is None:
            return self._reject(f"sidecar {body['blob']} missing or damaged")
        try:
            self._load_vectors(mv, body)
        except (ValueError, KeyError, TypeError, struct.error, orjson.JSONDecodeError) as exc:
            self._reset()
            return self._reject(f"sidecar {body['blob']} unreadable: {exc}")
        self._blob_hash = self._hash
        self._load_graphs(body["blob"] + ".hnsw")
        return None

    def _load_vectors(self, mv: memoryview, body: dict[str, Any]) -> None:
        (head_len,) = struct.unpack_from("<Q", mv, 0)
        header = orjson.loads(bytes(mv[8 : 8 + head_len]))
        if header.get("hash") != body["hash"]:
            raise ValueError("sidecar hash does not match the snapshot")
        base = 8 + head_len

        def arr(spec: list[int], dtype: Any) -> np.ndarray:
            at, nbytes = spec
            if nbytes == 0:
                return np.empty(0, dtype)
            return np.frombuffer(mv, dtype=dtype, count=nbytes // np.dtype(dtype).itemsize, offset=base + at)

        rows = ghosts = 0
        for entry in header["agents"]:
            ag = self._agent(entry["agent"])
            if entry["model"] is not None:
                self._set_model(ag, entry["model"])
            for p, c in entry["buckets"]:
                ag.bucket(p, c)
            gk = arr(entry["ghost_keys"], np.int64).tolist()
            gv = arr(entry["ghost_vals"], np.int64).reshape(-1, 2).tolist()
            ag.ghosts = {k: (b, r) for k, (b, r) in zip(gk, gv, strict=True)}
            ghosts += len(gk)
            for s in entry["segments"]:
                n, dim = s["n"], s["dim"]
                seg = _Segment(s["model"], s["kind"], dim, capacity=n + 64)
                seg.keys[:n] = arr(s["keys"], np.int64)
                seg.offs[:n] = arr(s["offs"], np.int64)
                seg.buckets[:n] = arr(s["buckets"], np.int32)
                seg.inv[:n] = arr(s["inv"], np.float32)
                seg.alive[:n] = True
                seg.n = n
                seg.sorted = bool(n < 2 or np.all(np.diff(seg.offs[:n]) > 0))
                vecs = arr(s["vecs"], np.float32).reshape(n, dim)
                full, rest = divmod(n, CHUNK)
                seg.chunks = [vecs[c * CHUNK : (c + 1) * CHUNK] for c in range(full)]  # views, no copy
                if rest:
                    last = np.empty((CHUNK, dim), np.float32)
                    last[:rest] = vecs[full * CHUNK :]
                    seg.chunks.append(last)
                seg.pos_of = dict(zip(seg.keys[:n].tolist(), range(n), strict=True))
                for b, cnt in zip(*np.unique(seg.buckets[:n], return_counts=True), strict=True):
                    ag.counts[int(b)] += int(cnt)
                ag.segs[(s["model"], s["kind"])] = seg
                rows += n
        self._rows, self._ghosts = rows, ghosts
        self._hash = int(body["hash"], 16)
        if rows != body["rows"] or ghosts != body["ghosts"]:
            raise ValueError("sidecar counts do not match the snapshot")

    def _load_graphs(self, name: str) -> None:
        if not self.hnsw:
            return
        Index = _usearch_index()

        loaded: dict[tuple[str, str], Any] = {}
        mv = self.blobs.load_blob(name)
        if mv is not None:
            try:
                (hl,) = struct.unpack_from("<Q", mv, 0)
                gh = orjson.loads(bytes(mv[8 : 8 + hl]))
                if gh["hash"] != self.content_hash:
                    raise ValueError("graph sidecar belongs to another state")
                at = 8 + hl
                for agent, model, size in gh["graphs"]:
                    loaded[(agent, model)] = Index.restore(mv[at : at + size])
                    at += size
            except (ValueError, KeyError, TypeError, struct.error, RuntimeError, orjson.JSONDecodeError) as exc:
                log.warning("graph sidecar %s unusable (%s); graphs are rebuilt from the vectors", name, exc)
                loaded = {}
        for ag in self._agents.values():
            for model in {m for m, _ in ag.segs}:
                g = ag.graphs[model] = _Graph()
                keys = self._model_keys(ag, model)
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
