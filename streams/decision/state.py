"""The decision state: the pure fold of the whole log that deciders consult, with its canonical snapshot."""

from __future__ import annotations

import hashlib
from sys import intern
from typing import Any, Final

import orjson

from memstream.streams.decision.associations.index import AssocIndex
from memstream.streams.decision.facts import (
    AgentDecisionState,
    CommandMemos,
    MemoryFacts,
    intern_models,
    models_of,
    with_model,
)
from memstream.streams.decision.keys import content_key, source_id_of
from memstream.streams.decision.memo import memo_from_json, memo_of_event, memo_to_json
from memstream.streams.decision.snapshot import memories_from_columns, memories_to_columns
from memstream.streams.decision.whole_agent import names_every_record

# Events a destroyed key leaves nothing of for the rules (the others' clear ids suffice).
REDACTED_SKIPS: Final = frozenset(
    {
        "memory.stored",
        "memory.updated",
        "episode.archived",
        "profile.updated",
        "associations.declared",
        "associations.retracted",
        "standing.declared",
        "memory.verified",
        "memory.reembedded",
    }
)


class DecisionState:
    """The fold of the whole log (all partitions an owner holds) that deciders consult."""

    # The snapshot layout written; ``FORMATS`` load, a snapshot of another format is discarded
    # and the state refolded. Format 3 holds format 2's content, its memories as columns; 4 its
    # msg ids as a column too (snapshot.py).
    FORMAT: Final = 4
    FORMATS: Final = frozenset({2, 3, 4})

    def __init__(self, num_partitions: int) -> None:
        self.num_partitions = num_partitions
        self.agents: dict[str, AgentDecisionState] = {}
        self.next_seq: list[int] = [0] * num_partitions  # id allocation, per partition
        self.event_offset = -1  # last applied event offset
        self.audit_offset = -1  # last applied audit offset

    def agent(self, agent_id: str) -> AgentDecisionState:
        st = self.agents.get(agent_id)
        if st is None:
            st = self.agents[agent_id] = AgentDecisionState()
        return st

    def peek_id(self, partition: int) -> int:
        """The id the partition's next record gets: ``seq * partitions + partition + 1``.

        Unique across partitions without coordination (each partition owns one residue), never
        0, and allocated by folding the event that uses it, so replay re-derives it exactly."""
        return self.next_seq[partition] * self.num_partitions + partition + 1

    def _saw_id(self, ident: int) -> None:
        p = (ident - 1) % self.num_partitions
        seq = (ident - 1) // self.num_partitions
        if seq >= self.next_seq[p]:
            self.next_seq[p] = seq + 1

    # -- the fold ---------------------------------------------------------------------------

    def apply_event(self, offset: int, ev: dict[str, Any]) -> None:
        if offset <= self.event_offset:
            return  # at-least-once delivery: an event seen twice changes nothing
        self.event_offset = offset
        st = self.agent(ev["scope"]["agent_id"])
        p = ev["payload"]
        t = ev["type"]
        facts: MemoryFacts | None
        if ev.get("redacted") and t in REDACTED_SKIPS:
            # Its key was destroyed: the record never existed for the rules, but its id stays
            # allocated and a retry of its command still gets its first answer.
            if t == "memory.stored" or t == "episode.archived":
                self._saw_id(p["id"])
            if t in ("memory.stored", "memory.updated", "episode.archived", "profile.updated"):
                st.saw_model(models_of(p))
        elif t == "memory.stored":
            mid = p["id"]
            self._saw_id(mid)
            scope = ev["scope"]
            facts = MemoryFacts(
                intern(scope["project_id"]),
                intern(scope["channel"]),
                p.get("msg_id"),
                content_key(p["content"]),
                intern(source_id_of(p.get("source"))),
                bool(p.get("locked", False)),
                models_of(p),
            )
            st.saw_model(facts.models)
            st.memories[mid] = facts
            if facts.locked:
                st.locked.add(mid)
            if facts.msg_id is not None:
                st.by_msg.setdefault((facts.project, facts.msg_id), mid)
            st.by_content.setdefault((facts.project, facts.channel, facts.content_key), mid)
        elif t == "memory.updated":
            facts = st.memories.get(p["id"])
            if facts is not None:
                old = (facts.project, facts.channel, facts.content_key)
                if st.by_content.get(old) == p["id"]:
                    del st.by_content[old]
                # The old vectors described the old text: only the update's own one is left.
                facts = st.change(p["id"], facts, content_key=content_key(p["content"]), models=models_of(p))
                st.by_content.setdefault((facts.project, facts.channel, facts.content_key), p["id"])
                st.saw_model(facts.models)
        elif t == "memory.deleted":
            st.forget_memory(p["id"])
            if st.assoc is not None:
                st.assoc.forget_record(f"mem:{p['id']}")
        elif t == "memory.locked" or t == "memory.unlocked":
            facts = st.memories.get(p["id"])
            if facts is not None:
                st.set_locked(p["id"], facts, t == "memory.locked")
        elif t == "memory.reembedded":
            model = p["embedding"]["model"]
            if p.get("kind", "mem") == "ep":
                if p["id"] in st.episodes:
                    st.episodes[p["id"]] = with_model(st.episodes[p["id"]], model)
            else:
                facts = st.memories.get(p["id"])
                if facts is not None:
                    st.change(p["id"], facts, models=with_model(facts.models, model))
        elif t == "embedding.switched":
            model = p["model"]
            st.model = model
            for mid, facts in list(st.memories.items()):
                st.change(mid, facts, models=intern_models(model) if model in facts.models else ())
            for eid, models in st.episodes.items():
                st.episodes[eid] = intern_models(model) if model in models else ()
        elif t == "episode.archived":
            self._saw_id(p["id"])
            st.episodes[p["id"]] = models_of(p)
            st.saw_model(st.episodes[p["id"]])
        elif t == "episode.deleted":
            st.episodes.pop(p["id"], None)
            if st.assoc is not None:
                st.assoc.forget_record(f"ep:{p['id']}")
        elif t == "profile.updated":
            st.has_profile = True
            st.saw_model(models_of(p))
        elif t == "agent_data.deleted":
            st.forget_memories(p["memory_ids"])
            for eid in p["episode_ids"]:
                st.episodes.pop(eid, None)
            if p.get("profile"):
                st.has_profile = False
            if st.assoc is not None:
                for ref in [f"mem:{i}" for i in p["memory_ids"]] + [f"ep:{i}" for i in p["episode_ids"]]:
                    st.assoc.forget_record(ref)
        elif t == "associations.declared" or t == "associations.retracted":
            if st.assoc is None:
                st.assoc = AssocIndex()
            st.assoc.apply(ev["scope"]["project_id"], ev["scope"]["channel"], p)
        elif t == "record.erased" or t == "agent.erased":
            self._erase(st, p)
        st.remember(ev["command_id"], memo_of_event(t, p))

    @staticmethod
    def _erase(st: AgentDecisionState, p: dict[str, Any]) -> None:
        """Leave the state as a replay leaves it once the erased keys are gone (docs/erasure.md)."""
        if names_every_record(p):
            st.forget_records()
        else:
            st.forget_memories(p["memory_ids"])
            for eid in p["episode_ids"]:
                st.episodes.pop(eid, None)
        if p.get("agent_scope"):
            st.has_profile = False
            if st.assoc is not None:
                # Only a declaration folded in the clear makes an unredacted report, and its
                # fold made ``assoc``: with none, there is nothing to redact (and no pass over
                # the agent's 50k command memos on the writer thread).
                st.redact_reports()
            st.assoc = None
        elif st.assoc is not None:
            for ref in [f"mem:{i}" for i in p["memory_ids"]] + [f"ep:{i}" for i in p["episode_ids"]]:
                st.assoc.forget_record(ref)

    def apply_audit(self, offset: int, rec: dict[str, Any]) -> None:
        if offset <= self.audit_offset:
            return
        self.audit_offset = offset
        self.agent(rec["scope"]["agent_id"]).remember(rec["command_id"], rec["outcome"])

    # -- snapshot and digest ----------------------------------------------------------------

    def canonical(self) -> dict[str, Any]:
        """The state's canonical form (format 2's layout, one row per memory): equal states give
        byte-equal JSON. The digest is over it, whatever format the snapshot is written in."""
        return self._snapshot(columns=False)

    def to_snapshot(self) -> dict[str, Any]:
        """The snapshot written to disk: the canonical form with each agent's memories as
        columns (``snapshot.py``), which a restart loads without an object per field."""
        return self._snapshot(columns=True)

    def _snapshot(self, *, columns: bool) -> dict[str, Any]:
        agents = {}
        for name in sorted(self.agents):
            st = self.agents[name]
            memories: Any
            if columns:
                memories = memories_to_columns(st.memories)
            else:
                memories = [
                    [mid, f.project, f.channel, f.msg_id, f.content_key.hex(), f.source_id, f.locked, list(f.models)]
                    for mid, f in sorted(st.memories.items())
                ]
            agents[name] = {
                "memories": memories,
                "episodes": [[eid, list(models)] for eid, models in sorted(st.episodes.items())],
                "has_profile": st.has_profile,
                "model": st.model,
                "commands": [[k, memo_to_json(v)] for k, v in st.commands.items()],
            }
            if st.assoc is not None:
                agents[name]["assoc"] = st.assoc.to_snapshot()
        return {
            "format": self.FORMAT if columns else 2,
            "num_partitions": self.num_partitions,
            "next_seq": self.next_seq,
            "event_offset": self.event_offset,
            "audit_offset": self.audit_offset,
            "agents": agents,
        }

    @classmethod
    def from_snapshot(cls, snap: dict[str, Any]) -> DecisionState:
        if snap.get("format") not in cls.FORMATS:
            raise ValueError(f"decision snapshot format {snap.get('format')!r}")
        state = cls(snap["num_partitions"])
        state.next_seq = list(snap["next_seq"])
        state.event_offset = snap["event_offset"]
        state.audit_offset = snap["audit_offset"]
        for name, a in snap["agents"].items():
            st = state.agent(name)
            if snap["format"] == 2:
                for mid, project, channel, msg_id, key, source_id, locked, models in a["memories"]:
                    # Strings many memories repeat are held once (the read models intern the same).
                    facts = MemoryFacts(
                        intern(project),
                        intern(channel),
                        msg_id,
                        bytes.fromhex(key),
                        intern(source_id),
                        locked,
                        intern_models(*models),
                    )
                    st.memories[mid] = facts
                st.memories = dict(sorted(st.memories.items()))
            else:
                st.memories = memories_from_columns(a["memories"])  # in id order
            st.reindex()
            st.episodes = {eid: intern_models(*models) for eid, models in a["episodes"]}
            st.has_profile = a["has_profile"]
            st.model = a["model"]
            if "assoc" in a:
                st.assoc = AssocIndex.from_snapshot(a["assoc"])
            st.commands = CommandMemos((k, memo_from_json(v)) for k, v in a["commands"])
        return state

    def digest(self) -> str:
        snap = self.canonical()
        snap.pop("event_offset")
        snap.pop("audit_offset")
        return hashlib.sha256(orjson.dumps(snap)).hexdigest()
