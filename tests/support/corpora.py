"""A deterministic corpus of memories on a few topics, shared by the recall and context tests."""

from __future__ import annotations

TOPICS = [
    "deploy key rotation schedule for the staging cluster",
    "green tea preferences of the platform team",
    "billing service database migration to postgres",
    "phoenix project launch checklist and security review",
    "printer jams on the third floor with glossy paper",
    "payments on call rotation and escalation policy",
    "kubernetes autoscaler node limits and quotas",
    "quarterly report deadlines for finance",
    "backup storage moved from tape to object store",
    "partner api rate limits per second",
    "internal wiki search index maintenance",
    "vpn certificate expiry and renewal",
]


def corpus(n: int = 60) -> list[str]:
    """``n`` distinct memories: each topic with a numbered variation."""
    return [f"{TOPICS[i % len(TOPICS)]} note {i} item{i}" for i in range(n)]
