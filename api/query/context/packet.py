"""Know/miss packets (CONTRACTS A7, seed 002): the shapes, their invariants, and the pure
judgement that tells an agent whether memory knows the answer before it reads a row.
See docs/context-packets.md, "A7".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

EscalateReason = Literal["abstain", "sparse", "no_match"]
RefreshReason = Literal["stale", "superseded"]
EscalateTarget = Literal["grep", "rag", "web", "ask_human"]
Status = Literal["verified", "stale_risk", "needs_refresh"]

ESCALATE_REASONS: Final[frozenset[str]] = frozenset(EscalateReason.__args__)  # type: ignore[attr-defined]
REFRESH_REASONS: Final[frozenset[str]] = frozenset(RefreshReason.__args__)  # type: ignore[attr-defined]

# Where an escalate-class miss sends the agent (memstream's choice among seed 002's targets):
# nothing matched at all -> search outside memory; the gate abstained on weak matches -> a
# broader retrieval or a person; too few memories to trust a match -> anything but memory.
ESCALATE_TO: Final[dict[str, tuple[EscalateTarget, ...]]] = {
    "no_match": ("grep", "web", "ask_human"),
    "abstain": ("rag", "ask_human"),
    "sparse": ("rag", "web", "ask_human"),
}


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MissBlock(_Wire):
    miss: Literal[True] = True
    reason: EscalateReason | RefreshReason
    top_score: float | None = None
    escalate_to: list[EscalateTarget] = Field(default_factory=list)
    refresh_targets: list[str] = Field(default_factory=list)
    do_not_answer_from_memory: Literal[True] = True

    @model_validator(mode="after")
    def _reason_class(self) -> MissBlock:
        """The two classes never mix: a violating construction raises (seed 002)."""
        if self.reason in ESCALATE_REASONS:
            if not self.escalate_to or self.refresh_targets:
                raise ValueError(f"{self.reason} is escalate-class: escalate_to non-empty, refresh_targets empty")
        elif not self.refresh_targets or self.escalate_to:
            raise ValueError(f"{self.reason} is refresh-class: refresh_targets non-empty, escalate_to empty")
        return self


class KnowBlock(_Wire):
    found: Literal[True] = True
    top_score: float
    score_gap: float
    top_ref: str
    signal: str


class PacketItem(_Wire):
    ref: str
    kind: Literal["memory", "episode"]
    content: str
    content_truncated: bool = False
    relevance_score: float | None = None
    signal: str | None = None
    status: Status
    version: int
    last_verified_at: str
    msg_id: str | None = None
    superseded_by: list[str] = Field(default_factory=list)
    standing: str | None = None


class RefreshTarget(_Wire):
    target_kind: Literal["memory", "episode"]
    source_id: str
    reason: str
    priority: float


class Delivery(_Wire):
    pool_size: int
    delivered_count: int
    delivered_refs: list[str]


class Packet(_Wire):
    know: KnowBlock | None = None
    miss: MissBlock | None = None
    query: str
    verified: list[PacketItem]
    stale_risk: list[PacketItem]
    refresh_targets: list[RefreshTarget]
    delivery: Delivery

    @model_validator(mode="after")
    def _exactly_one(self) -> Packet:
        if (self.know is None) == (self.miss is None):
            raise ValueError("a packet carries exactly one of know / miss")
        return self

    def wire(self) -> dict[str, Any]:
        """The response body: the unused branch is omitted, as are absent optional fields."""
        return self.model_dump(mode="json", exclude_none=True)


@dataclass(frozen=True, slots=True)
class Hit:
    """One recalled record with the facts the packet judges it by (best first in a list)."""

    ref: str
    content: str
    score: float | None
    signal: str | None
    version: int
    last_verified_at: datetime
    msg_id: str | None = None
    superseded_by: tuple[str, ...] = ()
    standing: str | None = None
    content_truncated: bool = False

    @property
    def kind(self) -> Literal["memory", "episode"]:
        return "episode" if self.ref.startswith("ep:") else "memory"


@dataclass(frozen=True, slots=True)
class Recalled:
    """What recall found for the query: the gated hits (best first) and what stood behind them."""

    hits: Sequence[Hit]
    pool: int  # rows in the scope
    lexical_support: bool  # did any row share a term with the query (before the gate)?


def is_stale(hit: Hit, now: datetime, stale_after_s: float) -> bool:
    return (now - hit.last_verified_at).total_seconds() > stale_after_s


def status_of(hit: Hit, now: datetime, stale_after_s: float) -> Status:
    if hit.superseded_by:
        return "needs_refresh"
    if is_stale(hit, now, stale_after_s):
        return "stale_risk"
    return "verified"


def _escalate(reason: EscalateReason, top_score: float | None) -> MissBlock:
    return MissBlock(reason=reason, top_score=top_score, escalate_to=list(ESCALATE_TO[reason]))


def judge(query: str, found: Recalled, *, now: datetime, stale_after_s: float, min_pool: int) -> Packet:
    """The verdict, in order: nothing to go on (no_match / abstain), too little memory to trust a
    match (sparse), the best match replaced by a newer version (superseded) or not verified
    within the window (stale); otherwise know."""
    hits = list(found.hits)
    statuses = [status_of(h, now, stale_after_s) for h in hits]
    top = hits[0] if hits else None
    top_score = top.score if top is not None else None
    verdict: KnowBlock | MissBlock
    if top is None:
        verdict = _escalate("abstain" if found.pool > 0 and found.lexical_support else "no_match", None)
    elif found.pool < min_pool:
        verdict = _escalate("sparse", top_score)
    elif top.superseded_by:
        verdict = MissBlock(reason="superseded", top_score=top_score, refresh_targets=list(top.superseded_by))
    elif statuses[0] == "stale_risk":
        stale = [h.ref for h, s in zip(hits, statuses, strict=True) if s == "stale_risk"]
        verdict = MissBlock(reason="stale", top_score=top_score, refresh_targets=stale)
    else:
        second = hits[1].score if len(hits) > 1 else None
        score = top_score if top_score is not None else 0.0
        verdict = KnowBlock(
            top_score=score,
            score_gap=round(score - (second if second is not None else 0.0), 6),
            top_ref=top.ref,
            signal=top.signal or "none",
        )
    items = [_item(h, s) for h, s in zip(hits, statuses, strict=True)]
    return Packet(
        know=verdict if isinstance(verdict, KnowBlock) else None,
        miss=verdict if isinstance(verdict, MissBlock) else None,
        query=query,
        verified=[i for i in items if i.status == "verified"],
        stale_risk=[i for i in items if i.status != "verified"],
        refresh_targets=_refresh_targets(hits, statuses, top_score),
        delivery=Delivery(pool_size=found.pool, delivered_count=len(hits), delivered_refs=[h.ref for h in hits]),
    )


def _item(hit: Hit, status: Status) -> PacketItem:
    return PacketItem(
        ref=hit.ref,
        kind=hit.kind,
        content=hit.content,
        content_truncated=hit.content_truncated,
        relevance_score=hit.score,
        signal=hit.signal,
        status=status,
        version=hit.version,
        last_verified_at=hit.last_verified_at.isoformat(),
        msg_id=hit.msg_id,
        superseded_by=list(hit.superseded_by),
        standing=hit.standing,
    )


def _refresh_targets(hits: Sequence[Hit], statuses: Sequence[Status], top_score: float | None) -> list[RefreshTarget]:
    """One row per non-verified item, what to re-read first: a superseded item's newest
    version, a stale item itself. Priority is the item's score relative to the best one's."""
    out: dict[str, RefreshTarget] = {}
    for hit, status in zip(hits, statuses, strict=True):
        if status == "verified":
            continue
        priority = round(hit.score / top_score, 4) if hit.score is not None and top_score else 0.0
        if status == "needs_refresh":
            source, why = hit.superseded_by[0], f"newer version of {hit.ref}: read it instead"
        else:
            source, why = hit.ref, f"fresh verification required: last verified {hit.last_verified_at.isoformat()}"
        if source not in out:
            kind: Literal["memory", "episode"] = "episode" if source.startswith("ep:") else "memory"
            out[source] = RefreshTarget(target_kind=kind, source_id=source, reason=why, priority=priority)
    return sorted(out.values(), key=lambda t: -t.priority)


def superseded_refs(providers: Sequence[Any], agent_id: str, refs: Sequence[str]) -> dict[str, list[str]]:
    """THE lookup of "which of these refs are superseded, and by what": the union of every
    provider the engine exposes (``Engine.superseded_providers``), each ``(agent_id, refs) ->
    {ref: [newer refs]}``. Today the only provider is newer versions under one msg_id; the
    association read model's ``supersedes`` relations are meant to be added as another."""
    out: dict[str, list[str]] = {}
    for provider in providers:
        for ref, newer in provider(agent_id, refs).items():
            merged = out.setdefault(ref, [])
            merged.extend(r for r in newer if r not in merged)
    return out
