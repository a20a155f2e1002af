"""What the deciders know of one agent: its live records, dedup indexes, model and command memo."""

from __future__ import annotations

from collections import deque
from collections.abc import ItemsView, Iterable
from dataclasses import dataclass, field, replace
from itertools import compress
from operator import attrgetter
from typing import Any, TypeVar

from memstream.streams.decision.associations.index import AssocIndex
from memstream.streams.decision.memo import COMMAND_MEMO_PER_AGENT, REDACTED_REPORT, AssociationsMemo, Memo
from memstream.streams.release import release_later

_K = TypeVar("_K")


@dataclass(slots=True)
class MemoryFacts:
    """Never changed in place once in ``AgentDecisionState.memories``: a change puts a new
    one there (``AgentDecisionState.change``), so a capture of the state for its snapshot
    shares them instead of copying each (``capture.py``)."""

    project: str
    channel: str
    msg_id: str | None
    content_key: bytes
    source_id: str = ""
    locked: bool = False
    # Models this memory has a vector of: one after a write, two while a re-embed is under
    # way (see ``memory.reembedded``), so the switch can check that nobody is left behind.
    models: tuple[str, ...] = ()


class CommandMemos:
    """What an agent's most recent commands decided, by command id, oldest first, at most
    ``COMMAND_MEMO_PER_AGENT``. A plain dict (its insertion order is the age order) with the
    ids in a deque beside it to find the oldest: a dict copies in one block where an
    OrderedDict's copy reinserts every entry (50,000 memos: 2-10 ms against 130-600 ms on a
    loaded machine), and a capture for a snapshot copies it on the writer thread."""

    __slots__ = ("_memos", "_order")

    def __init__(self, items: Iterable[tuple[str, Memo]] = ()) -> None:
        self._memos: dict[str, Memo] = dict(items)
        self._order: deque[str] = deque(self._memos)

    def get(self, command_id: str) -> Memo | None:
        return self._memos.get(command_id)

    def __getitem__(self, command_id: str) -> Memo:
        return self._memos[command_id]

    def __contains__(self, command_id: object) -> bool:
        return command_id in self._memos

    def __len__(self) -> int:
        return len(self._memos)

    def items(self) -> ItemsView[str, Memo]:
        return self._memos.items()

    def add(self, command_id: str, memo: Memo) -> None:
        """Record a new command (the oldest one goes past the bound)."""
        self._memos[command_id] = memo
        self._order.append(command_id)
        if len(self._order) > COMMAND_MEMO_PER_AGENT:
            del self._memos[self._order.popleft()]

    def replace(self, command_id: str, memo: Memo) -> None:
        """A recorded command's memo changed; it keeps its age."""
        if command_id in self._memos:
            self._memos[command_id] = memo

    def clear(self) -> None:
        self._memos.clear()
        self._order.clear()

    def copy(self) -> CommandMemos:
        out = CommandMemos.__new__(CommandMemos)
        out._memos, out._order = self._memos.copy(), self._order.copy()
        return out


