"""One fleet's agents and topics, the reads that compare two deployments, and answers without
their clock readings."""

from __future__ import annotations

from typing import Any

from tests.support.faces import HttpFace, McpFace

AGENTS = ["ada", "bob", "cy", "dee", "eve", "fay"]


TOPICS = ["deploy key rotation", "green tea mornings", "billing database", "printer paper jam", "vpn certificate"]


VOLATILE = {"timestamp", "created_at", "updated_at", "as_of", "elapsed_ms"}


def stable(body: Any) -> Any:
    """An answer without the fields that are clock readings."""
    if isinstance(body, dict):
        return {k: stable(v) for k, v in body.items() if k not in VOLATILE}
    if isinstance(body, list):
        return [stable(v) for v in body]
    return body


async def reads(face: HttpFace | McpFace) -> list[Any]:
    out = []
    for agent in AGENTS:
        for q in ("green tea", "printer paper jam", "billing database"):
            out.append(await face.call("recall", {"agent_id": agent, "query": q, "limit": 5}))
        out.append(await face.call("list_memories", {"agent_id": agent, "limit": 20}))
    out.append(await face.call("list_episodes", {"agent_id": "dee"}))
    # every agent: one partition's worker each in Kafka mode, merged by the router
    out.append(await face.call("list_memories", {"limit": 25}))
    out.append(await face.call("list_episodes", {}))
    return out
