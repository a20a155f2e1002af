"""export_memories, import_memories and merge_memories in Kafka mode answer as the embedded
server does (api/kafka/router/transfers.py).

One script of writes runs against an embedded server and against `memstream serve --kafka`
with two `memstream worker` processes on the real broker; then the same transfers run on both
and are compared: the exported files record for record (history offsets mapped to each
partition's own numbering, as Kafka numbers them, from the embedded log file; clock readings
and random event ids aside), every import and merge answer, and the reads of what was
imported. Imports that must append nothing (a dry run, a second import, a refused file) are
checked against the events topic's end offsets. A merge runs between agents whose partitions
are owned by different workers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from memstream.api.kafka.router.app import Owners
from memstream.api.services.settings import Settings
from memstream.streams.log.kafka import KafkaConfig, KafkaLog
from memstream.streams.log.port import partition_for
from memstream.streams.log.sqlite import SqliteLog
from tests.support.answers import PARTITIONS, CommandIds, sharing, stable_without
from tests.support.deployment import Deployment
from tests.support.faces import HttpFace, McpFace
from tests.support.servers import ServerThread

pytestmark = [pytest.mark.kafka]

TEXTS = [
    "Alice prefers green tea in the morning",
    "The printer on floor 3 has a paper jam every Monday",
    "Never deploy on a friday afternoon",
    "The budget meeting moved to Thursday",
    "Buy cat food: salmon flavour",
    "Green tea supplier changed in March",
    "Printer toner is in the supply closet",
]
QUERIES = ["green tea", "printer paper jam", "deploy friday", "budget meeting"]
# Clock readings and random ids: what two runs of one script may differ in.
VOLATILE = {"at", "event_id", "timestamp", "created_at", "updated_at", "exported_at", "start_time", "end_time",
            "as_of", "elapsed_ms"}  # fmt: skip


AGENTS = ["ada", sharing("ada"), "bob", "cy"]


stable = stable_without(VOLATILE)


class Writer(CommandIds):
    """``CommandIds`` whose writes must all succeed."""

    async def write(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        body = await super().write(tool, args)
        assert body.get("ok") is not False, (tool, body)
        return body


async def populate(w: Writer, agent: str) -> None:
    """An agent's memories (one locked, one in a project, one with its own instant), an
    episode and a profile."""
    for i, text in enumerate(TEXTS):
        args: dict[str, Any] = {"agent_id": agent, "content": text, "id": f"{agent}-m{i}", "metadata": {"n": i}}
        if i == 2:
            args["lock"] = True
        if i == 3:
            args["project_id"] = "P"
        if i == 4:
            args["timestamp"] = "2026-01-02T03:04:05+00:00"
        await w.write("store", args)
    await w.write("archive_episode", {"agent_id": agent, "summary": f"{agent} discussed tea and printers"})
    await w.write("update_profile", {"agent_id": agent, "profile": f"{agent} likes tea"})


async def script(face: HttpFace) -> None:
    """Writes to four agents, two of them sharing a partition (their ids interleave in it)."""
    w = Writer(face)
    ada, peer, bob, cy = AGENTS
    await populate(w, ada)
    for i in range(6):  # the peer's stores land between ada's events in their partition
        await w.write("store", {"agent_id": [peer, bob, cy][i % 3], "content": f"{TEXTS[i]} (note {i})"})
    first = (await face.call("list_memories", {"agent_id": ada, "limit": 50}))["memories"][-1]["id"]
    await w.write("update_memory", {"agent_id": ada, "memory_id": first, "content": "Alice now drinks oolong"})
    gone = (await face.call("list_memories", {"agent_id": bob}))["memories"][0]["id"]
    await w.write("delete_memory", {"agent_id": bob, "memory_id": gone})
    await w.write("archive_episode", {"agent_id": cy, "summary": "cy fixed the vpn certificate"})
    await w.write("update_profile", {"agent_id": bob, "profile": "bob keeps the budget"})


async def reads(face: HttpFace, agent: str) -> list[Any]:
    out: list[Any] = [
        await face.call("list_memories", {"agent_id": agent, "limit": 50}),
        await face.call("list_episodes", {"agent_id": agent}),
        await face.call("get_profile", {"agent_id": agent}),
    ]
    for q in QUERIES:
        out.append(await face.call("recall", {"agent_id": agent, "query": q, "limit": 5}))
    return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def ranks(log_path: Path) -> dict[int, int]:
    """Embedded offset -> the event's offset in its Kafka partition (its rank in the partition)."""
    log = SqliteLog(log_path)
    try:
        records = log.read(0, limit=100_000, vectors=False)
    finally:
        log.close()
    seen: dict[int, int] = {}
    out = {}
    for rec in records:
        out[rec.offset] = seen.get(rec.partition, 0)
        seen[rec.partition] = out[rec.offset] + 1
    return out


