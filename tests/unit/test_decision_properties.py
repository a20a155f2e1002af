"""Property tests of the decision fold: any command sequence, replayed, gives the same state
and the same answers (issue 2, "Property tests")."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.streams import commands as c
from memstream.streams.decision.dispatch import decide
from memstream.streams.decision.limits import Limits
from memstream.streams.decision.state import DecisionState
from memstream.streams.decision.verdict import DecideContext
from memstream.streams.events import Actor, Embedding, Scope, decode
from memstream.streams.log.port import partition_for

PARTITIONS = 4
AGENTS = ["alice", "bob"]
T0 = datetime(2026, 1, 1, tzinfo=UTC)

scopes = st.builds(
    Scope,
    agent_id=st.sampled_from(AGENTS),
    project_id=st.sampled_from(["", "p1"]),
    channel=st.sampled_from(["", "c1"]),
)
contents = st.sampled_from(["alpha", "beta", "gamma", " ", "delta " * 3])
msg_ids = st.one_of(st.none(), st.sampled_from(["m1", "m2", "m3"]))
ids = st.integers(min_value=0, max_value=40)


def _cmd(kind: str, scope: Scope, content: str, msg_id: str | None, ident: int, cid: str) -> c.Command:
    base: dict[str, Any] = {"command_id": cid, "scope": scope, "actor": Actor(client_id="t"), "received_at": T0}
    if kind == "store":
        # every other store carries a vector, of the agent's first model or, rarely, another
        model = "m1" if ident % 7 else "m2"
        emb = Embedding.from_vector(model, [1.0, float(ident)]) if ident % 2 == 0 else None
        return c.StoreMemory(content=content, msg_id=msg_id, embedding=emb, **base)
    if kind == "reembed":
        vec = Embedding.from_vector("m2", [0.5, float(ident)])
        return c.ReembedMemory(memory_id=ident, kind="ep" if ident % 5 == 0 else "mem", embedding=vec, **base)
    if kind == "switch":
        return c.SwitchEmbedding(model="m2" if ident % 3 else "m1", **base)
    if kind == "update":
        return c.UpdateMemory(memory_id=ident, content=content, **base)
    if kind == "delete":
        return c.DeleteMemory(memory_id=ident, **base)
    if kind == "lock":
        return c.LockMemory(memory_id=ident, **base)
    if kind == "unlock":
        return c.UnlockMemory(memory_id=ident, **base)
    if kind == "episode":
        return c.ArchiveEpisode(summary=content, **base)
    if kind == "delete_episode":
        return c.DeleteEpisode(episode_id=ident, **base)
    if kind == "profile":
        return c.UpdateProfile(content=content, **base)
    if kind == "standing":
        return c.DeclareStanding(ref=f"mem:{ident}", standing="noise", **base)
    if kind == "verify":
        return c.VerifyMemory(memory_id=ident, **base)
    if kind == "erase":
        return c.EraseMemory(kind="mem", record_id=ident, reason="asked", **base)
    if kind == "erase_agent":
        return c.EraseAgentData(reason="asked", **base)
    return c.DeleteAgentData(**base)


command_specs = st.lists(
    st.tuples(
        st.sampled_from(
            ["store"] * 6
            + ["update", "delete", "lock", "unlock", "episode", "delete_episode", "profile", "standing", "wipe"]
            + ["reembed"] * 3
            + ["switch"]
            + ["verify"]
            + ["erase", "erase_agent"]
        ),
        scopes,
        contents,
        msg_ids,
        ids,
        st.integers(min_value=0, max_value=30),  # command id: small range so retries happen
    ),
    max_size=60,
)


class _Ids:
    def __init__(self) -> None:
        self._n = itertools.count()

    def __call__(self) -> str:
        return f"e{next(self._n)}"


def run(specs: list[tuple[Any, ...]]) -> tuple[DecisionState, list[Any], list[Any], list[dict[str, Any]]]:
    state = DecisionState(PARTITIONS)
    events: list[Any] = []
    audits: list[Any] = []
    answers = []
    new_id = _Ids()
    for i, (kind, scope, content, msg_id, ident, cid) in enumerate(specs):
        cmd = _cmd(kind, scope, content, msg_id, ident, f"cmd-{cid}")
        cmd = cmd.model_copy(update={"received_at": T0 + timedelta(seconds=i)})
        missing = state.agent(scope.agent_id).missing_model(cmd.model) if isinstance(cmd, c.SwitchEmbedding) else 0
        d = decide(state, cmd, DecideContext(partition_for(scope.agent_id, PARTITIONS), Limits(), new_id))
        if isinstance(cmd, c.SwitchEmbedding) and d.events:
            assert missing == 0, "a switch was accepted while records lacked the model"
        for ev in d.events:
            raw = decode(ev.encode())
            state.apply_event(len(events), raw)
            events.append(raw)
        if d.audit is not None:
            raw = decode(d.audit.encode())
            state.apply_audit(len(audits), raw)
            audits.append((len(events) - 1, raw))
        answers.append(d.outcome.to_dict())
    return state, events, audits, answers


@settings(max_examples=200, deadline=None)
@given(command_specs)
def test_replay_gives_the_same_state(specs: list[tuple[Any, ...]]) -> None:
    live, events, audits, _ = run(specs)
    replayed = DecisionState(PARTITIONS)
    pending = list(enumerate(audits))
    for off, ev in enumerate(events):
        while pending and pending[0][1][0] < off:
            a_off, (_, rec) = pending.pop(0)
            replayed.apply_audit(a_off, rec)
        replayed.apply_event(off, ev)
    for a_off, (_, rec) in pending:
        replayed.apply_audit(a_off, rec)
    assert replayed.digest() == live.digest()
    restored = DecisionState.from_snapshot(live.to_snapshot())
    assert restored.digest() == live.digest()


@settings(max_examples=200, deadline=None)
@given(command_specs)
def test_same_log_same_answers(specs: list[tuple[Any, ...]]) -> None:
    _, events1, audits1, answers1 = run(specs)
    _, events2, audits2, answers2 = run(specs)
    assert answers1 == answers2
    strip = lambda evs: [{k: v for k, v in e.items() if k != "id"} for e in evs]  # noqa: E731
    assert strip(events1) == strip(events2)
    assert strip([a for _, a in audits1]) == strip([a for _, a in audits2])


@settings(max_examples=150, deadline=None)
@given(command_specs)
def test_retried_command_returns_first_outcome_and_appends_nothing(specs: list[tuple[Any, ...]]) -> None:
    state, _, _, answers = run(specs)
    first: dict[tuple[str, str], dict[str, Any]] = {}
    for spec, answer in zip(specs, answers, strict=True):
        first.setdefault((spec[1].agent_id, f"cmd-{spec[5]}"), answer)
    for kind, scope, _content, msg_id, ident, cid in specs:
        cmd = _cmd(kind, scope, "a different text", msg_id, ident, f"cmd-{cid}")
        d = decide(state, cmd, DecideContext(partition_for(scope.agent_id, PARTITIONS), Limits(), _Ids()))
        assert d.events == [] and d.audit is None
        assert d.outcome.to_dict() == first[(scope.agent_id, f"cmd-{cid}")]


@settings(max_examples=150, deadline=None)
@given(command_specs)
def test_dedup_invariants_hold(specs: list[tuple[Any, ...]]) -> None:
    state, _, _, _ = run(specs)
    for agent in AGENTS:
        st_ = state.agent(agent)
        seen_msg: set[tuple[str, str]] = set()
        seen_content: set[tuple[str, str, bytes]] = set()
        for f in st_.memories.values():
            if f.msg_id is not None:
                assert (f.project, f.msg_id) not in seen_msg, "two live memories share a msg_id"
                seen_msg.add((f.project, f.msg_id))
            key = (f.project, f.channel, f.content_key)
            assert key not in seen_content, "two live memories share content in one bucket"
            seen_content.add(key)
        # the locked ids the fold keeps for erasures (facts.AgentDecisionState.locked)
        assert st_.locked == {mid for mid, f in st_.memories.items() if f.locked}


@settings(max_examples=200, deadline=None)
@given(command_specs)
def test_an_agents_vectors_are_all_of_its_model(specs: list[tuple[Any, ...]]) -> None:
    """Whatever the order of stores, re-embeds and switches, every applied write's vector is of
    the agent's model at that moment, and after a switch every live record has the new one."""
    state, events, _, _ = run(specs)
    models: dict[str, str] = {}
    for ev in events:
        agent, p = ev["scope"]["agent_id"], ev["payload"]
        if ev["type"] == "embedding.switched":
            models[agent] = p["model"]
        elif ev["type"] != "memory.reembedded" and p.get("embedding"):
            assert models.setdefault(agent, p["embedding"]["model"]) == p["embedding"]["model"]
    for agent, st_ in state.agents.items():
        assert st_.model == models.get(agent)
        if any(e["type"] == "embedding.switched" and e["scope"]["agent_id"] == agent for e in events):
            assert st_.model is not None
            stale = [m for m, f in st_.memories.items() if f.models and st_.model not in f.models]
            assert not stale