@dataclass(slots=True)
class AgentDecisionState:
    memories: dict[int, MemoryFacts] = field(default_factory=dict)
    by_msg: dict[tuple[str, str], int] = field(default_factory=dict)
    by_content: dict[tuple[str, str, bytes], int] = field(default_factory=dict)
    # episode id -> models it has a vector of (as ``MemoryFacts.models``)
    episodes: dict[int, tuple[str, ...]] = field(default_factory=dict)
    has_profile: bool = False
    # The embedding model of the agent's vectors: fixed by its first embedded write, changed
    # only by a completed re-embed (``embedding.switched``), so one agent's vectors are never
    # a mix of models that cannot be compared.
    model: str | None = None
    # Declared associations (decision/associations/); None until the agent declares any.
    assoc: AssocIndex | None = None
    # command id -> its first outcome: a dict for audited outcomes, a compact event memo
    # (see ``memo.memo_of_event``) for applied ones.
    commands: CommandMemos = field(default_factory=CommandMemos)
    # Ids of the live memories whose facts say ``locked``, kept by the fold: an erasure of all
    # of an agent's data lists the locks it overrode without a pass over every memory's facts
    # (on the bus's writer thread, which every agent's writes wait for).
    locked: set[int] = field(default_factory=set)

    def reindex(self) -> None:
        """``by_msg``, ``by_content`` and ``locked`` of ``memories`` (in id order, the order the
        fold first saw them), as the fold leaves them: the first memory under a key keeps it.

        Each index is one dict built in C from columns of the facts; only when a key repeats
        (an update made two contents equal) is it built row by row with ``setdefault``. The
        per-row loop was ~2.3 of the decision state's ~3.8 CPU s at 1M (docs/benchmarks.md,
        "Restart", sixth round)."""
        ids = list(self.memories)
        facts = list(self.memories.values())
        projects = list(map(_PROJECT, facts))
        content = list(zip(projects, map(_CHANNEL, facts), map(_CONTENT_KEY, facts), strict=True))
        self.by_content = _first_wins(content, ids)
        msg_ids = list(map(_MSG_ID, facts))
        keyed_ids: list[int] = ids
        if None in msg_ids:
            present = [m is not None for m in msg_ids]
            keyed_ids = list(compress(ids, present))
            projects = list(compress(projects, present))
            msg_ids = list(compress(msg_ids, present))
        self.by_msg = _first_wins(list(zip(projects, msg_ids, strict=True)), keyed_ids)
        self.locked = set(compress(ids, map(_LOCKED, facts)))

    def remember(self, command_id: str, outcome: Memo) -> None:
        if command_id in self.commands:
            return  # the first outcome is the one a retry gets back
        self.commands.add(command_id, outcome)

    def redact_reports(self) -> None:
        """Declarations' reports name entities: once the agent's key is gone, a retry gets the
        redacted form a replay derives (``memo.REDACTED_REPORT``)."""
        for k, memo in list(self.commands.items()):
            if isinstance(memo, AssociationsMemo):
                self.commands.replace(k, AssociationsMemo(memo.event_type, REDACTED_REPORT))

    def change(self, memory_id: int, facts: MemoryFacts, **changes: Any) -> MemoryFacts:
        """``facts`` (the memory's) with ``changes``, as a new object in its place: facts are
        shared with a capture being serialised, never changed in place."""
        new = self.memories[memory_id] = replace(facts, **changes)
        return new

    def set_locked(self, memory_id: int, facts: MemoryFacts, locked: bool) -> None:
        self.change(memory_id, facts, locked=locked)
        if locked:
            self.locked.add(memory_id)
        else:
            self.locked.discard(memory_id)

    def saw_model(self, models: tuple[str, ...]) -> None:
        if self.model is None and models:
            self.model = models[0]

    def missing_model(self, model: str) -> int:
        """How many live memories and episodes have no vector of ``model``."""
        gone = sum(1 for f in self.memories.values() if model not in f.models)
        return gone + sum(1 for models in self.episodes.values() if model not in models)

    def forget_records(self) -> None:
        """Every memory and episode at once (an erasure of everything of the agent): the indexes
        are swapped for empty ones, with no pass over them, and freed off the writer thread."""
        old = (self.memories, self.by_msg, self.by_content, self.locked, self.episodes)
        self.memories, self.by_msg, self.by_content, self.locked, self.episodes = {}, {}, {}, set(), {}
        release_later(*old)  # freed a slice at a time (streams/release.py)

    def forget_memories(self, memory_ids: list[int]) -> None:
        """``forget_memory`` of each. Most of the agent at once (an erasure of all its data) is
        filtered out of each index in one pass instead: 100k ids one by one took 0.44 s of the
        bus's writer thread, which other agents' writes wait for. The result is the same, as
        an index names a memory only under that memory's own keys."""
        old = (self.memories, self.by_msg, self.by_content, self.locked)
        if len(memory_ids) == len(self.memories) and memory_ids == list(self.memories):
            # Every memory (erase_agent_data of all its data, its ids in the fold's order): the
            # indexes name only these, so they all go, with no pass over them in Python.
            self.memories, self.by_msg, self.by_content, self.locked = {}, {}, {}, set()
            release_later(*old)  # freed off the writer thread, in slices (streams/release.py)
            return
        gone = set(memory_ids)
        if 2 * len(gone) <= len(self.memories):
            for mid in memory_ids:
                self.forget_memory(mid)
            return
        self.memories = {mid: f for mid, f in self.memories.items() if mid not in gone}
        self.by_msg = {k: mid for k, mid in self.by_msg.items() if mid not in gone}
        self.by_content = {k: mid for k, mid in self.by_content.items() if mid not in gone}
        self.locked = self.locked - gone
        release_later(*old[:3])  # freed off the writer thread, in slices (streams/release.py)

    def forget_memory(self, memory_id: int) -> None:
        facts = self.memories.pop(memory_id, None)
        if facts is None:
            return
        self.locked.discard(memory_id)
        if facts.msg_id is not None and self.by_msg.get((facts.project, facts.msg_id)) == memory_id:
            del self.by_msg[(facts.project, facts.msg_id)]
        key = (facts.project, facts.channel, facts.content_key)
        if self.by_content.get(key) == memory_id:
            del self.by_content[key]


_PROJECT = attrgetter("project")
_CHANNEL = attrgetter("channel")
_CONTENT_KEY = attrgetter("content_key")
_MSG_ID = attrgetter("msg_id")
_LOCKED = attrgetter("locked")


def _first_wins(keys: list[_K], ids: list[int]) -> dict[_K, int]:
    """``{key: id}`` with each key's first id, as ``setdefault`` row by row leaves it."""
    out = dict(zip(keys, ids, strict=True))
    if len(out) == len(keys):
        return out  # no key repeats: the same dict, in the same order
    out = {}
    for key, mid in zip(keys, ids, strict=True):
        out.setdefault(key, mid)
    return out


# Model tuples are shared, not built per record: a fold of a million memories holds one.
_MODEL_TUPLES: dict[tuple[str, ...], tuple[str, ...]] = {}


def intern_models(*models: str) -> tuple[str, ...]:
    t = _MODEL_TUPLES.get(models)
    if t is None:
        t = _MODEL_TUPLES[models] = models
    return t


def models_of(p: dict[str, Any]) -> tuple[str, ...]:
    emb = p.get("embedding")
    return intern_models(emb["model"]) if emb else ()


def with_model(models: tuple[str, ...], model: str) -> tuple[str, ...]:
    return models if model in models else intern_models(*models, model)