def per_partition(records: list[dict[str, Any]], events: dict[int, int]) -> list[dict[str, Any]]:
    """An embedded export's records with their history offsets as Kafka numbers them."""
    out = []
    for r in records:
        r = dict(r)
        if "history" in r:
            r["history"] = [{**h, "offset": events[h["offset"]]} for h in r["history"]]
        out.append(r)
    return out


async def event_ends(cfg: KafkaConfig) -> dict[int, int]:
    """The events topic's end offset per partition, as the broker reports it now."""
    log = KafkaLog(cfg)
    await log.start()
    try:
        return await log.end_offsets()
    finally:
        await log.close()


def log_end(settings: Settings) -> int:
    """The embedded log's end, read through a second handle."""
    log = SqliteLog(settings.log_path)
    try:
        return log.end_offset()
    finally:
        log.close()


Ends = Callable[[], Awaitable[Any]]


def embedded_ends(settings: Settings) -> Ends:
    async def ends() -> int:
        return log_end(settings)

    return ends


def kafka_ends(cfg: KafkaConfig) -> Ends:
    async def ends() -> dict[int, int]:
        return await event_ends(cfg)

    return ends


FRESH, EVERYONE = "fresh-ada", "everyone"


async def export_then_import(face: HttpFace, ends: Ends) -> tuple[list[Any], Any]:
    """The script, the exports and the imports both modes run, with every answer; and where
    the log ended when the files were written."""
    ada = AGENTS[0]
    await script(face)
    out: list[Any] = [await reads(face, a) for a in AGENTS]
    vectors = {"include_embeddings": True}
    out.append(await face.call("export_memories", {"agent_id": ada, "output_path": "ada.jsonl", **vectors}))
    out.append(await face.call("export_memories", {"agent_id": "", "output_path": "all/every.jsonl"}))
    out.append(await face.call("export_memories", {"agent_id": "", "output_path": "all/vectors.jsonl", **vectors}))
    at_export = await ends()

    dry = {"input_path": "ada.jsonl", "target_agent_id": FRESH, "dry_run": True}
    out.append(await face.call("import_memories", dry))
    assert await ends() == at_export, "a dry run appended events"
    out.append(await face.call("import_memories", {"input_path": "ada.jsonl", "target_agent_id": FRESH}))
    after_first = await ends()
    assert after_first != at_export
    out.append(await face.call("import_memories", {"input_path": "ada.jsonl", "target_agent_id": FRESH}))
    out.append(await face.call("import_memories", dry))  # a dry run now finds it all decided
    out.append(await face.call("import_memories", {"input_path": "all/vectors.jsonl"}))  # where they came from
    assert await ends() == after_first, "importing again appended events"
    out.append(await face.call("import_memories", {"input_path": "all/every.jsonl", "target_agent_id": EVERYONE}))
    out.append(await reads(face, FRESH))
    out.append(await reads(face, EVERYONE))
    return out, at_export


