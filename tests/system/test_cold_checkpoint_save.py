"""A checkpoint is written piece by piece (streams/snapshots.py ``save``): hashed and written as
its JSON is made, the header (a fixed width) filled in last; it reads back as before, and a
checkpoint written the old way (the size not padded) still loads."""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson

from memstream.streams import json_pieces
from memstream.streams.snapshots import SnapshotStore


def body() -> dict[str, object]:
    rows = [[i, f"text {i}", {"k": [i, i + 1]}] for i in range(20_000)]
    return {"offset": 41, "state": {"version": 3, "rows": rows, "agents": {"a": rows[:10]}}}


def test_a_checkpoint_is_written_in_pieces_and_reads_back(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    b = body()
    store.save("memories", b)
    raw = store.path("memories").read_bytes()
    magic, rest = raw[:8], raw[8:]
    header, payload = rest.split(b"\n", 1)
    digest, size = header.split(b" ")
    assert magic == b"MSSNAP1\n"
    assert payload == orjson.dumps(b) == json_pieces.dumps_in_pieces(b)
    assert len(size) == 20 and int(size) == len(payload)  # fixed width: written after the payload
    assert digest == hashlib.sha256(payload).hexdigest().encode()
    assert store.load("memories") == b


def test_a_checkpoint_written_the_old_way_still_loads(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    payload = orjson.dumps(body())
    head = hashlib.sha256(payload).hexdigest().encode() + b" " + str(len(payload)).encode() + b"\n"
    store.path("memories").write_bytes(b"MSSNAP1\n" + head + payload)
    assert store.load("memories") == body()


def test_a_torn_checkpoint_reads_as_absent(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    store.save("memories", body())
    raw = store.path("memories").read_bytes()
    store.path("memories").write_bytes(raw[:-100])
    assert store.load("memories") is None
