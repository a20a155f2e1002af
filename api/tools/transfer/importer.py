"""Submits a file's records as commands, CHUNK at a time, embedding what brought no usable vector."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeAlias

from memstream.api.services.ports import Engine
from memstream.api.services.progress import Progress
from memstream.api.tools.registry import Caller
from memstream.api.tools.sanitize import InputError
from memstream.api.tools.transfer.batches import CHUNK, chunks
from memstream.api.tools.transfer.dedup import decided_already, duplicate_memory, episode_exists
from memstream.api.tools.transfer.jsonl import Numbered, split_types
from memstream.api.tools.transfer.record_commands import RecordCommands
from memstream.api.tools.transfer.tally import Tally
from memstream.api.tools.transfer.vectors import decode_vector
from memstream.projections.records import ProfileRow
from memstream.streams import commands as c
from memstream.streams.events import Embedding
from memstream.streams.log.port import resolved

TextCommand: TypeAlias = c.StoreMemory | c.ArchiveEpisode
Ready: TypeAlias = tuple[int, dict[str, Any], TextCommand, str]  # line, record, command, text to embed


class Importer:
    """Turns records into commands and submits them, CHUNK at a time; ``tally`` counts them and
    ``progress`` hears how many of the file's records are decided so far."""

    def __init__(
        self,
        engine: Engine,
        caller: Caller,
        *,
        target: str,
        namespace: str,
        session_key: str,
        dry_run: bool,
        progress: Progress | None = None,
    ) -> None:
        self.engine = engine
        self.commands = RecordCommands(
            engine.settings, caller, target=target, namespace=namespace, session_key=session_key
        )
        self.tally = Tally(dry_run)
        self._models: dict[str, str | None] = {}
        self.progress = progress
        self._done = 0
        self._total = 0

    def _advance(self, records: int) -> None:
        self._done += records
        if self.progress is not None:
            self.progress(self._done, self._total)

    async def _model_for(self, aid: str) -> str | None:
        """The model a vector from the file must have to be kept for agent ``aid``."""
        if aid not in self._models:
            eng = self.engine
            model = await resolved(eng.agent_model(aid))  # a Kafka worker reads its read models
            if model is None and eng.embedders.enabled:
                model = eng.embedder.model_id
            self._models[aid] = model
        return self._models[aid]

    async def _file_vector(self, rec: dict[str, Any], aid: str) -> Embedding | None:
        """The file's vector when it is of the agent's model; None: embed the text anew."""
        b64, model = rec.get("embedding_b64"), rec.get("embedding_model")
        if not isinstance(b64, str) or not isinstance(model, str) or model != await self._model_for(aid):
            return None
        return decode_vector(b64, model)

    async def run(self, records: list[Numbered]) -> Tally:
        t = self.tally
        typed, errors = split_types(records)
        t.errors.extend(errors)
        self._total = len(records)
        self._advance(len(records) - sum(map(len, typed.values())))  # kinds not imported: done already
        for chunk in chunks(typed["memory"], CHUNK):
            await self._texts(chunk, self.commands.memory, "memory")
            self._advance(len(chunk))
        for chunk in chunks(typed["episode"], CHUNK):
            await self._texts(chunk, self.commands.episode, "episode")
            self._advance(len(chunk))
        for n, rec in typed["profile"]:
            self._advance(1)  # a profile is one command: counted as it starts
            try:
                cmd = self.commands.profile(rec)
            except (InputError, ValueError) as exc:
                t.errors.append(f"Line {n}: profile: {exc}")
                continue
            current = await self._profile(cmd.scope.agent_id)
            if t.dry_run or (current is not None and current.content == cmd.content):
                t.profile_updated = True  # as CPersona says it: the profile is the file's
                continue
            out = (await self.engine.submit(cmd)).outcome
            if out.result == "applied":
                t.profile_updated = True
            else:
                t.errors.append(f"Line {n}: profile: {out.reason or out.error}")
        return t

    async def _texts(
        self, chunk: list[Numbered], build: Callable[[dict[str, Any]], tuple[TextCommand, str]], kind: str
    ) -> None:
        t = self.tally
        ready: list[Ready] = []
        for n, rec in chunk:
            try:
                cmd, text = build(rec)
            except (InputError, ValueError) as exc:
                t.errors.append(f"Line {n}: {kind}: {exc}")
                continue
            ready.append((n, rec, cmd, text))
        if kind == "episode":  # episodes have no dedup rule of their own: an equal live one is this one
            kept = []
            for item in ready:
                if not decided_already(self.engine, item[2]) and await self._equal_episode(item[2]):
                    t.count(kind, imported=False)
                else:
                    kept.append(item)
            ready = kept
        if t.dry_run:
            for _, _, cmd, _ in ready:
                skipped = decided_already(self.engine, cmd) or (kind == "memory" and await self._duplicate(cmd))
                t.count(kind, imported=not skipped)
            return
        # Embed what the file brought no usable vector for, one model call per agent.
        vectors: dict[int, Embedding | None] = {}
        need: dict[str, list[int]] = {}
        for i, (_, rec, cmd, _) in enumerate(ready):
            emb = await self._file_vector(rec, cmd.scope.agent_id)
            if emb is None:
                need.setdefault(cmd.scope.agent_id, []).append(i)
            else:
                vectors[i] = emb
        for aid, idx in need.items():
            embedded = await self.engine.embed([ready[i][3] for i in idx], agent_id=aid)
            vectors.update(zip(idx, embedded, strict=True))
        commands = [cmd.model_copy(update={"embedding": vectors[i]}) for i, (_, _, cmd, _) in enumerate(ready)]
        results = await asyncio.gather(*(self.engine.submit(cmd) for cmd in commands))
        for (n, rec, _, _), done in zip(ready, results, strict=True):
            out = done.outcome
            if out.result == "rejected":
                t.errors.append(f"Line {n}: {kind}: {out.reason or out.error}")
                continue
            # A retried command id (this record imported before) appends nothing: skipped.
            if out.id is not None and isinstance(rec.get("id"), int):
                t.imported_refs[f"{'mem' if kind == 'memory' else 'ep'}:{rec['id']}"] = out.id
            t.count(kind, imported=out.result == "applied" and done.offset is not None)

    async def _profile(self, agent_id: str) -> ProfileRow | None:
        return await self.engine.read(lambda: self.engine.profiles.rows.get(agent_id))

    async def _equal_episode(self, cmd: TextCommand) -> bool:
        return isinstance(cmd, c.ArchiveEpisode) and await episode_exists(self.engine, cmd)

    async def _duplicate(self, cmd: TextCommand) -> bool:
        return isinstance(cmd, c.StoreMemory) and await duplicate_memory(self.engine, cmd)
