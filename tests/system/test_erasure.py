"""Erasure end to end, embedded (issue 16): after erase_* returns, no file under the data
directory holds the erased text or its vector bytes, no read returns the record, and a rebuild
from offset 0 digests equal to the live read models."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.rebuild import rebuild_all
from memstream.api.services.settings import Settings
from memstream.streams.events import decode
from tests.support.calls import call
from tests.support.embedders import HashEmbedder
from tests.support.file_hits import files_holding

SECRET = "Zebulon Quartermaine's allergy is to saffron-pistachio nougat"
OTHER = "the weekly standup moved to thursday mornings"


def vector_forms(text: str) -> list[bytes]:
    """The bytes an erased vector could leave behind: f32 as stored, and f16 / i8 forms."""
    v = HashEmbedder().embed([text])[0].astype("<f4")
    forms = [v.tobytes(), v.astype("<f2").tobytes()]
    scale = float(np.abs(v).max()) or 1.0
    forms.append(np.clip(np.round(v / scale * 127), -127, 127).astype(np.int8).tobytes())
    return forms


def hits(root: Path, needles: list[bytes]) -> list[str]:
    """Files under ``root`` holding any needle, with which."""
    return [f"{path.relative_to(root)}: needle {i}" for path, i in files_holding(root, needles)]


def secret_needles(text: str) -> list[bytes]:
    """The text, its first words, its vector's forms, and the vector as an export writes it."""
    f32 = vector_forms(text)[0]
    return [text.encode(), text.split("'")[0].encode(), *vector_forms(text), base64.b64encode(f32)]


async def store(engine: EmbeddedEngine, agent: str, content: str, **extra: Any) -> int:
    out = await call(engine, "store", agent_id=agent, content=content, **extra)
    assert out["result"] == "stored", out
    return int(out["id"])


def rebuild_equal(settings: Settings) -> dict[str, Any]:
    report = rebuild_all(settings, save=False)
    assert report["equal"], {k: v for k, v in report["projections"].items() if not v["equal"]}
    return report


EXPORTS = 0


async def reads_of(engine: EmbeddedEngine, agent: str, query: str) -> str:
    """Everything the read tools answer for the agent, an export file (with vectors) included,
    as one string to search. The export stays under the data directory, which ``hits`` scans."""
    global EXPORTS
    EXPORTS += 1
    name = f"{agent}-{EXPORTS}.jsonl"
    exported = await call(engine, "export_memories", agent_id=agent, output_path=name, include_embeddings=True)
    assert exported.get("ok") is not False, exported
    answers = [
        await call(engine, "recall", agent_id=agent, query=query),
        await call(engine, "list_memories", agent_id=agent),
        await call(engine, "get_profile", agent_id=agent),
        await call(engine, "reconstruct", agent_id=agent, query=query),
        await call(engine, "context_packet", agent_id=agent, query=query),
        (engine.settings.data_dir / "exports" / name).read_text(),
    ]
    return repr(answers)


async def test_erase_memory_leaves_no_plaintext_nor_vector(engine: EmbeddedEngine, settings: Settings) -> None:
    secret_id = await store(engine, "alice", SECRET, source={"type": "user", "id": "zq"}, metadata={"who": "Zebulon"})
    other_id = await store(engine, "alice", OTHER)
    await call(engine, "verify_memory", memory_id=secret_id, note="Zebulon confirmed")
    before = await call(engine, "recall", agent_id="alice", query="saffron nougat allergy")
    assert "Zebulon" in repr(before)
    engine.runner.checkpoint()  # a checkpoint that knows the record: the erasure must rewrite it
    out = await call(engine, "erase_memory", agent_id="alice", memory_id=secret_id, reason="data subject request")
    assert out["ok"] is True, out
    assert out["erased"] == [f"mem:{secret_id}"]
    assert out["keys_destroyed"] >= 1
    assert out["unreachable"] == []
    assert "Zebulon" not in await reads_of(engine, "alice", "saffron nougat allergy")
    assert OTHER in await reads_of(engine, "alice", "standup thursday")
    assert OTHER in (settings.data_dir / "exports" / f"alice-{EXPORTS}.jsonl").read_text()  # the export works
    contents = await call(engine, "get_contents", agent_id="alice", refs=[f"mem:{secret_id}", f"mem:{other_id}"])
    assert "Zebulon" not in repr(contents) and OTHER in repr(contents)
    history = await call(engine, "history", ref=f"mem:{secret_id}")
    text = repr(history)
    assert "Zebulon" not in text and "saffron" not in text
    assert "record.erased" in text and "data subject request" in text
    assert hits(settings.data_dir, secret_needles(SECRET)) == []
    rebuild_equal(settings)


