"""The client's tool methods, one per tool of the registry (api/tools/registry.py).

Written by api/client/codegen.py: do not edit by hand; run ``python -m memstream.client.codegen``.
"""

# ruff: noqa: E501

from __future__ import annotations

from typing import Any, Literal

from . import results as r

# Each tool's argument defaults: an argument left at its default is not sent.
DEFAULTS: dict[str, dict[str, Any]] = {
    "archive_episode": {"session_key": "", "command_id": None, "history": None, "keywords": None, "resolved": None, "project_id": None, "channel": None},
    "association_graph": {"limit": 300, "channel": None, "project_id": None, "as_of": None},
    "audit_log": {"agent_id": None, "kind": "refused", "since_offset": 0, "limit": 100},
    "check_contingent": {"refs": None, "project_id": None, "channel": None},
    "check_health": {"agent_id": None, "fix": False, "checks": None, "session_key": ""},
    "context_package": {"query": None, "anchorId": None, "maxContextTokens": None, "limit": 10, "project_id": None, "channel": None, "deep": False},
    "context_packet": {"max_items": 8, "project_id": None, "channel": None, "include_raw": False, "max_item_chars": 800},
    "declare_associations": {"session_key": "", "command_id": None, "associations": None, "anchor_ref": "", "retract": None, "channel": None, "project_id": None},
    "declare_standing": {"session_key": "", "command_id": None, "agent_id": None, "note": None},
    "delete_agent_data": {"session_key": "", "command_id": None},
    "delete_episode": {"session_key": "", "command_id": None, "agent_id": None},
    "delete_memory": {"session_key": "", "command_id": None, "agent_id": None},
    "erase_agent_data": {"session_key": "", "command_id": None, "source": None},
    "erase_memory": {"session_key": "", "command_id": None, "memory_id": None, "ref": None},
    "export_memories": {"include_embeddings": False},
    "get_contents": {"as_of": None},
    "get_profile": {},
    "get_recall_precision": {},
    "history": {"ref": None, "agent_id": None, "since_offset": 0, "limit": 1000},
    "import_memories": {"target_agent_id": "", "dry_run": False, "session_key": "", "command_id": None},
    "list_agents": {"prefix": "", "limit": 1000, "as_of": None},
    "list_episodes": {"agent_id": None, "limit": 50, "project_id": None, "as_of": None},
    "list_memories": {"agent_id": None, "limit": 100, "project_id": None, "as_of": None},
    "lock_memory": {"session_key": "", "command_id": None, "agent_id": None},
    "merge_memories": {"strategy": "skip", "mode": "copy", "dry_run": False, "session_key": "", "command_id": None},
    "recall": {"limit": 10, "deep": False, "channel": None, "exclude_contents": None, "session_key": "", "project_id": None, "source_id": "", "full_content": False, "trace": False, "time_cue": None, "as_of": None},
    "recall_fleet": {"limit": 10, "deep": False, "channel": None, "project_id": None, "source_id": "", "full_content": False, "time_cue": None, "as_of": None},
    "recall_with_context": {"external_context": None, "limit": 10, "channel": None, "deep": False, "project_id": None, "source_id": "", "full_content": False, "session_key": ""},
    "reconstruct": {"count": None, "top_k": None, "max_hops": None, "max_evidence": None, "deep": False, "channel": None, "project_id": None, "source_id": "", "session_key": "", "trace": False, "budget": None, "time_cue": None, "lite": False, "mode": None, "as_of": None},
    "reembed": {"agent_id": None, "batch": 64, "wait": False},
    "reembed_status": {},
    "set_recall_precision": {"session_key": "", "command_id": None, "precision": "", "beta": 0},
    "store": {"session_key": "", "command_id": None, "content": None, "agent_id": None, "id": None, "source": None, "timestamp": None, "metadata": None, "lock": False, "message": None, "channel": None, "project_id": None, "associations": None},
    "traverse": {"max_hops": 1, "limit": 20, "channel": None, "project_id": None, "source_id": "", "as_of": None},
    "unlock_memory": {"session_key": "", "command_id": None, "agent_id": None},
    "update_memory": {"session_key": "", "command_id": None, "agent_id": None},
    "update_profile": {"session_key": "", "command_id": None},
    "verify_memory": {"session_key": "", "command_id": None, "agent_id": None, "note": None},
}

# Tools that change the store; those taking a command_id are retried under the same one.
WRITES = frozenset({"archive_episode", "declare_associations", "declare_standing", "delete_agent_data", "delete_episode", "delete_memory", "erase_agent_data", "erase_memory", "import_memories", "lock_memory", "merge_memories", "reembed", "set_recall_precision", "store", "unlock_memory", "update_memory", "update_profile", "verify_memory"})
COMMAND_ID = frozenset({"archive_episode", "declare_associations", "declare_standing", "delete_agent_data", "delete_episode", "delete_memory", "erase_agent_data", "erase_memory", "import_memories", "lock_memory", "merge_memories", "set_recall_precision", "store", "unlock_memory", "update_memory", "update_profile", "verify_memory"})