def test_a_refusal_delivered_twice_is_recorded_once() -> None:
    """An audit record of a refusal made before any command existed (bad input, a denied
    call) is remembered by its command id, so a second delivery (the Kafka commands topic is at
    least once) or a retry with the same id appends nothing and gets the first answer."""
    from memstream.streams.deciders.step import NewAudit, NewEvent, decide_and_fold
    from memstream.streams.events import AuditRecord

    state = DecisionState(4)
    record = AuditRecord(
        id="r1",
        kind="refused",
        command="store",
        command_id="denied-1",
        scope=Scope(agent_id="bob"),
        actor=Actor(client_id="t"),
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        outcome={"result": "rejected", "reason": "no grant", "error": "permission_denied"},
    )
    events: list[NewEvent] = []
    audits: list[NewAudit] = []
    first = decide_and_fold(state, record, Limits(), events, audits)
    again = decide_and_fold(state, record, Limits(), events, audits)
    assert len(audits) == 1 and not events
    assert again.outcome == first.outcome and again.offset is None
    other = record.model_copy(update={"command_id": "denied-2", "id": "r2"})
    decide_and_fold(state, other, Limits(), events, audits)
    assert len(audits) == 2  # another refusal is recorded


def test_memos_keep_their_snapshot_layout() -> None:
    """Snapshots store each memo positionally, as the tuples memos once were: that layout must
    not change (old checkpoints load, digests stay comparable), and it must load back to the
    same memo with the same outcome."""
    from memstream.streams.decision.memo import memo_from_json, memo_of_event, memo_to_json, outcome_of_memo

    report = {"entities": [], "mentions": 0, "relations": [], "dropped": []}
    cases: list[tuple[str, dict[str, Any], list[Any]]] = [
        ("memory.stored", {"id": 9, "embedding": {"model": "m1"}, "locked": True}, ["memory.stored", 9, True, True]),
        ("memory.stored", {"id": 5, "embedding": None}, ["memory.stored", 5, False, False]),
        ("memory.locked", {"id": 5, "skipped": "duplicate content"}, ["memory.locked", 5, "duplicate content"]),
        ("memory.locked", {"id": 5}, ["memory.locked", 5]),
        ("memory.deleted", {"id": 5}, ["memory.deleted", 5]),
        ("profile.updated", {"content": "p"}, ["profile.updated", None]),
        (
            "agent_data.deleted",
            {"memory_ids": [1, 5], "episode_ids": [2], "profile": True, "kept_locked": []},
            ["agent_data.deleted", None, [2, 1, 1, 0]],
        ),
        ("associations.declared", {"report": report}, ["associations.declared", None, report]),
        ("associations.retracted", {"report": report}, ["associations.retracted", None, report]),
    ]
    for t, payload, layout in cases:
        memo = memo_of_event(t, payload)
        assert memo_to_json(memo) == layout
        loaded = memo_from_json(orjson.loads(orjson.dumps(layout)))
        assert loaded == memo and type(loaded) is type(memo)
        assert outcome_of_memo(loaded) == outcome_of_memo(memo)
    audited = {"result": "rejected", "reason": "memory 3 not found", "error": "not_found"}
    assert memo_to_json(audited) == audited and memo_from_json(audited) == audited
