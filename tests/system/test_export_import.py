"""export_memories / import_memories / merge_memories (issue 6): CPersona's shapes, imports
through the deciders, idempotence by derived command ids, and equal recall after a round trip."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.settings import Settings, load_settings
from tests.support.calls import call
from tests.support.embedders import HashEmbedder
from tests.support.servers import ServerThread, log_end

QUERIES = ["green tea", "printer paper jam", "deploy friday", "budget meeting", "cat food", "nothing related at all"]

TEXTS = [
    "Alice prefers green tea in the morning",
    "The printer on floor 3 has a paper jam every Monday",
    "Never deploy on a friday afternoon",
    "The budget meeting moved to Thursday",
    "Buy cat food: salmon flavour",
    "Green tea supplier changed in March",
    "Printer toner is in the supply closet",
]


async def populate(call_tool: Any, agent: str) -> None:
    for i, text in enumerate(TEXTS):
        args: dict[str, Any] = {"agent_id": agent, "content": text, "id": f"m{i}", "metadata": {"n": i}}
        if i == 2:
            args["lock"] = True
        if i == 3:
            args["project_id"] = "P"
        if i == 4:
            args["timestamp"] = "2026-01-02T03:04:05+00:00"
        body = await call_tool("store", args)
        assert body["result"] == "stored", body
    body = await call_tool("archive_episode", {"agent_id": agent, "summary": "We discussed tea and printers"})
    assert body["ok"], body
    assert (await call_tool("update_profile", {"agent_id": agent, "profile": "Likes tea"}))["ok"]


def answer(body: dict[str, Any]) -> list[tuple[str, float]]:
    """A recall answer without what differs between two copies of a memory (refs)."""
    return [(m["content"], round(m.get("match_reason", {}).get("score", -1.0), 9)) for m in body["messages"]]


async def recall_set(call_tool: Any, agent: str) -> list[Any]:
    out = []
    for q in QUERIES:
        for project in (None, "P"):
            args: dict[str, Any] = {"agent_id": agent, "query": q}
            if project:
                args["project_id"] = project
            out.append(answer(await call_tool("recall", args)))
    return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


@pytest.mark.parametrize("embeddings", [True, False])
async def test_export_then_import_twice_through_the_face(
    face: Any, http_server: ServerThread, embeddings: bool
) -> None:
    await populate(face.call, "src")
    body = await face.call(
        "export_memories", {"agent_id": "src", "output_path": "out/src.jsonl", "include_embeddings": embeddings}
    )
    assert body == {"ok": True, "path": "out/src.jsonl", "memories": 7, "episodes": 1, "profiles": 1}
    records = read_jsonl(http_server.app.state.engine.settings.data_dir / "exports" / "out" / "src.jsonl")
    assert records[0]["_type"] == "header" and records[0]["memory_count"] == 7
    mems = [r for r in records if r["_type"] == "memory"]
    assert all(("embedding_b64" in r) == embeddings for r in mems)
    assert all(r["history"] and r["history"][0]["type"] == "memory.stored" for r in mems)
    locked = next(r for r in mems if r["msg_id"] == "m2")
    assert locked["locked"] == 1 and [h["type"] for h in locked["history"]] == ["memory.stored"]

    before = log_end(http_server)
    dry = await face.call("import_memories", {"input_path": "out/src.jsonl", "target_agent_id": "dst", "dry_run": True})
    assert dry["imported_memories"] == 7 and dry["imported_episodes"] == 1 and dry["dry_run"] is True
    assert log_end(http_server)[0] == before[0], "a dry run appended events"

    first = await face.call("import_memories", {"input_path": "out/src.jsonl", "target_agent_id": "dst"})
    assert first == {
        "ok": True,
        "dry_run": False,
        "imported_memories": 7,
        "skipped_memories": 0,
        "imported_episodes": 1,
        "skipped_episodes": 0,
        "profile_updated": True,
    }
    after_first = log_end(http_server)
    assert after_first[0] > before[0]
    second = await face.call("import_memories", {"input_path": "out/src.jsonl", "target_agent_id": "dst"})
    assert second["imported_memories"] == 0 and second["skipped_memories"] == 7
    assert second["imported_episodes"] == 0 and second["skipped_episodes"] == 1
    assert log_end(http_server)[0] == after_first[0], "the second import appended events"
    # Into the agent the file came from: everything is there already.
    again = await face.call("import_memories", {"input_path": "out/src.jsonl"})
    assert again["imported_memories"] == 0 and again["imported_episodes"] == 0
    assert log_end(http_server)[0] == after_first[0]

    assert await recall_set(face.call, "dst") == await recall_set(face.call, "src")
    listed = await face.call("list_memories", {"agent_id": "dst", "limit": 50})
    assert len(listed["memories"]) == 7
    assert (await face.call("get_profile", {"agent_id": "dst"}))["profile"] == "Likes tea"
    # The lock travelled: W5 holds for the imported copy.
    copy_id = next(m for m in listed["memories"] if m["content"] == TEXTS[2])["id"]
    assert (await face.call("delete_memory", {"agent_id": "dst", "memory_id": copy_id}))["ok"] is False


async def test_export_import_into_a_fresh_store_gives_equal_recall(settings: Settings, tmp_path: Path) -> None:
    src = EmbeddedEngine(settings, embedder=HashEmbedder())
    await src.start()
    try:
        await populate(lambda t, a: call(src, t, **a), "alice")
        first_id = await _id_of(src, TEXTS[0])
        await call(src, "update_memory", agent_id="alice", memory_id=first_id, content="Alice now drinks oolong")
        body = await call(src, "export_memories", agent_id="alice", output_path="alice.jsonl", include_embeddings=True)
        assert body["ok"], body
        expected = await recall_set(lambda t, a: call(src, t, **a), "alice")
    finally:
        await src.close()

    fresh = load_settings(env={}, data_dir=tmp_path / "fresh", sync="NORMAL")
    (fresh.data_dir / "exports").mkdir(parents=True)
    shutil.copy(settings.data_dir / "exports" / "alice.jsonl", fresh.data_dir / "exports" / "alice.jsonl")
    embedder = HashEmbedder()
    dst = EmbeddedEngine(fresh, embedder=embedder)
    await dst.start()
    try:
        body = await call(dst, "import_memories", input_path="alice.jsonl")
        assert body["imported_memories"] == 7 and body["imported_episodes"] == 1, body
        assert embedder.calls == 0, "vectors in the file must be used, not recomputed"
        assert await recall_set(lambda t, a: call(dst, t, **a), "alice") == expected
        # the instant a memory describes survives (an explicit one and a defaulted one)
        rows = await dst.read(lambda: {r.content: r.timestamp for r in dst.memories.rows.values()})
        assert rows[TEXTS[4]] == "2026-01-02T03:04:05+00:00"
        assert all(rows.values())
    finally:
        await dst.close()


async def _id_of(engine: EmbeddedEngine, content: str) -> int:
    return await engine.read(lambda: next(r.id for r in engine.memories.rows.values() if r.content == content))


async def test_refusals_change_nothing(engine: EmbeddedEngine) -> None:
    await populate(lambda t, a: call(engine, t, **a), "a")
    end = engine.log.end_offset()
    out = await call(engine, "export_memories", agent_id="a", output_path="../escape.jsonl")
    assert out == {"ok": False, "error": "output_path rejected (path traversal or outside export dir): ../escape.jsonl"}
    assert (await call(engine, "export_memories", agent_id="a", output_path="/etc/x.jsonl"))["ok"] is False
    assert await call(engine, "import_memories", input_path="none.jsonl") == {
        "ok": False,
        "error": "File not found: none.jsonl",
    }
    # A file cut short is refused whole: nothing of it is imported.
    assert (await call(engine, "export_memories", agent_id="a", output_path="a.jsonl"))["ok"]
    path = engine.settings.data_dir / "exports" / "a.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    (path.parent / "cut.jsonl").write_bytes(b"".join(lines[:4]))
    out = await call(engine, "import_memories", input_path="cut.jsonl", target_agent_id="b")
    assert out["ok"] is False and "truncated" in out["error"]
    # Bad lines are reported, good ones imported.
    (path.parent / "mixed.jsonl").write_bytes(
        b'{"_type":"memory","content":"kept line"}\nnot json\n{"_type":"memory","content":""}\n[1]\n'
    )
    out = await call(engine, "import_memories", input_path="mixed.jsonl", target_agent_id="b")
    assert out["ok"] is True and out["imported_memories"] == 1 and len(out["errors"]) == 3, out
    assert engine.log.end_offset() == end + 1


async def test_merge_copy_then_again_then_move(face: Any, http_server: ServerThread) -> None:
    await populate(face.call, "m-src")
    refused = {
        "strategy": "Unsupported strategy 'overwrite'. Currently supported: 'skip'",
        "mode": "Invalid mode 'teleport'. Supported: 'copy', 'move'",
    }
    base = {"source_agent_id": "m-src", "target_agent_id": "m-copy"}
    assert await face.call("merge_memories", {**base, "strategy": "overwrite"}) == {
        "ok": False,
        "error": refused["strategy"],
    }
    assert await face.call("merge_memories", {**base, "mode": "teleport"}) == {"ok": False, "error": refused["mode"]}
    same = await face.call("merge_memories", {"source_agent_id": "x", "target_agent_id": "x"})
    assert same == {"ok": False, "error": "source_agent_id and target_agent_id must differ"}

    first = await face.call("merge_memories", base)
    assert first == {
        "ok": True,
        "dry_run": False,
        "source_agent_id": "m-src",
        "target_agent_id": "m-copy",
        "strategy": "skip",
        "mode": "copy",
        "merged_memories": 7,
        "skipped_memories": 0,
        "merged_episodes": 1,
        "skipped_episodes": 0,
        "profile_copied": True,
        "skipped_profile": False,
    }
    end = log_end(http_server)[0]
    second = await face.call("merge_memories", base)
    assert second["merged_memories"] == 0 and second["skipped_memories"] == 7 and second["skipped_profile"] is True
    assert log_end(http_server)[0] == end
    assert await recall_set(face.call, "m-copy") == await recall_set(face.call, "m-src")

    move = {"source_agent_id": "m-copy", "target_agent_id": "m-moved", "mode": "move"}
    moved = await face.call("merge_memories", move)
    assert moved["merged_memories"] == 7
    # W5: the locked memory stays at the source; so does the profile (no profile delete).
    assert moved["source_deleted"]["deleted_memories"] == 6 and moved["source_deleted"]["deleted_episodes"] == 1
    assert moved["left_at_source"] == {"memories": 1, "episodes": 0, "profiles": 1}
    left = await face.call("list_memories", {"agent_id": "m-copy"})
    assert [m["content"] for m in left["memories"]] == [TEXTS[2]]


def test_cli_export_and_import(settings: Settings, tmp_path: Path) -> None:
    import asyncio

    from memstream.api.cli.commands import main

    async def fill() -> None:
        eng = EmbeddedEngine(settings, embedder=HashEmbedder())
        await eng.start()
        try:
            await populate(lambda t, a: call(eng, t, **a), "cli")
        finally:
            await eng.close()

    asyncio.run(fill())
    from memstream.api.services.embedding import register_embedder

    register_embedder("test-hash-64", HashEmbedder)
    runner = CliRunner(env={"MEMSTREAM_EMBEDDER": "test-hash-64"})
    out = runner.invoke(main, ["export", "--data-dir", str(settings.data_dir), "--agent", "cli"])
    assert out.exit_code == 0, out.output
    lines = [orjson.loads(x) for x in out.stdout.splitlines() if x.strip()]
    assert lines[0]["_type"] == "header" and sum(r["_type"] == "memory" for r in lines) == 7
    assert all("embedding_b64" in r and r["history"] for r in lines if r["_type"] == "memory")
    dump = tmp_path / "cli.jsonl"
    dump.write_text(out.stdout)

    fresh = tmp_path / "fresh"
    first = runner.invoke(main, ["import", "--data-dir", str(fresh), str(dump)])
    assert first.exit_code == 0, first.output
    report = orjson.loads(first.stdout)
    assert report["imported_memories"] == 7 and report["imported_episodes"] == 1

    from memstream.streams.log.sqlite import SqliteLog

    def end() -> int:
        log = SqliteLog(fresh / "log.sqlite3")
        try:
            return log.end_offset()
        finally:
            log.close()

    end_first = end()
    again = runner.invoke(main, ["import", "--data-dir", str(fresh), str(dump)])
    assert again.exit_code == 0 and orjson.loads(again.stdout)["skipped_memories"] == 7
    assert end() == end_first
