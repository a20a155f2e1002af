"""Snapshot sidecars: an agent's rows and graphs as binary blobs beside the JSON snapshot."""

from __future__ import annotations

import itertools
import logging
import mmap
import struct
from collections.abc import Iterable, Iterator
from typing import Any, Final

import numpy as np
import orjson

from memstream.projections.vectors.agent import Agent
from memstream.projections.vectors.graph import usearch_index
from memstream.projections.vectors.segment import CHUNK, Segment
from memstream.projections.vectors.spill import page_out, release
from memstream.streams.snapshots import BLOB_PAYLOAD_AT, SnapshotStore

log = logging.getLogger(__name__)

FORMAT: Final = 2


def layout(agents: dict[str, Agent], content_hash: str) -> tuple[dict[str, Any], list[Any]]:
    """The vectors sidecar: a JSON header (arrays as [offset, bytes]) then 64-aligned arrays."""
    parts: list[Any] = []
    pos = 0

    def put(arr: np.ndarray | Iterable[np.ndarray], nbytes: int) -> list[int]:
        nonlocal pos
        at = pos
        if isinstance(arr, np.ndarray):
            parts.append(np.ascontiguousarray(arr))
        else:
            parts.append(arr)  # drawn from as the blob is written (``write``), not now
        pad = (-nbytes) % 64
        if pad:
            parts.append(b"\0" * pad)
        pos += nbytes + pad
        return [at, nbytes]

    entries = []
    for name in sorted(agents):
        ag = agents[name]
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
            if seg.dead or not seg.sorted:
                seg.compact()  # the sidecar holds live rows in recency order
            else:
                seg.index_rows()  # all alive: the rows appended since join the sorted key array
            n = seg.n
            if n == 0:
                continue

            def vec_parts(s: Segment = seg, m: int = n) -> Iterator[np.ndarray]:
                for c, chunk in enumerate(s.chunks):
                    rows = min(CHUNK, m - c * CHUNK)
                    if rows > 0:
                        yield chunk[:rows]
                        # Written: the pages the write read leave the process again, a spilled
                        # chunk's whole, a loaded sidecar's (the rows a restart mapped) by range.
                        if not release(chunk):
                            page_out(chunk)

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
        entries.append(entry)
    return {"format": FORMAT, "hash": content_hash, "agents": entries}, parts


def write(blobs: SnapshotStore, name: str, agents: dict[str, Agent], content_hash: str) -> None:
    """Write both sidecars of a state: ``name`` (the rows) and ``name.hnsw`` (the graphs); then
    the segments' vectors become views of the rows' sidecar, mapped (``rebind``)."""
    header, parts = layout(agents, content_hash)
    head = orjson.dumps(header)
    # Arrays start 64-aligned in the file too, so a mapped sidecar's are aligned in memory.
    head_len = len(head) + (-(BLOB_PAYLOAD_AT + len(head) + 8) % 64)
    blobs.save_blob(name, itertools.chain([struct.pack("<Q", head_len), head.ljust(head_len, b" ")], _drawn(parts)))
    del parts
    rebind(agents, header, map_written(blobs, name), 8 + head_len)
    graphs = []
    for agent in sorted(agents):
        for model, g in sorted(agents[agent].graphs.items()):
            if g.index is not None:
                graphs.append((agent, model, g.index.save()))
    gheader = orjson.dumps({"hash": content_hash, "graphs": [[a, m, len(b)] for a, m, b in graphs]})
    blobs.save_blob(name + ".hnsw", [struct.pack("<Q", len(gheader)), gheader, *(b for _, _, b in graphs)])


def _drawn(parts: list[Any]) -> Iterator[Any]:
    """The parts of a layout in order, an iterator among them (a segment's vectors) drawn one
    chunk at a time as the writer asks: each chunk is written before the next is read, so a
    spilled chunk is released (``vec_parts``) after its write, not before it."""
    for part in parts:
        if isinstance(part, Iterator):
            yield from part
        else:
            yield part


def map_written(blobs: SnapshotStore, name: str) -> memoryview:
    """The payload of a sidecar this process has just written (``save_blob`` fsynced it), as a
    private copy-on-write map, not read back: its pages stay the page cache's until touched."""
    with open(blobs.blob_path(name), "rb") as f:
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY))[BLOB_PAYLOAD_AT:]