async def test_export_and_import_answer_as_the_embedded_server(
    deployment: Deployment, settings: Settings, tmp_path: Path
) -> None:
    exports = tmp_path / "kafka-exports"
    deployment.worker()
    deployment.worker()
    deployment.router(MEMSTREAM_EXPORT_DIR=str(exports))
    with ServerThread(settings) as embedded:
        local = HttpFace(embedded.url)
        try:
            expected, _ = await export_then_import(local, embedded_ends(settings))
        finally:
            await local.close()
    events = ranks(settings.log_path)
    names = ("ada.jsonl", "all/every.jsonl", "all/vectors.jsonl")
    expected_files = {name: read_jsonl(settings.data_dir / "exports" / name) for name in names}

    await deployment.ready()
    face = HttpFace(deployment.url)
    mcp = McpFace(deployment.url)
    try:
        async with asyncio.timeout(300):
            got, ends = await export_then_import(face, kafka_ends(deployment.cfg))
            assert stable(got) == stable(expected)
            again = await mcp.call("import_memories", {"input_path": "ada.jsonl", "target_agent_id": FRESH})
            fresh_file = await mcp.call("export_memories", {"agent_id": FRESH, "output_path": "mcp/fresh.jsonl"})
    finally:
        await face.close()

    n = len(AGENTS)
    assert got[n : n + 3] == [  # the exports' answers, exactly
        {"ok": True, "path": "ada.jsonl", "memories": 7, "episodes": 1, "profiles": 1},
        {"ok": True, "path": "all/every.jsonl", "memories": 12, "episodes": 2, "profiles": 2},
        {"ok": True, "path": "all/vectors.jsonl", "memories": 12, "episodes": 2, "profiles": 2},
    ]
    for name, want in expected_files.items():
        file = read_jsonl(exports / name)
        header, want_header = file[0], want[0]
        assert stable({k: v for k, v in header.items() if k != "log_offsets"}) == stable(
            {k: v for k, v in want_header.items() if k != "log_offset"}
        ), name
        # the point of each partition the file shows: the partition's last event then
        read = [partition_for(AGENTS[0], PARTITIONS)] if header["agent_id"] else range(PARTITIONS)
        assert header["log_offsets"] == {str(p): ends[p] - 1 for p in read}, name
        # record for record, history included (offsets as each partition numbers them)
        assert stable(file[1:]) == stable(per_partition(want[1:], events)), name
    every = read_jsonl(exports / "all" / "vectors.jsonl")
    partitions = {h["partition"] for r in every[1:] for h in r.get("history", [])}
    assert partitions == {partition_for(a, PARTITIONS) for a in AGENTS}
    assert all("embedding_b64" in r for r in every[1:] if r["_type"] == "memory")
    assert not any("embedding_b64" in r for r in read_jsonl(exports / "all" / "every.jsonl"))

    dry, first, second, dry_again, home, everyone = got[n + 3 : n + 9]
    assert dry["dry_run"] is True and dry["imported_memories"] == 7 and dry["imported_episodes"] == 1, dry
    assert first == {
        "ok": True,
        "dry_run": False,
        "imported_memories": 7,
        "skipped_memories": 0,
        "imported_episodes": 1,
        "skipped_episodes": 0,
        "profile_updated": True,
    }
    assert second["imported_memories"] == 0 and second["skipped_memories"] == 7, second
    assert second["skipped_episodes"] == 1 and dry_again["imported_memories"] == 0, (second, dry_again)
    assert home["imported_memories"] == 0 and home["skipped_memories"] == 12, home
    assert everyone["imported_memories"] == 12 and everyone["imported_episodes"] == 2, everyone
    # the MCP face of the router answers the transfers as its HTTP face
    assert again == second
    assert fresh_file == {"ok": True, "path": "mcp/fresh.jsonl", "memories": 7, "episodes": 1, "profiles": 1}


def mixed_file(a: str, b: str) -> bytes:
    """Good records of two agents among bad lines of every kind an import reports."""
    lines: list[Any] = [
        {"_type": "memory", "agent_id": a, "content": "kept line one"},
        "not json",
        {"_type": "memory", "content": "no agent here"},
        [1],
        {"_type": "entity", "name": "x"},
        {"_type": "episode", "agent_id": b, "summary": ""},
        {"_type": "memory", "agent_id": b, "content": ""},
        {"_type": "profile", "agent_id": a, "content": "likes mixed files"},
        {"_type": "wat"},
        {"_type": "episode", "agent_id": a, "summary": "a fine episode"},
        {"_type": "memory", "agent_id": b, "content": "kept line two", "timestamp": 5},
        {"_type": "memory", "agent_id": b, "content": "kept line three"},
    ]
    return b"".join((x.encode() if isinstance(x, str) else orjson.dumps(x)) + b"\n" for x in lines)


async def refusals(face: HttpFace, root: Path, ends: Ends) -> list[Any]:
    """Files an import must refuse whole, paths it must refuse, and a file of mixed lines."""
    ada = AGENTS[0]
    out = [await face.call("export_memories", {"agent_id": ada, "output_path": "ada.jsonl"})]
    lines = (root / "ada.jsonl").read_bytes().splitlines(keepends=True)
    (root / "cut.jsonl").write_bytes(b"".join(lines[:4]))  # the header announces more
    (root / "latin1.jsonl").write_bytes(b'{"_type":"memory","agent_id":"x","content":"caf\xe9"}\n')
    before = await ends()
    for args in (
        {"input_path": "cut.jsonl", "target_agent_id": "cut"},
        {"input_path": "cut.jsonl", "target_agent_id": "cut", "dry_run": True},
        {"input_path": "latin1.jsonl"},
        {"input_path": "../escape.jsonl"},
        {"input_path": "/etc/passwd"},
        {"input_path": "missing.jsonl"},
        {"input_path": 42},
    ):
        out.append(await face.call("import_memories", args))
    out.append(await face.call("export_memories", {"agent_id": ada, "output_path": "../escape.jsonl"}))
    out.append(await face.call("export_memories", {"agent_id": ada, "output_path": ""}))
    assert await ends() == before, "a refused file appended events"
    (root / "mixed.jsonl").write_bytes(mixed_file("mx-a", "mx-b"))
    out.append(await face.call("import_memories", {"input_path": "mixed.jsonl", "dry_run": True}))
    assert await ends() == before
    out.append(await face.call("import_memories", {"input_path": "mixed.jsonl"}))
    out.append(await face.call("audit_log", {"agent_id": "-", "kind": "refused"}))
    return out


