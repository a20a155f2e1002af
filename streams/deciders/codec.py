"""Wire formats of the Kafka command path: commands (and routers' refusals) on their way to a
decider, and the replies that carry each outcome back to the process that submitted it.

A command travels as its JSON (``Command.model_dump(mode="json")``; an embedding's header is in
it, its vector is the ``vector`` record header, as for events) with a ``command`` header naming
its class and a ``reply_to`` header naming the replies partition its submitter reads.
Refusals a router or worker decided before any command existed (bad input, permission) travel the
same path as ``command: refusal`` with the audit record as value, so the partition's decider is
the only writer of its events and audit partitions, and replay merges the two exactly as they
were decided.
"""

from __future__ import annotations

import typing
from typing import Any, Final

import orjson

from memstream.streams import commands as c
from memstream.streams.deciders import transport
from memstream.streams.decision.outcome import Outcome
from memstream.streams.events import AuditRecord
from memstream.streams.log.port import Committed

REFUSAL: Final = "refusal"
COMMANDS: Final[dict[str, type[c.Command]]] = {cls.name: cls for cls in typing.get_args(c.AnyCommand)}

Headers = list[tuple[str, bytes]]


class CodecError(ValueError):
    """A record on the commands or replies topic that this version cannot read."""


def encode_command(cmd: c.Command, reply_to: int) -> tuple[bytes, Headers]:
    headers: Headers = [("command", cmd.name.encode()), ("reply_to", str(reply_to).encode())]
    emb = getattr(cmd, "embedding", None)
    value = orjson.dumps(cmd.model_dump(mode="json"))
    vector = emb.data if emb is not None else None
    sealing = transport.configured()
    if sealing is not None:
        value, vector = sealing.seal(value, vector, cmd.name.encode())
    if vector is not None:
        headers.append(("vector", vector))
    return value, headers


def encode_refusal(record: AuditRecord, reply_to: int) -> tuple[bytes, Headers]:
    value = record.encode()
    sealing = transport.configured()
    if sealing is not None:  # a refused store's audit copy carries its content
        value, _ = sealing.seal(value, None, REFUSAL.encode())
    return value, [("command", REFUSAL.encode()), ("reply_to", str(reply_to).encode())]


def decode_item(value: bytes, headers: Any) -> tuple[c.Command | AuditRecord, int | None]:
    """(the command or refusal, the replies partition to answer on, if any)."""
    h = {k: v for k, v in (headers or ())}
    name = h.get("command", b"").decode()
    reply_to = int(h["reply_to"]) if "reply_to" in h else None
    if transport.is_sealed(value):
        sealing = transport.configured()
        if sealing is None:
            raise CodecError(
                f"a sealed {name or 'unnamed'} record, and no master key here (set MEMSTREAM_MASTER_KEY or "
                "MEMSTREAM_MASTER_KEY_FILE in every router and worker)"
            )
        try:
            value, vector = sealing.open(value, h.get("vector"), name.encode())
        except transport.TransportError as exc:
            raise CodecError(f"{name or 'unnamed'} record: {exc}") from exc
        if vector is not None:
            h["vector"] = vector
    try:
        data = orjson.loads(value)
        if name == REFUSAL:
            return AuditRecord.model_validate(data), reply_to
        cls = COMMANDS[name]
        if data.get("embedding") is not None:
            data["embedding"]["data"] = h.get("vector", b"")
        return cls.model_validate(data), reply_to
    except (KeyError, ValueError, orjson.JSONDecodeError) as exc:
        raise CodecError(f"unreadable {name or 'unnamed'} record: {exc}") from exc


def encode_reply(command_id: str, committed: Committed) -> bytes:
    return orjson.dumps({"command_id": command_id, "outcome": committed.outcome.to_dict(), "offset": committed.offset})


def decode_reply(value: bytes) -> tuple[str, Committed]:
    data = orjson.loads(value)
    return data["command_id"], Committed(Outcome.from_dict(data["outcome"]), data.get("offset"))
