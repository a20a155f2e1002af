"""Reading a record's cosine by id (``VectorProjection.cosines``): what recall's second stage
reads for a neighbour no search returned (api/query/recall/expand.py)."""

from __future__ import annotations

import numpy as np
import pytest

from memstream.projections.vectors import VectorProjection
from tests.support.vector_events import A, Feed, archive, event, reembed, store, unit


def test_a_read_by_id_gives_the_cosine_a_search_reports() -> None:
    f = Feed()(*[store(i, unit(i)) for i in range(1, 41)], archive(7, unit(70)), store(41, None))
    q = unit(3) + 0.5 * unit(9)
    hits, _ = f.proj.search(A, q, 50)
    found = dict(hits)
    refs = [*found, "mem:41", "mem:99", "ep:8", "bogus", "mem:x"]
    read = f.proj.cosines("a", q, refs)
    # every row with a vector, memory or episode, exactly as the search scored it; a row without
    # a vector (mem:41), a missing one and a malformed ref are left out
    assert read.keys() == found.keys()
    for ref, cos in found.items():
        assert read[ref] == pytest.approx(cos, abs=1e-12)
    # a handful of rows, in any order: the same values
    few = f.proj.cosines("a", q, ["mem:9", "mem:3", "ep:7"])
    assert few == {r: read[r] for r in ("mem:9", "mem:3", "ep:7")}


def test_deleted_rows_other_models_and_unknown_agents_read_nothing() -> None:
    f = Feed()(*[store(i, unit(i)) for i in range(1, 30)])
    f(*[event("memory.deleted", {"id": i}) for i in range(1, 25)])  # enough to compact the segment
    q = unit(27)
    assert f.proj.cosines("a", q, ["mem:3", "mem:27"]) == {"mem:27": pytest.approx(1.0)}
    f(reembed(27, unit(5), "m2"))
    assert f.proj.cosines("a", unit(5), ["mem:27", "mem:28"], model="m2") == {"mem:27": pytest.approx(1.0)}
    assert f.proj.cosines("a", q, ["mem:27"], model="nothing") == {}
    assert f.proj.cosines("nobody", q, ["mem:27"]) == {}
    assert f.proj.cosines("a", np.zeros_like(q), ["mem:27"]) == {}  # no direction, no cosine
    assert VectorProjection().cosines("a", q, ["mem:1"]) == {}


def test_a_query_of_the_wrong_size_is_refused() -> None:
    f = Feed()(store(1, unit(1)))
    with pytest.raises(ValueError, match="components"):
        f.proj.cosines("a", np.ones(3, dtype=np.float32), ["mem:1"])