async def test_erase_is_durable_across_restart_and_rebuild(settings: Settings) -> None:
    eng = EmbeddedEngine(settings, embedder=HashEmbedder())
    await eng.start()
    try:
        mid = await store(eng, "bob", SECRET)
        await store(eng, "bob", OTHER)
        assert (await call(eng, "erase_memory", agent_id="bob", ref=f"mem:{mid}", reason="gdpr art. 17"))["ok"]
        # The id is never reused, and a new store of the same text is a new record.
        again = await store(eng, "bob", SECRET)
        assert again != mid
        assert (await call(eng, "erase_memory", agent_id="bob", memory_id=again, reason="again"))["ok"]
    finally:
        await eng.close()
    assert hits(settings.data_dir, secret_needles(SECRET)) == []
    rebuild_equal(settings)
    eng = EmbeddedEngine(settings, embedder=HashEmbedder())
    await eng.start()
    try:
        assert "Zebulon" not in await reads_of(eng, "bob", "saffron nougat")
        assert OTHER in await reads_of(eng, "bob", "standup")
    finally:
        await eng.close()


async def test_locked_memory_is_erased_and_says_so(engine: EmbeddedEngine, settings: Settings) -> None:
    mid = await store(engine, "carol", SECRET, lock=True)
    refused = await call(engine, "delete_memory", memory_id=mid)
    assert refused["ok"] is False
    out = await call(engine, "erase_memory", agent_id="carol", memory_id=mid, reason="court order")
    assert out["ok"] is True and out["locked_overridden"] == [f"mem:{mid}"]
    assert hits(settings.data_dir, secret_needles(SECRET)) == []


async def test_erase_refuses_bad_input_and_other_agents_records(engine: EmbeddedEngine) -> None:
    mid = await store(engine, "dave", SECRET)
    for args in (
        {"agent_id": "dave", "memory_id": mid, "reason": ""},
        {"agent_id": "dave", "memory_id": mid, "reason": "x" * 501},
        {"agent_id": "dave", "memory_id": mid},
        {"agent_id": "dave", "memory_id": mid, "ref": f"mem:{mid}", "reason": "both"},
        {"agent_id": "dave", "ref": "nonsense", "reason": "bad ref"},
    ):
        out = await call(engine, "erase_memory", **args)
        assert out.get("ok") is False or out.get("error"), (args, out)
    out = await call(engine, "erase_memory", agent_id="eve", memory_id=mid, reason="not hers")
    assert out["ok"] is False
    assert SECRET in repr(await call(engine, "list_memories", agent_id="dave"))


