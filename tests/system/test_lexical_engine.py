"""The lexical projection folded from the log of an in-process engine on a temporary data
directory: the events the real deciders write. The projection's own tests: tests/unit/test_lexical.py."""

from __future__ import annotations

from memstream.api.services.engine import EmbeddedEngine
from memstream.projections.lexical import LexicalProjection
from memstream.projections.runner import replay
from memstream.projections.scope import ScopeFilter
from tests.support.calls import call
from tests.support.hits import refs

# -- the events the real deciders write -------------------------------------------------------------


async def test_fold_of_a_real_engine_log(engine: EmbeddedEngine) -> None:
    s1 = await call(engine, "store", agent_id="eng", content="the deploy key is 0xef0101", project_id="P")
    s2 = await call(engine, "store", agent_id="eng", content="東京オフィスの会議メモ")
    s3 = await call(engine, "store", agent_id="eng", content="temporary note")
    ep = await call(engine, "archive_episode", agent_id="eng", summary="weekly sync", keywords="sync, roadmap")
    await call(engine, "update_memory", agent_id="eng", memory_id=s1["id"], content="the deploy key is 0xff0202")
    await call(engine, "delete_memory", agent_id="eng", memory_id=s3["id"])
    p = replay(engine.log, [LexicalProjection]).projections[0]
    scope = ScopeFilter("eng")
    assert refs(p.keyword(scope, "0xff0202", 5)) == [f"mem:{s1['id']}"]
    assert p.keyword(scope, "0xef0101", 5) == []
    assert refs(p.search(scope, "東京の会議", 5)) == [f"mem:{s2['id']}"]
    assert refs(p.search(scope, "roadmap", 5)) == [f"ep:{ep['episode_id']}"]
    assert p.search(scope, "temporary", 5) == []
    assert p.count(scope) == 3 and p.count(ScopeFilter("eng", "")) == 2
    await call(engine, "delete_agent_data", agent_id="eng")
    p2 = replay(engine.log, [LexicalProjection]).projections[0]
    snap = p2.to_snapshot()
    assert p2.count(scope) == 0 and snap["version"] == 4 and snap["agents"] == {}