class SyncTools:
    """Every tool as a method; ``_invoke`` sends the call."""

    def _invoke(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def archive_episode(self, agent_id: str, summary: str, *, session_key: str = "", command_id: str | None = None, history: list[dict[str, Any]] | None = None, keywords: str | None = None, resolved: bool | None = None, project_id: str | None = None, channel: str | None = None) -> r.ArchiveEpisodeResult:
        """Archive a conversation episode with a caller-computed summary."""
        return r.ArchiveEpisodeResult.model_validate(self._invoke("archive_episode", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "summary": summary, "history": history, "keywords": keywords, "resolved": resolved, "project_id": project_id, "channel": channel}))

    def association_graph(self, agent_id: str, *, limit: int = 300, channel: str | None = None, project_id: str | None = None, as_of: int | str | None = None) -> r.GraphResult:
        """memstream: an agent's whole declared graph (entities, relations, mentions, record previews), to draw."""
        return r.GraphResult.model_validate(self._invoke("association_graph", {"agent_id": agent_id, "limit": limit, "channel": channel, "project_id": project_id, "as_of": as_of}))

    def audit_log(self, *, agent_id: str | None = None, kind: Literal['refused', 'skipped', 'all'] = "refused", since_offset: int = 0, limit: int = 100) -> r.AuditLogResult:
        """Refused (and skipped) commands: who, what, why."""
        return r.AuditLogResult.model_validate(self._invoke("audit_log", {"agent_id": agent_id, "kind": kind, "since_offset": since_offset, "limit": limit}))

    def check_contingent(self, agent_id: str, values: list[str | dict[str, Any]], *, refs: list[str] | None = None, project_id: str | None = None, channel: str | None = None) -> r.ContingentResult:
        """memstream: which used values rest only on memories the agent set aside (open / noise / ruled-out)."""
        return r.ContingentResult.model_validate(self._invoke("check_contingent", {"agent_id": agent_id, "values": values, "refs": refs, "project_id": project_id, "channel": channel}))

    def check_health(self, *, agent_id: str | None = None, fix: bool = False, checks: list[str] | None = None, session_key: str = "") -> r.HealthResult:
        """Health verdict (status) with log and read-model figures."""
        return r.HealthResult.model_validate(self._invoke("check_health", {"agent_id": agent_id, "fix": fix, "checks": checks, "session_key": session_key}))

    def context_package(self, agent_id: str, *, query: str | None = None, anchorId: str | None = None, maxContextTokens: int | None = None, limit: int = 10, project_id: str | None = None, channel: str | None = None, deep: bool = False) -> r.ContextPackageResult:
        """memstream: a token-budgeted context package (summary[] + anchors[] + tokenBudget); pass anchorId to expand one anchor."""
        return r.ContextPackageResult.model_validate(self._invoke("context_package", {"agent_id": agent_id, "query": query, "anchorId": anchorId, "maxContextTokens": maxContextTokens, "limit": limit, "project_id": project_id, "channel": channel, "deep": deep}))

    def context_packet(self, agent_id: str, query: str, *, max_items: int = 8, project_id: str | None = None, channel: str | None = None, include_raw: bool = False, max_item_chars: int = 800) -> r.ContextPacketResult:
        """memstream: a know/miss packet: exactly one of know / miss; on a miss, do not answer from memory."""
        return r.ContextPacketResult.model_validate(self._invoke("context_packet", {"agent_id": agent_id, "query": query, "max_items": max_items, "project_id": project_id, "channel": channel, "include_raw": include_raw, "max_item_chars": max_item_chars}))

    def declare_associations(self, agent_id: str, *, session_key: str = "", command_id: str | None = None, associations: dict[str, Any] | None = None, anchor_ref: str = "", retract: dict[str, Any] | None = None, channel: str | None = None, project_id: str | None = None) -> r.DeclareAssociationsResult:
        """Declare entities (with aliases), mentions and relations; retract is the only removal. Malformed items are reported in dropped. Nothing is extracted or inferred."""
        return r.DeclareAssociationsResult.model_validate(self._invoke("declare_associations", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "associations": associations, "anchor_ref": anchor_ref, "retract": retract, "channel": channel, "project_id": project_id}))

    def declare_standing(self, ref: str, standing: Literal['fact', 'open', 'noise', 'ruled-out'], *, session_key: str = "", command_id: str | None = None, agent_id: str | None = None, note: str | None = None) -> r.DeclareStandingResult:
        """memstream: declare a standing on a memory or episode (fact / open / noise / ruled-out); the last is current."""
        return r.DeclareStandingResult.model_validate(self._invoke("declare_standing", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "ref": ref, "standing": standing, "note": note}))

    def delete_agent_data(self, agent_id: str, *, session_key: str = "", command_id: str | None = None) -> r.DeleteAgentDataResult:
        """Delete an agent's memories, episodes and profile; locked memories stay."""
        return r.DeleteAgentDataResult.model_validate(self._invoke("delete_agent_data", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id}))

    def delete_episode(self, episode_id: int, *, session_key: str = "", command_id: str | None = None, agent_id: str | None = None) -> r.DeleteResult:
        """Delete an episode."""
        return r.DeleteResult.model_validate(self._invoke("delete_episode", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "episode_id": episode_id}))

    def delete_memory(self, memory_id: int, *, session_key: str = "", command_id: str | None = None, agent_id: str | None = None) -> r.DeleteResult:
        """Delete a memory. Refused if locked; its history stays."""
        return r.DeleteResult.model_validate(self._invoke("delete_memory", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "memory_id": memory_id}))

    def erase_agent_data(self, agent_id: str, reason: str, *, session_key: str = "", command_id: str | None = None, source: str | None = None) -> r.EraseResult:
        """Erase everything of an agent (or only one source's memories) for good, locked memories included."""
        return r.EraseResult.model_validate(self._invoke("erase_agent_data", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "reason": reason, "source": source}))

    def erase_memory(self, agent_id: str, reason: str, *, session_key: str = "", command_id: str | None = None, memory_id: int | None = None, ref: str | None = None) -> r.EraseResult:
        """Erase a memory or episode for good (its keys are destroyed; a lock does not stop it). History keeps that it was erased, not what."""
        return r.EraseResult.model_validate(self._invoke("erase_memory", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "memory_id": memory_id, "ref": ref, "reason": reason}))

    def export_memories(self, agent_id: str, output_path: str, *, include_embeddings: bool = False) -> r.TransferResult:
        """Export an agent's memories, episodes and profile (with history; vectors on request) as JSONL under the export directory."""
        return r.TransferResult.model_validate(self._invoke("export_memories", {"agent_id": agent_id, "output_path": output_path, "include_embeddings": include_embeddings}))

    def get_contents(self, agent_id: str, refs: list[str | dict[str, Any]], *, as_of: int | str | None = None) -> r.GetContentsResult:
        """Full content for recall refs (mem:<id> / ep:<id>), with ranges."""
        return r.GetContentsResult.model_validate(self._invoke("get_contents", {"agent_id": agent_id, "refs": refs, "as_of": as_of}))

    def get_profile(self, agent_id: str) -> r.ProfileResult:
        """The agent's profile ('' when none)."""
        return r.ProfileResult.model_validate(self._invoke("get_profile", {"agent_id": agent_id}))

    def get_recall_precision(self, agent_id: str) -> r.PrecisionResult:
        """The agent's recall precision and beta."""
        return r.PrecisionResult.model_validate(self._invoke("get_recall_precision", {"agent_id": agent_id}))

    def history(self, ref: str | None = None, *, agent_id: str | None = None, since_offset: int = 0, limit: int = 1000) -> r.HistoryResult:
        """Every event of a memory or an agent, oldest first (actor, time, offset, change)."""
        return r.HistoryResult.model_validate(self._invoke("history", {"ref": ref, "agent_id": agent_id, "since_offset": since_offset, "limit": limit}))

    def import_memories(self, input_path: str, *, target_agent_id: str = "", dry_run: bool = False, session_key: str = "", command_id: str | None = None) -> r.TransferResult:
        """Import a JSONL export through the normal write rules; importing the same file again changes nothing."""
        return r.TransferResult.model_validate(self._invoke("import_memories", {"input_path": input_path, "target_agent_id": target_agent_id, "dry_run": dry_run, "session_key": session_key, "command_id": command_id}))

    def list_agents(self, *, prefix: str = "", limit: int = 1000, as_of: int | str | None = None) -> r.ListAgentsResult:
        """memstream: the agents the caller may read, by id, with counts (memories, episodes) and last activity."""
        return r.ListAgentsResult.model_validate(self._invoke("list_agents", {"prefix": prefix, "limit": limit, "as_of": as_of}))

    def list_episodes(self, agent_id: str | None = None, *, limit: int = 50, project_id: str | None = None, as_of: int | str | None = None) -> r.ListEpisodesResult:
        """Recent episodes, newest first."""
        return r.ListEpisodesResult.model_validate(self._invoke("list_episodes", {"agent_id": agent_id, "limit": limit, "project_id": project_id, "as_of": as_of}))

    def list_memories(self, agent_id: str | None = None, *, limit: int = 100, project_id: str | None = None, as_of: int | str | None = None) -> r.ListMemoriesResult:
        """Recent memories, newest first."""
        return r.ListMemoriesResult.model_validate(self._invoke("list_memories", {"agent_id": agent_id, "limit": limit, "project_id": project_id, "as_of": as_of}))

    def lock_memory(self, memory_id: int, *, session_key: str = "", command_id: str | None = None, agent_id: str | None = None) -> r.LockResult:
        """Protect a memory from edits and deletion (ranking is unchanged)."""
        return r.LockResult.model_validate(self._invoke("lock_memory", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "memory_id": memory_id}))

    def merge_memories(self, source_agent_id: str, target_agent_id: str, *, strategy: str = "skip", mode: str = "copy", dry_run: bool = False, session_key: str = "", command_id: str | None = None) -> r.TransferResult:
        """Copy (or move) one agent's memories, episodes and profile into another; re-running changes nothing."""
        return r.TransferResult.model_validate(self._invoke("merge_memories", {"source_agent_id": source_agent_id, "target_agent_id": target_agent_id, "strategy": strategy, "mode": mode, "dry_run": dry_run, "session_key": session_key, "command_id": command_id}))

    def recall(self, agent_id: str, query: str, *, limit: int = 10, deep: bool = False, channel: str | None = None, exclude_contents: list[str] | None = None, session_key: str = "", project_id: str | None = None, source_id: str = "", full_content: bool = False, trace: bool = False, time_cue: dict[str, Any] | None = None, as_of: int | str | None = None) -> r.RecallResult:
        """Recall memories relevant to a query. Rows ascend: the last is the best."""
        return r.RecallResult.model_validate(self._invoke("recall", {"agent_id": agent_id, "query": query, "limit": limit, "deep": deep, "channel": channel, "exclude_contents": exclude_contents, "session_key": session_key, "project_id": project_id, "source_id": source_id, "full_content": full_content, "trace": trace, "time_cue": time_cue, "as_of": as_of}))

    def recall_fleet(self, agent_ids: list[str], query: str, *, limit: int = 10, deep: bool = False, channel: str | None = None, project_id: str | None = None, source_id: str = "", full_content: bool = False, time_cue: dict[str, Any] | None = None, as_of: int | str | None = None) -> r.RecallFleetResult:
        """memstream: recall across several agents; each agent's rows ascend (last is best) in its own list."""
        return r.RecallFleetResult.model_validate(self._invoke("recall_fleet", {"agent_ids": agent_ids, "query": query, "limit": limit, "deep": deep, "channel": channel, "project_id": project_id, "source_id": source_id, "full_content": full_content, "time_cue": time_cue, "as_of": as_of}))

    def recall_with_context(self, agent_id: str, query: str, *, external_context: list[dict[str, Any]] | None = None, limit: int = 10, channel: str | None = None, deep: bool = False, project_id: str | None = None, source_id: str = "", full_content: bool = False, session_key: str = "") -> r.RecallWithContextResult:
        """Recall, merged chronologically with the caller's own messages."""
        return r.RecallWithContextResult.model_validate(self._invoke("recall_with_context", {"agent_id": agent_id, "query": query, "external_context": external_context, "limit": limit, "channel": channel, "deep": deep, "project_id": project_id, "source_id": source_id, "full_content": full_content, "session_key": session_key}))

    def reconstruct(self, agent_id: str, query: str, *, count: int | None = None, top_k: int | None = None, max_hops: int | None = None, max_evidence: int | None = None, deep: bool = False, channel: str | None = None, project_id: str | None = None, source_id: str = "", session_key: str = "", trace: bool = False, budget: int | None = None, time_cue: dict[str, Any] | None = None, lite: bool = False, mode: Literal['lite', 'pro'] | None = None, as_of: int | str | None = None) -> r.ReconstructResult:
        """Recall items assembled from the candidate pool: bundled records, declared-relation evidence with hops, roles, shortfall_reason and bounds. Content is a quotation, never composed."""
        return r.ReconstructResult.model_validate(self._invoke("reconstruct", {"agent_id": agent_id, "query": query, "count": count, "top_k": top_k, "max_hops": max_hops, "max_evidence": max_evidence, "deep": deep, "channel": channel, "project_id": project_id, "source_id": source_id, "session_key": session_key, "trace": trace, "budget": budget, "time_cue": time_cue, "lite": lite, "mode": mode, "as_of": as_of}))

    def reembed(self, model: str, *, agent_id: str | None = None, batch: int = 64, wait: bool = False) -> r.ReembedResult:
        """memstream: move agents' vectors to another embedding model; recall keeps answering meanwhile."""
        return r.ReembedResult.model_validate(self._invoke("reembed", {"model": model, "agent_id": agent_id, "batch": batch, "wait": wait}))

    def reembed_status(self) -> r.ReembedResult:
        """memstream: progress of the current or last re-embed."""
        return r.ReembedResult.model_validate(self._invoke("reembed_status", {}))

    def set_recall_precision(self, agent_id: str, *, session_key: str = "", command_id: str | None = None, precision: str = "", beta: float = 0) -> r.PrecisionResult:
        """Set an agent's recall precision (strict / balanced / lenient or a raw beta)."""
        return r.PrecisionResult.model_validate(self._invoke("set_recall_precision", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "precision": precision, "beta": beta}))

    def store(self, agent_id: str | None = None, content: str | None = None, *, session_key: str = "", command_id: str | None = None, id: str | None = None, source: dict[str, Any] | None = None, timestamp: str | None = None, metadata: dict[str, Any] | None = None, lock: bool = False, message: dict[str, Any] | None = None, channel: str | None = None, project_id: str | None = None, associations: dict[str, Any] | None = None) -> r.StoreResult:
        """Store a memory. Answers result: stored / skipped / rejected."""
        return r.StoreResult.model_validate(self._invoke("store", {"session_key": session_key, "command_id": command_id, "content": content, "agent_id": agent_id, "id": id, "source": source, "timestamp": timestamp, "metadata": metadata, "lock": lock, "message": message, "channel": channel, "project_id": project_id, "associations": associations}))

    def traverse(self, agent_id: str, entity: str, *, max_hops: int = 1, limit: int = 20, channel: str | None = None, project_id: str | None = None, source_id: str = "", as_of: int | str | None = None) -> r.TraverseResult:
        """The neighbourhood of a declared entity (name or alias): relations to max_hops, ordered by hops."""
        return r.TraverseResult.model_validate(self._invoke("traverse", {"agent_id": agent_id, "entity": entity, "max_hops": max_hops, "limit": limit, "channel": channel, "project_id": project_id, "source_id": source_id, "as_of": as_of}))

    def unlock_memory(self, memory_id: int, *, session_key: str = "", command_id: str | None = None, agent_id: str | None = None) -> r.UnlockResult:
        """Lift a memory's lock."""
        return r.UnlockResult.model_validate(self._invoke("unlock_memory", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "memory_id": memory_id}))

    def update_memory(self, memory_id: int, content: str, *, session_key: str = "", command_id: str | None = None, agent_id: str | None = None) -> r.UpdateResult:
        """Replace a memory's content (re-embedded). Refused if locked."""
        return r.UpdateResult.model_validate(self._invoke("update_memory", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "memory_id": memory_id, "content": content}))

    def update_profile(self, agent_id: str, profile: str, *, session_key: str = "", command_id: str | None = None) -> r.UpdateProfileResult:
        """Replace the agent's profile (at most one per agent)."""
        return r.UpdateProfileResult.model_validate(self._invoke("update_profile", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "profile": profile}))

    def verify_memory(self, memory_id: int, *, session_key: str = "", command_id: str | None = None, agent_id: str | None = None, note: str | None = None) -> r.VerifyResult:
        """memstream: mark a memory re-checked against its source (packets count freshness from here)."""
        return r.VerifyResult.model_validate(self._invoke("verify_memory", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "memory_id": memory_id, "note": note}))


