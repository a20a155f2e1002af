"""Sealing of the commands topic (streams/deciders/transport.py via the codec): with a master
key configured a command's content and vector travel as ciphertext, the decider reads the same
command back, and every way of not being able to open one is a clear error."""

from __future__ import annotations

import base64

import pytest

from memstream.streams.deciders.codec import CodecError, decode_item, encode_command, encode_refusal
from memstream.streams.events import AuditRecord
from tests.support.kafka_commands import store

KEY = base64.b64encode(bytes(range(32))).decode()
OTHER = base64.b64encode(bytes(32)).decode()
TEXT = "the heron nests by the weir at Ashford"


def test_commands_travel_sealed_and_decode_to_the_same_command(monkeypatch: pytest.MonkeyPatch) -> None:
    cmd = store("ann", TEXT)
    monkeypatch.delenv("MEMSTREAM_MASTER_KEY_FILE", raising=False)
    monkeypatch.setenv("MEMSTREAM_MASTER_KEY", KEY)
    value, headers = encode_command(cmd, reply_to=3)
    h = dict(headers)
    assert cmd.embedding is not None
    assert b"heron" not in value and b"ann" not in value
    assert h["vector"] != cmd.embedding.data and cmd.embedding.data not in h["vector"]
    assert h["command"] == cmd.name.encode() and h["reply_to"] == b"3"  # routing stays clear
    decoded, reply_to = decode_item(value, headers)
    assert decoded == cmd and reply_to == 3

    # a record written before the key was configured still decodes
    monkeypatch.delenv("MEMSTREAM_MASTER_KEY")
    clear_value, clear_headers = encode_command(cmd, reply_to=1)
    assert b"heron" in clear_value
    monkeypatch.setenv("MEMSTREAM_MASTER_KEY", KEY)
    assert decode_item(clear_value, clear_headers)[0] == cmd

    # no key here, another key, or a body moved under another command name: refused clearly
    monkeypatch.delenv("MEMSTREAM_MASTER_KEY")
    with pytest.raises(CodecError, match="no master key here"):
        decode_item(value, headers)
    monkeypatch.setenv("MEMSTREAM_MASTER_KEY", OTHER)
    with pytest.raises(CodecError, match="does not open under this process's master key"):
        decode_item(value, headers)
    monkeypatch.setenv("MEMSTREAM_MASTER_KEY", KEY)
    renamed = [("command", b"delete_memory") if k == "command" else (k, v) for k, v in headers]
    with pytest.raises(CodecError, match="does not open"):
        decode_item(value, renamed)


def test_refusals_carry_their_request_sealed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMSTREAM_MASTER_KEY_FILE", raising=False)
    monkeypatch.setenv("MEMSTREAM_MASTER_KEY", KEY)
    cmd = store("ann", TEXT)
    record = AuditRecord(
        id="a1",
        kind="refused",
        command="store",
        command_id=cmd.command_id,
        scope=cmd.scope,
        actor=cmd.actor,
        occurred_at=cmd.received_at,
        outcome={"result": "rejected", "error": "permission_denied"},
        request={"tool": "store", "content": TEXT},
    )
    value, headers = encode_refusal(record, reply_to=0)
    assert b"heron" not in value
    assert decode_item(value, headers)[0] == record