async def test_bad_files_are_refused_clearly_and_append_nothing(
    deployment: Deployment, settings: Settings, tmp_path: Path
) -> None:
    assert partition_for("mx-a", PARTITIONS) != partition_for("mx-b", PARTITIONS)
    exports = tmp_path / "kafka-exports"
    deployment.worker()
    deployment.router(MEMSTREAM_EXPORT_DIR=str(exports))
    with ServerThread(settings) as embedded:
        local = HttpFace(embedded.url)
        try:
            await populate(Writer(local), AGENTS[0])
            expected = await refusals(local, settings.data_dir / "exports", embedded_ends(settings))
        finally:
            await local.close()
    await deployment.ready()
    face = HttpFace(deployment.url)
    try:
        async with asyncio.timeout(240):
            await populate(Writer(face), AGENTS[0])
            got = await refusals(face, exports, kafka_ends(deployment.cfg))
    finally:
        await face.close()
    assert stable(got) == stable(expected)
    cut, cut_dry, latin1, escape, absolute, missing, not_text, out_escape, empty = got[1:10]
    assert cut["ok"] is False and "truncated" in cut["error"] and "nothing was written" in cut["error"]
    assert cut_dry["dry_run"] is True and "truncated" in cut_dry["error"]
    assert "not UTF-8" in latin1["error"]
    assert escape["error"] == "input_path rejected (path traversal or outside export dir): ../escape.jsonl"
    assert absolute["ok"] is False and missing == {"ok": False, "error": "File not found: missing.jsonl"}
    assert not_text["ok"] is False and "input_path" in not_text["error"]
    assert out_escape["ok"] is False and empty["ok"] is False
    mixed = got[-2]
    assert mixed["imported_memories"] == 2 and mixed["imported_episodes"] == 1 and mixed["profile_updated"], mixed
    assert [e.split(":")[0] for e in mixed["errors"]] == [f"Line {n}" for n in (2, 4, 5, 9, 3, 7, 11, 6)], mixed
    # every refused import is audited (filed under the agent '-': the call names none)
    audit = got[-1]["records"]
    assert [r["tool"] for r in audit] == ["import_memories"] * 7, audit


async def owners(cfg: KafkaConfig, workers: int) -> dict[int, str]:
    """Partition -> the URL of its worker, once ``workers`` workers own partitions."""
    found = Owners(cfg)
    await found.start()
    try:
        async with asyncio.timeout(60):
            while len(found.urls) < cfg.partitions or len(set(found.urls.values())) < workers:
                await found.wait_change(0.5)
        return dict(found.urls)
    finally:
        await found.close()


async def merges(face: HttpFace, src: str, dst: str, ends: Ends) -> list[Any]:
    """A merge's refusals, dry run, copy, copy again, then a move finishing the copy (a move
    that stopped after its stores, before its deletions) and the move again; with reads."""
    await populate(Writer(face), src)
    base = {"source_agent_id": src, "target_agent_id": dst}
    out = [
        await face.call("merge_memories", {**base, "strategy": "overwrite"}),
        await face.call("merge_memories", {**base, "mode": "teleport"}),
        await face.call("merge_memories", {"source_agent_id": src, "target_agent_id": src}),
    ]
    before = await ends()
    out.append(await face.call("merge_memories", {**base, "dry_run": True}))
    out.append(await face.call("merge_memories", {**base, "mode": "move", "dry_run": True}))
    assert await ends() == before, "a dry run appended events"
    out.append(await face.call("merge_memories", base))
    copied = await ends()
    out.append(await face.call("merge_memories", base))
    assert await ends() == copied, "a second merge appended events"
    out.extend(await reads(face, dst))
    out.append(await face.call("merge_memories", {**base, "mode": "move"}))
    moved = await ends()
    out.append(await face.call("merge_memories", {**base, "mode": "move"}))
    assert await ends() == moved, "a finished move appended events"
    out.extend(await reads(face, src))
    out.extend(await reads(face, dst))
    return out