@pytest.mark.parametrize("form", ["names_none", "listed"])
async def test_erase_agent_data_takes_everything_of_the_agent(
    engine: EmbeddedEngine, settings: Settings, form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``names_none``: the event names no record (every consumer takes the agent's ids from its
    own state); ``listed``: an event as written before, listing every id, folds as it did."""
    if form == "listed":
        from memstream.streams.decision import dispatch
        from memstream.streams.decision.erasure import decide_erase_agent_listing

        monkeypatch.setattr(dispatch, "decide_erase_agent", decide_erase_agent_listing)
    secret = await store(engine, "frank", SECRET, lock=True)
    other = await store(engine, "frank", OTHER)
    # A memory deleted before the erasure: its history shows the erasure too (its key dies with it).
    gone = await store(engine, "frank", "deleted before the erasure")
    assert (await call(engine, "delete_memory", agent_id="frank", memory_id=gone))["ok"] is not False
    await call(engine, "update_profile", agent_id="frank", profile="Frank Quillbottom, likes Zebulon")
    archived = await call(engine, "archive_episode", agent_id="frank", summary="Zebulon and Frank argued about nougat")
    await call(
        engine,
        "declare_associations",
        agent_id="frank",
        associations={"entities": [{"name": "Zebulon Quartermaine"}]},
    )
    # A refused store: its audit record's request copy holds the content (sealed under the agent's key).
    refused = await call(engine, "store", agent_id="frank", content=SECRET, source={"type": "user", "id": "other"})
    assert refused["result"] == "rejected", refused
    keep = await store(engine, "grace", "grace keeps her own notes about gardening")
    engine.runner.checkpoint()
    out = await call(engine, "erase_agent_data", agent_id="frank", reason="account closed")
    assert out["ok"] is True, out
    assert out["erased_memories"] == 2 and out["erased_episodes"] == 1 and out["erased_profile"] is True
    episode = next(r for r in out["erased"] if r.startswith("ep:"))
    assert out["erased"] == [f"mem:{secret}", f"mem:{other}", episode], archived
    assert out["locked_overridden"] == [f"mem:{secret}"]
    [rec] = engine.log.read(0, types=("agent.erased",), vectors=False)
    assert ("memory_ids" in decode(rec.value)["payload"]) == (form == "listed")
    refs = [f"mem:{secret}", f"mem:{other}", episode]
    for ref in refs + ([f"mem:{gone}"] if form != "listed" else []):
        told = await call(engine, "history", ref=ref)
        last = told["events"][-1]
        assert last["type"] == "agent.erased" and last["change"]["reason"] == "account closed", (ref, told)
        assert last["actor"]["client_id"] and last["at"] and last["change"]["kind"] == "agent"
    needles = [*secret_needles(SECRET), *vector_forms(OTHER), OTHER.encode(), b"Quillbottom", b"Zebulon"]
    assert hits(settings.data_dir, needles) == []
    text = await reads_of(engine, "frank", "nougat argued likes")
    assert "Zebulon" not in text and "Quillbottom" not in text
    assert "gardening" in repr(await call(engine, "list_memories", agent_id="grace"))
    assert keep
    audit = repr(await call(engine, "audit_log", agent_id="frank"))
    assert "Zebulon" not in audit
    rebuild_equal(settings)
    # The agent goes on: new data is sealed under new keys and readable.
    await call(engine, "update_profile", agent_id="frank", profile="a fresh start")
    assert "a fresh start" in repr(await call(engine, "get_profile", agent_id="frank"))
    later = await store(engine, "frank", "stored after the erasure")
    assert [e["type"] for e in (await call(engine, "history", ref=f"mem:{later}"))["events"]] == ["memory.stored"]
    rebuild_equal(settings)


async def test_erase_agent_data_by_source(engine: EmbeddedEngine, settings: Settings) -> None:
    await store(engine, "heidi", SECRET, source={"type": "user", "id": "subject-7"})
    await store(engine, "heidi", OTHER, source={"type": "user", "id": "someone-else"})
    out = await call(engine, "erase_agent_data", agent_id="heidi", reason="subject request", source="subject-7")
    assert out["ok"] is True and out["erased_memories"] == 1 and out["kind"] == "source"
    assert hits(settings.data_dir, secret_needles(SECRET)) == []
    assert OTHER in repr(await call(engine, "list_memories", agent_id="heidi"))
    rebuild_equal(settings)


async def test_as_of_before_the_erasure_never_shows_it(engine: EmbeddedEngine) -> None:
    mid = await store(engine, "ivan", SECRET)
    await store(engine, "ivan", OTHER)
    stamp = await call(engine, "list_memories", agent_id="ivan")
    assert SECRET in repr(stamp)
    point = engine.log.end_offset() - 1
    assert (await call(engine, "erase_memory", agent_id="ivan", memory_id=mid, reason="request"))["ok"]
    past = await call(engine, "list_memories", agent_id="ivan", as_of=point)
    assert "Zebulon" not in repr(past) and OTHER in repr(past)
    recalled = await call(engine, "recall", agent_id="ivan", query="saffron nougat", as_of=point)
    assert "Zebulon" not in repr(recalled)


@pytest.mark.parametrize("tool", ["erase_memory", "erase_agent_data"])
async def test_erase_answers_are_idempotent_on_retry(engine: EmbeddedEngine, tool: str) -> None:
    mid = await store(engine, "judy", SECRET)
    args: dict[str, Any] = {"agent_id": "judy", "reason": "request", "command_id": "erase-1"}
    if tool == "erase_memory":
        args["memory_id"] = mid
    first = await call(engine, tool, **args)
    second = await call(engine, tool, **args)
    assert first["ok"] is True and second["ok"] is True
    assert engine.log.read(0, types=("record.erased", "agent.erased"), vectors=False).__len__() == 1


async def test_erase_says_what_it_cannot_reach_in_a_log_written_before_sealing(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTREAM_SEALING", "off")
    eng = EmbeddedEngine(settings, embedder=HashEmbedder())
    await eng.start()
    try:
        old = await store(eng, "kate", SECRET)
        out = await call(eng, "erase_memory", agent_id="kate", memory_id=old, reason="request")
        assert out["ok"] is True and "sealing off" in out["unreachable"][0]
        old = await store(eng, "kate", OTHER)
    finally:
        await eng.close()
    assert not (settings.data_dir / "keys.db").exists()
    monkeypatch.delenv("MEMSTREAM_SEALING")
    eng = EmbeddedEngine(settings, embedder=HashEmbedder())
    await eng.start()
    try:
        assert eng.log.sealed_from > 0
        new = await store(eng, "kate", "written after sealing began: the codeword is marmot")
        out = await call(eng, "erase_memory", agent_id="kate", memory_id=old, reason="request")
        assert out["ok"] is True
        assert out["unreachable"] == [
            f"log offsets 0..{eng.log.sealed_from - 1} hold plaintext written before sealing; run memstream seal"
        ]
        # Read models and checkpoints drop it all the same; the plaintext log still holds it.
        assert OTHER not in repr(await call(eng, "list_memories", agent_id="kate"))
        assert hits(settings.data_dir / "snapshots", [OTHER.encode()]) == []
        out = await call(eng, "erase_memory", agent_id="kate", memory_id=new, reason="request")
        assert out["ok"] is True and out["unreachable"] == []
    finally:
        await eng.close()
    assert hits(settings.data_dir, [b"marmot"]) == []
    rebuild_equal(settings)