class AsyncTools:
    """Every tool as an async method; ``_invoke`` sends the call."""

    async def _invoke(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    async def archive_episode(self, agent_id: str, summary: str, *, session_key: str = "", command_id: str | None = None, history: list[dict[str, Any]] | None = None, keywords: str | None = None, resolved: bool | None = None, project_id: str | None = None, channel: str | None = None) -> r.ArchiveEpisodeResult:
        """Archive a conversation episode with a caller-computed summary."""
        return r.ArchiveEpisodeResult.model_validate(await self._invoke("archive_episode", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "summary": summary, "history": history, "keywords": keywords, "resolved": resolved, "project_id": project_id, "channel": channel}))

    async def association_graph(self, agent_id: str, *, limit: int = 300, channel: str | None = None, project_id: str | None = None, as_of: int | str | None = None) -> r.GraphResult:
        """memstream: an agent's whole declared graph (entities, relations, mentions, record previews), to draw."""
        return r.GraphResult.model_validate(await self._invoke("association_graph", {"agent_id": agent_id, "limit": limit, "channel": channel, "project_id": project_id, "as_of": as_of}))

    async def audit_log(self, *, agent_id: str | None = None, kind: Literal['refused', 'skipped', 'all'] = "refused", since_offset: int = 0, limit: int = 100) -> r.AuditLogResult:
        """Refused (and skipped) commands: who, what, why."""
        return r.AuditLogResult.model_validate(await self._invoke("audit_log", {"agent_id": agent_id, "kind": kind, "since_offset": since_offset, "limit": limit}))

    async def check_contingent(self, agent_id: str, values: list[str | dict[str, Any]], *, refs: list[str] | None = None, project_id: str | None = None, channel: str | None = None) -> r.ContingentResult:
        """memstream: which used values rest only on memories the agent set aside (open / noise / ruled-out)."""
        return r.ContingentResult.model_validate(await self._invoke("check_contingent", {"agent_id": agent_id, "values": values, "refs": refs, "project_id": project_id, "channel": channel}))

    async def check_health(self, *, agent_id: str | None = None, fix: bool = False, checks: list[str] | None = None, session_key: str = "") -> r.HealthResult:
        """Health verdict (status) with log and read-model figures."""
        return r.HealthResult.model_validate(await self._invoke("check_health", {"agent_id": agent_id, "fix": fix, "checks": checks, "session_key": session_key}))

    async def context_package(self, agent_id: str, *, query: str | None = None, anchorId: str | None = None, maxContextTokens: int | None = None, limit: int = 10, project_id: str | None = None, channel: str | None = None, deep: bool = False) -> r.ContextPackageResult:
        """memstream: a token-budgeted context package (summary[] + anchors[] + tokenBudget); pass anchorId to expand one anchor."""
        return r.ContextPackageResult.model_validate(await self._invoke("context_package", {"agent_id": agent_id, "query": query, "anchorId": anchorId, "maxContextTokens": maxContextTokens, "limit": limit, "project_id": project_id, "channel": channel, "deep": deep}))

    async def context_packet(self, agent_id: str, query: str, *, max_items: int = 8, project_id: str | None = None, channel: str | None = None, include_raw: bool = False, max_item_chars: int = 800) -> r.ContextPacketResult:
        """memstream: a know/miss packet: exactly one of know / miss; on a miss, do not answer from memory."""
        return r.ContextPacketResult.model_validate(await self._invoke("context_packet", {"agent_id": agent_id, "query": query, "max_items": max_items, "project_id": project_id, "channel": channel, "include_raw": include_raw, "max_item_chars": max_item_chars}))

    async def declare_associations(self, agent_id: str, *, session_key: str = "", command_id: str | None = None, associations: dict[str, Any] | None = None, anchor_ref: str = "", retract: dict[str, Any] | None = None, channel: str | None = None, project_id: str | None = None) -> r.DeclareAssociationsResult:
        """Declare entities (with aliases), mentions and relations; retract is the only removal. Malformed items are reported in dropped. Nothing is extracted or inferred."""
        return r.DeclareAssociationsResult.model_validate(await self._invoke("declare_associations", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "associations": associations, "anchor_ref": anchor_ref, "retract": retract, "channel": channel, "project_id": project_id}))

    async def declare_standing(self, ref: str, standing: Literal['fact', 'open', 'noise', 'ruled-out'], *, session_key: str = "", command_id: str | None = None, agent_id: str | None = None, note: str | None = None) -> r.DeclareStandingResult:
        """memstream: declare a standing on a memory or episode (fact / open / noise / ruled-out); the last is current."""
        return r.DeclareStandingResult.model_validate(await self._invoke("declare_standing", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "ref": ref, "standing": standing, "note": note}))

    async def delete_agent_data(self, agent_id: str, *, session_key: str = "", command_id: str | None = None) -> r.DeleteAgentDataResult:
        """Delete an agent's memories, episodes and profile; locked memories stay."""
        return r.DeleteAgentDataResult.model_validate(await self._invoke("delete_agent_data", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id}))

    async def delete_episode(self, episode_id: int, *, session_key: str = "", command_id: str | None = None, agent_id: str | None = None) -> r.DeleteResult:
        """Delete an episode."""
        return r.DeleteResult.model_validate(await self._invoke("delete_episode", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "episode_id": episode_id}))

    async def delete_memory(self, memory_id: int, *, session_key: str = "", command_id: str | None = None, agent_id: str | None = None) -> r.DeleteResult:
        """Delete a memory. Refused if locked; its history stays."""
        return r.DeleteResult.model_validate(await self._invoke("delete_memory", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "memory_id": memory_id}))

    async def erase_agent_data(self, agent_id: str, reason: str, *, session_key: str = "", command_id: str | None = None, source: str | None = None) -> r.EraseResult:
        """Erase everything of an agent (or only one source's memories) for good, locked memories included."""
        return r.EraseResult.model_validate(await self._invoke("erase_agent_data", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "reason": reason, "source": source}))

    async def erase_memory(self, agent_id: str, reason: str, *, session_key: str = "", command_id: str | None = None, memory_id: int | None = None, ref: str | None = None) -> r.EraseResult:
        """Erase a memory or episode for good (its keys are destroyed; a lock does not stop it). History keeps that it was erased, not what."""
        return r.EraseResult.model_validate(await self._invoke("erase_memory", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "memory_id": memory_id, "ref": ref, "reason": reason}))

    async def export_memories(self, agent_id: str, output_path: str, *, include_embeddings: bool = False) -> r.TransferResult:
        """Export an agent's memories, episodes and profile (with history; vectors on request) as JSONL under the export directory."""
        return r.TransferResult.model_validate(await self._invoke("export_memories", {"agent_id": agent_id, "output_path": output_path, "include_embeddings": include_embeddings}))

    async def get_contents(self, agent_id: str, refs: list[str | dict[str, Any]], *, as_of: int | str | None = None) -> r.GetContentsResult:
        """Full content for recall refs (mem:<id> / ep:<id>), with ranges."""
        return r.GetContentsResult.model_validate(await self._invoke("get_contents", {"agent_id": agent_id, "refs": refs, "as_of": as_of}))

    async def get_profile(self, agent_id: str) -> r.ProfileResult:
        """The agent's profile ('' when none)."""
        return r.ProfileResult.model_validate(await self._invoke("get_profile", {"agent_id": agent_id}))

    async def get_recall_precision(self, agent_id: str) -> r.PrecisionResult:
        """The agent's recall precision and beta."""
        return r.PrecisionResult.model_validate(await self._invoke("get_recall_precision", {"agent_id": agent_id}))

    async def history(self, ref: str | None = None, *, agent_id: str | None = None, since_offset: int = 0, limit: int = 1000) -> r.HistoryResult:
        """Every event of a memory or an agent, oldest first (actor, time, offset, change)."""
        return r.HistoryResult.model_validate(await self._invoke("history", {"ref": ref, "agent_id": agent_id, "since_offset": since_offset, "limit": limit}))

    async def import_memories(self, input_path: str, *, target_agent_id: str = "", dry_run: bool = False, session_key: str = "", command_id: str | None = None) -> r.TransferResult:
        """Import a JSONL export through the normal write rules; importing the same file again changes nothing."""
        return r.TransferResult.model_validate(await self._invoke("import_memories", {"input_path": input_path, "target_agent_id": target_agent_id, "dry_run": dry_run, "session_key": session_key, "command_id": command_id}))

    async def list_agents(self, *, prefix: str = "", limit: int = 1000, as_of: int | str | None = None) -> r.ListAgentsResult:
        """memstream: the agents the caller may read, by id, with counts (memories, episodes) and last activity."""
        return r.ListAgentsResult.model_validate(await self._invoke("list_agents", {"prefix": prefix, "limit": limit, "as_of": as_of}))

    async def list_episodes(self, agent_id: str | None = None, *, limit: int = 50, project_id: str | None = None, as_of: int | str | None = None) -> r.ListEpisodesResult:
        """Recent episodes, newest first."""
        return r.ListEpisodesResult.model_validate(await self._invoke("list_episodes", {"agent_id": agent_id, "limit": limit, "project_id": project_id, "as_of": as_of}))

    async def list_memories(self, agent_id: str | None = None, *, limit: int = 100, project_id: str | None = None, as_of: int | str | None = None) -> r.ListMemoriesResult:
        """Recent memories, newest first."""
        return r.ListMemoriesResult.model_validate(await self._invoke("list_memories", {"agent_id": agent_id, "limit": limit, "project_id": project_id, "as_of": as_of}))

    async def lock_memory(self, memory_id: int, *, session_key: str = "", command_id: str | None = None, agent_id: str | None = None) -> r.LockResult:
        """Protect a memory from edits and deletion (ranking is unchanged)."""
        return r.LockResult.model_validate(await self._invoke("lock_memory", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "memory_id": memory_id}))

    async def merge_memories(self, source_agent_id: str, target_agent_id: str, *, strategy: str = "skip", mode: str = "copy", dry_run: bool = False, session_key: str = "", command_id: str | None = None) -> r.TransferResult:
        """Copy (or move) one agent's memories, episodes and profile into another; re-running changes nothing."""
        return r.TransferResult.model_validate(await self._invoke("merge_memories", {"source_agent_id": source_agent_id, "target_agent_id": target_agent_id, "strategy": strategy, "mode": mode, "dry_run": dry_run, "session_key": session_key, "command_id": command_id}))

    async def recall(self, agent_id: str, query: str, *, limit: int = 10, deep: bool = False, channel: str | None = None, exclude_contents: list[str] | None = None, session_key: str = "", project_id: str | None = None, source_id: str = "", full_content: bool = False, trace: bool = False, time_cue: dict[str, Any] | None = None, as_of: int | str | None = None) -> r.RecallResult:
        """Recall memories relevant to a query. Rows ascend: the last is the best."""
        return r.RecallResult.model_validate(await self._invoke("recall", {"agent_id": agent_id, "query": query, "limit": limit, "deep": deep, "channel": channel, "exclude_contents": exclude_contents, "session_key": session_key, "project_id": project_id, "source_id": source_id, "full_content": full_content, "trace": trace, "time_cue": time_cue, "as_of": as_of}))

    async def recall_fleet(self, agent_ids: list[str], query: str, *, limit: int = 10, deep: bool = False, channel: str | None = None, project_id: str | None = None, source_id: str = "", full_content: bool = False, time_cue: dict[str, Any] | None = None, as_of: int | str | None = None) -> r.RecallFleetResult:
        """memstream: recall across several agents; each agent's rows ascend (last is best) in its own list."""
        return r.RecallFleetResult.model_validate(await self._invoke("recall_fleet", {"agent_ids": agent_ids, "query": query, "limit": limit, "deep": deep, "channel": channel, "project_id": project_id, "source_id": source_id, "full_content": full_content, "time_cue": time_cue, "as_of": as_of}))

    async def recall_with_context(self, agent_id: str, query: str, *, external_context: list[dict[str, Any]] | None = None, limit: int = 10, channel: str | None = None, deep: bool = False, project_id: str | None = None, source_id: str = "", full_content: bool = False, session_key: str = "") -> r.RecallWithContextResult:
        """Recall, merged chronologically with the caller's own messages."""
        return r.RecallWithContextResult.model_validate(await self._invoke("recall_with_context", {"agent_id": agent_id, "query": query, "external_context": external_context, "limit": limit, "channel": channel, "deep": deep, "project_id": project_id, "source_id": source_id, "full_content": full_content, "session_key": session_key}))

    async def reconstruct(self, agent_id: str, query: str, *, count: int | None = None, top_k: int | None = None, max_hops: int | None = None, max_evidence: int | None = None, deep: bool = False, channel: str | None = None, project_id: str | None = None, source_id: str = "", session_key: str = "", trace: bool = False, budget: int | None = None, time_cue: dict[str, Any] | None = None, lite: bool = False, mode: Literal['lite', 'pro'] | None = None, as_of: int | str | None = None) -> r.ReconstructResult:
        """Recall items assembled from the candidate pool: bundled records, declared-relation evidence with hops, roles, shortfall_reason and bounds. Content is a quotation, never composed."""
        return r.ReconstructResult.model_validate(await self._invoke("reconstruct", {"agent_id": agent_id, "query": query, "count": count, "top_k": top_k, "max_hops": max_hops, "max_evidence": max_evidence, "deep": deep, "channel": channel, "project_id": project_id, "source_id": source_id, "session_key": session_key, "trace": trace, "budget": budget, "time_cue": time_cue, "lite": lite, "mode": mode, "as_of": as_of}))

    async def reembed(self, model: str, *, agent_id: str | None = None, batch: int = 64, wait: bool = False) -> r.ReembedResult:
        """memstream: move agents' vectors to another embedding model; recall keeps answering meanwhile."""
        return r.ReembedResult.model_validate(await self._invoke("reembed", {"model": model, "agent_id": agent_id, "batch": batch, "wait": wait}))

    async def reembed_status(self) -> r.ReembedResult:
        """memstream: progress of the current or last re-embed."""
        return r.ReembedResult.model_validate(await self._invoke("reembed_status", {}))

    async def set_recall_precision(self, agent_id: str, *, session_key: str = "", command_id: str | None = None, precision: str = "", beta: float = 0) -> r.PrecisionResult:
        """Set an agent's recall precision (strict / balanced / lenient or a raw beta)."""
        return r.PrecisionResult.model_validate(await self._invoke("set_recall_precision", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "precision": precision, "beta": beta}))

    async def store(self, agent_id: str | None = None, content: str | None = None, *, session_key: str = "", command_id: str | None = None, id: str | None = None, source: dict[str, Any] | None = None, timestamp: str | None = None, metadata: dict[str, Any] | None = None, lock: bool = False, message: dict[str, Any] | None = None, channel: str | None = None, project_id: str | None = None, associations: dict[str, Any] | None = None) -> r.StoreResult:
        """Store a memory. Answers result: stored / skipped / rejected."""
        return r.StoreResult.model_validate(await self._invoke("store", {"session_key": session_key, "command_id": command_id, "content": content, "agent_id": agent_id, "id": id, "source": source, "timestamp": timestamp, "metadata": metadata, "lock": lock, "message": message, "channel": channel, "project_id": project_id, "associations": associations}))

    async def traverse(self, agent_id: str, entity: str, *, max_hops: int = 1, limit: int = 20, channel: str | None = None, project_id: str | None = None, source_id: str = "", as_of: int | str | None = None) -> r.TraverseResult:
        """The neighbourhood of a declared entity (name or alias): relations to max_hops, ordered by hops."""
        return r.TraverseResult.model_validate(await self._invoke("traverse", {"agent_id": agent_id, "entity": entity, "max_hops": max_hops, "limit": limit, "channel": channel, "project_id": project_id, "source_id": source_id, "as_of": as_of}))

    async def unlock_memory(self, memory_id: int, *, session_key: str = "", command_id: str | None = None, agent_id: str | None = None) -> r.UnlockResult:
        """Lift a memory's lock."""
        return r.UnlockResult.model_validate(await self._invoke("unlock_memory", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "memory_id": memory_id}))

    async def update_memory(self, memory_id: int, content: str, *, session_key: str = "", command_id: str | None = None, agent_id: str | None = None) -> r.UpdateResult:
        """Replace a memory's content (re-embedded). Refused if locked."""
        return r.UpdateResult.model_validate(await self._invoke("update_memory", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "memory_id": memory_id, "content": content}))

    async def update_profile(self, agent_id: str, profile: str, *, session_key: str = "", command_id: str | None = None) -> r.UpdateProfileResult:
        """Replace the agent's profile (at most one per agent)."""
        return r.UpdateProfileResult.model_validate(await self._invoke("update_profile", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "profile": profile}))

    async def verify_memory(self, memory_id: int, *, session_key: str = "", command_id: str | None = None, agent_id: str | None = None, note: str | None = None) -> r.VerifyResult:
        """memstream: mark a memory re-checked against its source (packets count freshness from here)."""
        return r.VerifyResult.model_validate(await self._invoke("verify_memory", {"session_key": session_key, "command_id": command_id, "agent_id": agent_id, "memory_id": memory_id, "note": note}))