async def test_merge_copy_and_move_between_agents_of_two_workers(deployment: Deployment, settings: Settings) -> None:
    deployment.worker()
    deployment.worker()
    deployment.router()
    await deployment.ready()
    where = await owners(deployment.cfg, 2)
    src = "m-src"
    src_worker = where[partition_for(src, PARTITIONS)]
    dst = next(a for a in (f"m-dst{i}" for i in range(1000)) if where[partition_for(a, PARTITIONS)] != src_worker)
    with ServerThread(settings) as embedded:
        local = HttpFace(embedded.url)
        try:
            expected = await merges(local, src, dst, embedded_ends(settings))
        finally:
            await local.close()
    face = HttpFace(deployment.url)
    try:
        async with asyncio.timeout(240):
            got = await merges(face, src, dst, kafka_ends(deployment.cfg))
    finally:
        await face.close()
    assert stable(got) == stable(expected)
    assert await owners(deployment.cfg, 2) == where, "the partitions moved during the test"
    refused = got[:3]
    assert refused[0] == {"ok": False, "error": "Unsupported strategy 'overwrite'. Currently supported: 'skip'"}
    assert refused[1] == {"ok": False, "error": "Invalid mode 'teleport'. Supported: 'copy', 'move'"}
    assert refused[2] == {"ok": False, "error": "source_agent_id and target_agent_id must differ"}
    dry, dry_move, first, second = got[3:7]
    assert dry["dry_run"] is True and dry["merged_memories"] == 7 and "source_deleted" not in dry_move
    assert first == {
        "ok": True,
        "dry_run": False,
        "source_agent_id": src,
        "target_agent_id": dst,
        "strategy": "skip",
        "mode": "copy",
        "merged_memories": 7,
        "skipped_memories": 0,
        "merged_episodes": 1,
        "skipped_episodes": 0,
        "profile_copied": True,
        "skipped_profile": False,
    }
    assert second["merged_memories"] == 0 and second["skipped_memories"] == 7 and second["skipped_profile"] is True
    n = len(QUERIES) + 3
    move, again = got[7 + n], got[8 + n]
    assert move["merged_memories"] == 0 and move["skipped_memories"] == 7
    # W5: the locked memory stays at the source; so does the profile (no profile delete).
    assert move["source_deleted"]["deleted_memories"] == 6 and move["source_deleted"]["deleted_episodes"] == 1
    assert move["left_at_source"] == {"memories": 1, "episodes": 0, "profiles": 1}
    assert again["source_deleted"]["deleted_memories"] == 0 and again["left_at_source"] == move["left_at_source"]
    left = got[9 + n]["memories"]
    assert [m["content"] for m in left] == [TEXTS[2]]


async def test_workers_leave_the_transfers_to_the_router(deployment: Deployment) -> None:
    """A worker asked for a transfer directly says whose it is, rather than answer for its
    own partitions only; its internal routes refuse malformed requests clearly."""
    deployment.worker()
    deployment.router()
    await deployment.ready()
    where = await owners(deployment.cfg, 1)
    url = where[0]
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for tool in ("export_memories", "import_memories", "merge_memories", "check_health"):
            r = await client.post(f"/v1/tools/{tool}", json={"agent_id": "ada", "output_path": "x.jsonl"})
            assert r.status_code == 501 and "router" in r.json()["error"], (tool, r.text)
        r = await client.post("/v1/transfer/collect", json={"agent_id": "ada"})
        assert r.status_code == 400 and "include_embeddings" in r.json()["error"], r.text
        body = {"agent_id": "ada", "include_embeddings": False, "include_history": True}
        r = await client.post("/v1/transfer/collect", json=body)
        assert r.status_code == 400 and "x-memstream-partition" in r.json()["error"], r.text
        p = partition_for("ada", PARTITIONS)
        r = await client.post("/v1/transfer/collect", json=body, headers={"x-memstream-partition": str(p)})
        assert r.status_code == 200 and r.json()["records"] == [], r.text
        wrong = {"records": [[1, {"_type": "memory", "agent_id": "ada", "content": "x"}]]}
        r = await client.post("/v1/transfer/import", json=wrong, headers={"x-memstream-partition": str((p + 1) % 16)})
        assert r.status_code == 400 and "not of partition" in r.json()["error"], r.text
