"""Checks several deciders share: sizes within limits, one embedding model per agent, a live memory."""

from __future__ import annotations

from typing import Any, TypeAlias

import orjson

from memstream.streams import commands as c
from memstream.streams.decision.facts import AgentDecisionState, MemoryFacts
from memstream.streams.decision.verdict import DecideContext, Decision, refuse
from memstream.streams.events import Embedding

# The commands that carry an optional vector of their own text.
Embedded: TypeAlias = c.StoreMemory | c.UpdateMemory | c.ArchiveEpisode | c.UpdateProfile


def check_text(cmd: c.Command, ctx: DecideContext, text: str, what: str) -> Decision | None:
    if not text.strip():
        return refuse(cmd, ctx, "invalid", f"{what} is empty")
    if len(text) > ctx.limits.max_content_chars:
        return refuse(
            cmd,
            ctx,
            "too_large",
            f"{what} has {len(text)} characters; the limit is {ctx.limits.max_content_chars}",
        )
    return None


def check_metadata(cmd: c.Command, ctx: DecideContext, metadata: dict[str, Any] | None) -> Decision | None:
    if metadata and len(orjson.dumps(metadata)) > ctx.limits.max_metadata_bytes:
        return refuse(cmd, ctx, "too_large", f"metadata exceeds {ctx.limits.max_metadata_bytes} bytes")
    return None


def check_model(cmd: Embedded, ctx: DecideContext, st: AgentDecisionState) -> Decision | None:
    """An agent's vectors stay comparable: a write embedded with another model than the
    agent's is refused rather than stored as a vector no query of the agent would match."""
    emb: Embedding | None = cmd.embedding
    if emb is None or st.model is None or emb.model == st.model:
        return None
    return refuse(
        cmd,
        ctx,
        "model_mismatch",
        f"agent {cmd.scope.agent_id!r} keeps vectors of model {st.model!r}; this write was embedded with "
        f"{emb.model!r}. Embed with {st.model!r}, or move the agent with `memstream reembed --model {emb.model}`",
    )


def embedding_payload(cmd: Embedded) -> dict[str, Any] | None:
    return cmd.embedding.header() if cmd.embedding is not None else None


def live_memory(st: AgentDecisionState, cmd: c.Command, ctx: DecideContext, mid: int) -> Decision | MemoryFacts:
    facts = st.memories.get(mid)
    if facts is None:
        return refuse(cmd, ctx, "not_found", f"memory {mid} not found")
    return facts