def rebind(agents: dict[str, Agent], header: dict[str, Any], mv: memoryview, base: int) -> None:
    """Make every written segment's vectors views of the mapped sidecar ``mv``, holding the same
    values: at a million rows the fold's 1.5 GB of float32 chunks (the process's own memory)
    become file pages the kernel can drop and read again, as after a restart. A row the fold
    then changes (an update, a delete's zeroing) becomes the process's own page; the file keeps
    its bytes. The previous sidecar's map goes with the last view of it."""
    for entry in header["agents"]:
        ag = agents[entry["agent"]]
        for s in entry["segments"]:
            seg = ag.segs[(s["model"], s["kind"])]
            n, dim = s["n"], s["dim"]
            at, nbytes = s["vecs"]
            vecs = np.frombuffer(mv, dtype=np.float32, count=nbytes // 4, offset=base + at).reshape(n, dim)
            seg.chunks = [vecs[c : c + CHUNK] for c in range(0, n, CHUNK)]


def release_pages(mv: memoryview) -> None:
    """Unmap from this process the pages of a mapped sidecar that reading it touched (its
    checksum reads every byte), before anything is written to the map: they stay in the page
    cache, and the rows a search reads come back on their own. Without this a restart at a
    million rows holds all 1.5 GB of vectors resident, though a window search touches 15 MB."""
    m = mv.obj
    if isinstance(m, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        m.madvise(mmap.MADV_DONTNEED)


def collect_garbage(blobs: SnapshotStore, projection: str, keep: set[str]) -> None:
    """Drop sidecars no snapshot refers to: keep ``keep`` and the one the JSON on disk names."""
    try:
        on_disk = blobs.load(projection)
        if on_disk is not None:
            keep.add(on_disk["state"]["blob"])
    except (KeyError, TypeError, AttributeError):
        pass
    for blob in blobs.blob_names(f"{projection}-"):
        if blob.split(".")[0] not in keep:
            blobs.drop_blob(blob)


def read_vectors(mv: memoryview, body: dict[str, Any]) -> tuple[dict[str, Agent], int, int]:
    """The agents (rows and ghosts) of a vectors sidecar, with the counts of rows and ghosts;
    raises ``ValueError`` (and the like) when it is not the sidecar ``body`` names."""
    (head_len,) = struct.unpack_from("<Q", mv, 0)
    header = orjson.loads(bytes(mv[8 : 8 + head_len]))
    if header.get("hash") != body["hash"]:
        raise ValueError("sidecar hash does not match the snapshot")
    base = 8 + head_len

    def arr(spec: list[int], dtype: Any) -> np.ndarray:
        at, nbytes = spec
        if nbytes == 0:
            return np.empty(0, dtype)
        a = np.frombuffer(mv, dtype=dtype, count=nbytes // np.dtype(dtype).itemsize, offset=base + at)
        # A sidecar written before its arrays were aligned in the file, read from a map: copied.
        return a if a.flags.aligned else a.copy()

    agents: dict[str, Agent] = {}
    rows = ghosts = 0
    for entry in header["agents"]:
        ag = agents.get(entry["agent"])
        if ag is None:
            ag = agents[entry["agent"]] = Agent(entry["agent"])
        if entry["model"] is not None:
            ag.model = entry["model"]
        for p, c in entry["buckets"]:
            ag.bucket(p, c)
        gk = arr(entry["ghost_keys"], np.int64).tolist()
        gv = arr(entry["ghost_vals"], np.int64).reshape(-1, 2).tolist()
        ag.ghosts = {k: (b, r) for k, (b, r) in zip(gk, gv, strict=True)}
        ghosts += len(gk)
        for s in entry["segments"]:
            n, dim = s["n"], s["dim"]
            seg = Segment(s["model"], s["kind"], dim, capacity=n + 64)
            seg.keys[:n] = arr(s["keys"], np.int64)
            seg.offs[:n] = arr(s["offs"], np.int64)
            seg.buckets[:n] = arr(s["buckets"], np.int32)
            seg.inv[:n] = arr(s["inv"], np.float32)
            seg.alive[:n] = True
            seg.n = n
            seg.sorted = bool(n < 2 or np.all(np.diff(seg.offs[:n]) > 0))
            vecs = arr(s["vecs"], np.float32).reshape(n, dim)
            # Views of the sidecar, no copy; the last chunk is as long as its rows (appends grow it).
            seg.chunks = [vecs[c : c + CHUNK] for c in range(0, n, CHUNK)]
            seg.index_rows()
            for b, cnt in zip(*np.unique(seg.buckets[:n], return_counts=True), strict=True):
                ag.counts[int(b)] += int(cnt)
            ag.segs[(s["model"], s["kind"])] = seg
            rows += n
    if rows != body["rows"] or ghosts != body["ghosts"]:
        raise ValueError("sidecar counts do not match the snapshot")
    return agents, rows, ghosts


def read_graphs(blobs: SnapshotStore, name: str, content_hash: str) -> dict[tuple[str, str], Any]:
    """The graphs of a graph sidecar by (agent, model); none when it is missing or unusable."""
    Index = usearch_index()
    loaded: dict[tuple[str, str], Any] = {}
    mv = blobs.load_blob(name)
    if mv is None:
        return loaded
    try:
        (hl,) = struct.unpack_from("<Q", mv, 0)
        gh = orjson.loads(bytes(mv[8 : 8 + hl]))
        if gh["hash"] != content_hash:
            raise ValueError("graph sidecar belongs to another state")
        at = 8 + hl
        for agent, model, size in gh["graphs"]:
            loaded[(agent, model)] = Index.restore(mv[at : at + size])
            at += size
    except (ValueError, KeyError, TypeError, struct.error, RuntimeError, orjson.JSONDecodeError) as exc:
        log.warning("graph sidecar %s unusable (%s); graphs are rebuilt from the vectors", name, exc)
        loaded = {}
    return loaded
