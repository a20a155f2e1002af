"""The command each record of a file becomes, as a caller would send it, its id derived from the record."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson

from memstream.api.services.settings import Settings
from memstream.api.tools.registry import Caller
from memstream.api.tools.sanitize import (
    InputError,
    cap,
    check_size,
    check_utf8,
    clean_text,
    normalize_source,
    parse_timestamp,
)
from memstream.api.tools.transfer.command_ids import Envelope, command_seed
from memstream.streams import commands as c
from memstream.streams.events import Actor, Scope, utcnow


def record_agent(rec: dict[str, Any], target: str) -> str:
    """The agent a record lands in: ``target`` when given, else the record's own."""
    aid = target or rec.get("agent_id")
    if not isinstance(aid, str) or not aid or len(aid) > 256:
        raise InputError("no agent: the record has no agent_id and no target_agent_id was given")
    check_utf8(aid, "agent_id")
    return aid


def _instant(rec: dict[str, Any], key: str) -> datetime | None:
    raw = rec.get(key)
    if raw is not None and not isinstance(raw, str):
        raise InputError(f"{key} must be a string")
    return parse_timestamp(raw, key)


class RecordCommands:
    """Builds store / archive_episode / update_profile commands from records, checked as a
    caller's arguments are. A command's id is ``<namespace>:`` and a digest of the record, so
    the same record decides as a retry however often it is imported (W9)."""

    def __init__(self, settings: Settings, caller: Caller, *, target: str, namespace: str, session_key: str) -> None:
        self.settings = settings
        self.caller = caller
        self.target = target
        self.namespace = namespace
        self.session_key = session_key

    def agent_of(self, rec: dict[str, Any]) -> str:
        return record_agent(rec, self.target)

    def envelope(self, rec: dict[str, Any], aid: str, kind: str) -> Envelope:
        project, channel = rec.get("project_id") or "", rec.get("channel") or ""
        if not isinstance(project, str) or not isinstance(channel, str):
            raise InputError("project_id and channel must be strings")
        seed = {k: v for k, v in rec.items() if k not in ("history", "embedding_b64", "embedding_model")}
        return {
            "command_id": f"{self.namespace}:{command_seed(aid, kind, seed)}",
            "scope": Scope(agent_id=aid, project_id=project, channel=channel),
            "actor": Actor(client_id=self.caller.client_id, agent_id=aid, session_id=self.session_key),
            "received_at": utcnow(),
        }

    def memory(self, rec: dict[str, Any]) -> tuple[c.StoreMemory, str]:
        """The store command and the text to embed."""
        s = self.settings
        aid = self.agent_of(rec)
        content = rec.get("content")
        if not isinstance(content, str) or not content:
            raise InputError("empty content")
        check_size(content, "content", s.max_input_chars)
        check_utf8(content, "content")
        text, _ = cap(clean_text(content), s.max_content_chars)
        if not text:
            raise InputError("empty after sanitization")
        msg_id = rec.get("msg_id")
        if msg_id is not None and (not isinstance(msg_id, str) or len(msg_id) > 256):
            raise InputError("msg_id must be a string of at most 256 characters")
        when = rec.get("timestamp")
        if when is not None and not isinstance(when, str):
            raise InputError("timestamp must be a string")
        metadata = rec.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise InputError("metadata must be an object")
        if len(orjson.dumps(metadata)) > s.max_metadata_chars * 4:
            raise InputError("metadata too large")
        cmd = c.StoreMemory(
            **self.envelope(rec, aid, "mem"),
            content=text,
            msg_id=msg_id,
            source=normalize_source(rec.get("source"), aid),
            metadata=metadata,
            timestamp=parse_timestamp(when),
            lock=bool(rec.get("locked")),
        )
        return cmd, text

    def episode(self, rec: dict[str, Any]) -> tuple[c.ArchiveEpisode, str]:
        """The archive_episode command and the text to embed."""
        s = self.settings
        aid = self.agent_of(rec)
        summary, keywords = rec.get("summary"), rec.get("keywords") or ""
        if not isinstance(summary, str) or not isinstance(keywords, str):
            raise InputError("summary and keywords must be strings")
        check_size(summary, "summary", s.max_input_chars)
        check_utf8(summary, "summary")
        check_utf8(keywords, "keywords")
        text, _ = cap(clean_text(summary), s.max_content_chars)
        if not text:
            raise InputError("empty summary")
        metadata = rec.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise InputError("metadata must be an object")
        start_time, end_time = _instant(rec, "start_time"), _instant(rec, "end_time")
        resolved = rec.get("resolved")
        cmd = c.ArchiveEpisode(
            **self.envelope(rec, aid, "ep"),
            summary=text,
            keywords=keywords,
            resolved=None if resolved is None else bool(resolved),
            metadata=metadata,
            start_time=start_time,
            end_time=end_time,
        )
        return cmd, text

    def profile(self, rec: dict[str, Any]) -> c.UpdateProfile:
        aid = self.agent_of(rec)
        content = rec.get("content")
        if not isinstance(content, str) or not clean_text(content):
            raise InputError("empty profile")
        check_utf8(content, "profile")
        text, _ = cap(clean_text(content), self.settings.max_profile_chars)
        return c.UpdateProfile(**self.envelope({"content": text}, aid, "profile"), content=text)
