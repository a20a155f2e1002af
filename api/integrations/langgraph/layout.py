"""Where a LangGraph namespace and key live in memstream (docs/integrations.md, "LangGraph").

Without a fixed agent, ``namespace[0]`` is the agent and the rest, joined with ``.``, the
project; with one, the whole namespace is the project. The key is the channel, so each item
has a bucket of its own (content dedup never meets two items) and shows up by its key in
memstream's own listings. LangGraph forbids ``.`` in labels, so the join is unambiguous.
"""

from __future__ import annotations

import hashlib
import json

from langgraph.store.base import InvalidNamespaceError

MAX_NAME = 256  # the server's limit on agent ids, projects and channels


class Layout:
    def __init__(self, agent_id: str | None) -> None:
        if agent_id is not None and not agent_id:
            raise ValueError("agent_id must be a non-empty string (or None: namespace[0] is the agent)")
        self.agent_id = agent_id

    def place(self, namespace: tuple[str, ...]) -> tuple[str, str]:
        """(agent_id, project_id) of a namespace that holds items."""
        if self.agent_id is None:
            if not namespace:
                raise InvalidNamespaceError("namespace[0] names the memstream agent, so a namespace cannot be empty")
            agent, rest = namespace[0], namespace[1:]
        else:
            agent, rest = self.agent_id, namespace
        project = ".".join(rest)
        if len(agent) > MAX_NAME or len(project) > MAX_NAME:
            raise InvalidNamespaceError(
                f"namespace {namespace!r} is too long for memstream: the agent label and the rest joined "
                f"with '.' may have {MAX_NAME} characters each"
            )
        return agent, project

    def agent_of_prefix(self, prefix: tuple[str, ...]) -> str | None:
        """The one agent a prefix (or a match path) names, or None when it may be any."""
        if self.agent_id is not None:
            return self.agent_id
        if prefix and prefix[0] != "*":
            return prefix[0]
        return None

    def project_of_prefix(self, prefix: tuple[str, ...]) -> str:
        return ".".join(prefix[1:] if self.agent_id is None else prefix)


def check_key(key: str) -> None:
    if not key or len(key) > MAX_NAME:
        raise ValueError(f"a memstream item key is a channel: 1 to {MAX_NAME} characters, got {len(key)}")


def msg_id(namespace: tuple[str, ...], key: str) -> str:
    """The item's message id: the same (namespace, key) never lands twice, even when two
    processes put a new key at once (the second store is skipped and updates instead)."""
    digest = hashlib.blake2b(json.dumps([list(namespace), key]).encode(), digest_size=16).hexdigest()
    return f"langgraph:{digest}"
