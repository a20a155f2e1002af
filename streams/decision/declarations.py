"""Deciders of what an agent declares about its records: standings and associations."""

from __future__ import annotations

from memstream.streams import commands as c
from memstream.streams.decision.associations.declaration import decide_declaration
from memstream.streams.decision.associations.index import AssocIndex
from memstream.streams.decision.associations.terms import Node
from memstream.streams.decision.facts import AgentDecisionState
from memstream.streams.decision.state import DecisionState
from memstream.streams.decision.verdict import DecideContext, Decision, accept, refuse, skip_quiet
from memstream.streams.events import parse_ref


def decide_standing(
    state: DecisionState, st: AgentDecisionState, cmd: c.DeclareStanding, ctx: DecideContext
) -> Decision:
    try:
        kind, ident = parse_ref(cmd.ref)
    except ValueError as exc:
        return refuse(cmd, ctx, "invalid", str(exc))
    if (kind == "mem" and ident not in st.memories) or (kind == "ep" and ident not in st.episodes):
        return refuse(cmd, ctx, "not_found", f"{cmd.ref} not found")
    payload = {"ref": f"{kind}:{ident}", "standing": cmd.standing, "note": cmd.note}
    return accept(cmd, ctx, ("standing.declared", payload))


def decide_associations(
    state: DecisionState, st: AgentDecisionState, cmd: c.DeclareAssociations, ctx: DecideContext
) -> Decision:
    """Judge a declaration (``decision/associations/``). One event carries all of it, resolved;
    a call that changes nothing (only dropped or repeated items) is audited as skipped, with
    the same answer, so a retry still gets it back (W9)."""

    def exists(node: Node) -> bool:
        return node[1] in (st.memories if node[0] == "mem" else st.episodes)

    payload, changed = decide_declaration(
        st.assoc or AssocIndex(),
        cmd.scope.project_id,
        cmd.scope.channel,
        cmd.associations,
        cmd.anchor_ref,
        cmd.retract,
        exists,
    )
    if not changed:
        return skip_quiet(cmd, ctx, payload["report"])
    declared = payload["entities"] or payload["mentions"] or payload["relations"]
    return accept(cmd, ctx, ("associations.declared" if declared else "associations.retracted", payload))
