"""One command (or pre-decided refusal) through the decider, folded into the state at once.

Both command buses run this step, in arrival order, against the decision state of the
partition they own: the embedded bus inside its SQLite write transaction, the Kafka decider
inside its partition's batch. The step assigns the offsets the new records will get (the
state's next ones: the bus is the only writer of its partition) and folds them immediately, so
the next command of the same batch already sees them; the bus then appends what the step
produced and, if the append fails, discards the state and folds it afresh from the log.
"""

from __future__ import annotations

from dataclasses import dataclass

from memstream.streams.commands import Command
from memstream.streams.decision.dispatch import decide
from memstream.streams.decision.limits import Limits
from memstream.streams.decision.memo import outcome_of_memo
from memstream.streams.decision.outcome import Outcome
from memstream.streams.decision.state import DecisionState
from memstream.streams.decision.verdict import DecideContext
from memstream.streams.events import AuditRecord, decode, new_id
from memstream.streams.log.port import Committed, partition_for


@dataclass(frozen=True, slots=True)
class NewEvent:
    offset: int
    partition: int
    agent: str
    type: str
    value: bytes
    vector: bytes | None


@dataclass(frozen=True, slots=True)
class NewAudit:
    offset: int
    partition: int
    agent: str
    kind: str
    after_event: int  # the event offset it was decided after: replay merges the two in this order
    value: bytes


def decide_and_fold(
    state: DecisionState,
    item: Command | AuditRecord,
    limits: Limits,
    events: list[NewEvent],
    audits: list[NewAudit],
) -> Committed:
    """Decide ``item``, fold what it produced into ``state`` and append it to ``events`` /
    ``audits``. An ``AuditRecord`` (a refusal made before any command existed) is recorded as is."""
    agent = item.scope.agent_id
    partition = partition_for(agent, state.num_partitions)
    if isinstance(item, AuditRecord):
        first = state.agent(agent).commands.get(item.command_id)
        if first is not None:
            # Recorded already: a refusal delivered again (Kafka's commands topic is at least
            # once: a partition that moves before its consumer offset was committed hands its
            # last commands to the next owner) or retried with the same command id. Like a
            # retried command (W9), it gets its first answer and appends nothing.
            return Committed(outcome_of_memo(first))
        _fold_audit(state, item, partition, audits)
        return Committed(outcome=Outcome.from_dict(item.outcome))
    decision = decide(state, item, DecideContext(partition, limits, new_id))
    last: int | None = None
    for ev in decision.events:
        value = ev.encode()
        offset = state.event_offset + 1
        state.apply_event(offset, decode(value))
        events.append(NewEvent(offset, partition, agent, ev.type, value, ev.vector))
        last = offset
    if decision.audit is not None:
        _fold_audit(state, decision.audit, partition, audits)
    return Committed(decision.outcome, last)


def _fold_audit(state: DecisionState, record: AuditRecord, partition: int, audits: list[NewAudit]) -> None:
    value = record.encode()
    offset = state.audit_offset + 1
    state.apply_audit(offset, decode(value))
    audits.append(NewAudit(offset, partition, record.scope.agent_id, record.kind, state.event_offset, value))
