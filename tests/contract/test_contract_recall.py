"""Recall contracts R1–R13 (CONTRACTS.md), through the HTTP face and the MCP face.

The test embedder hashes words, so cosine here measures shared vocabulary: enough to make
"related" and "unrelated" unambiguous without a neural model."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from memstream.api.services.settings import Settings
from tests.support.corpora import TOPICS, corpus
from tests.support.faces import HttpFace, McpFace
from tests.support.servers import ServerThread


@contextlib.contextmanager
def server(settings: Settings, **overrides: Any) -> Iterator[ServerThread]:
    with ServerThread(settings.model_copy(update=overrides)) as srv:
        yield srv


@contextlib.asynccontextmanager
async def faces(srv: ServerThread) -> AsyncIterator[list[Any]]:
    fs = [HttpFace(srv.url), McpFace(srv.url)]
    try:
        yield fs
    finally:
        for f in fs:
            await f.close()


async def fill(face: Any, agent: str, texts: list[str], **extra: Any) -> list[int]:
    ids = []
    for i, t in enumerate(texts):
        r = await face.call("store", {"agent_id": agent, "content": t, "id": f"{agent}-{i}", **extra})
        assert r["result"] == "stored", r
        ids.append(r["id"])
    return ids


def scores(body: dict[str, Any]) -> list[float]:
    return [m["match_reason"]["score"] for m in body["messages"] if "match_reason" in m]


async def test_r1_ascending_last_is_best(face: Any) -> None:
    await fill(face, "r1", corpus(60))
    body = await face.call("recall", {"agent_id": "r1", "query": "printer jams third floor glossy paper", "limit": 5})
    rows = body["messages"]
    assert rows, body
    assert scores(body) == sorted(scores(body))
    assert "printer" in rows[-1]["content"]


async def test_r2_r3_rrf_default_and_match_reason(face: Any) -> None:
    await fill(face, "r2", corpus(60))
    body = await face.call("recall", {"agent_id": "r2", "query": "vpn certificate expiry renewal", "limit": 10})
    for m in body["messages"]:
        reason = m["match_reason"]
        assert reason["signal"] in ("cosine", "rrf")
        assert "rrf" in reason  # fused by reciprocal rank (the default)
        if reason["signal"] == "cosine":
            assert reason["score"] == reason["cosine"]


async def test_r4_all_below_gate_returns_nothing(face: Any) -> None:
    await fill(face, "r4", corpus(60))
    body = await face.call("recall", {"agent_id": "r4", "query": "zebra quantum chromodynamics sonnet"})
    assert body == {"messages": []}


async def test_r9_profile_row_rules(face: Any) -> None:
    await face.call("update_profile", {"agent_id": "r9", "profile": "Works on the platform team."})
    await fill(face, "r9", corpus(30))
    small = await face.call("recall", {"agent_id": "r9", "query": "deploy key rotation staging cluster"})
    assert all(not m["content"].startswith("[Profile]") for m in small["messages"])  # pool < 50
    await fill(face, "r9b", corpus(55))
    await face.call("update_profile", {"agent_id": "r9b", "profile": "Works on the platform team."})
    big = await face.call("recall", {"agent_id": "r9b", "query": "deploy key rotation staging cluster", "limit": 10})
    profiles = [m for m in big["messages"] if m["content"].startswith("[Profile]")]
    assert len(profiles) == 1
    assert "match_reason" not in profiles[0] and "ref" not in profiles[0]
    assert big["messages"][0] is not None and big["messages"][0]["content"].startswith("[Profile]")  # sorts last
    full = await face.call("recall", {"agent_id": "r9b", "query": "note", "limit": 1})
    assert all(not m["content"].startswith("[Profile]") for m in full["messages"])  # cut by the limit


async def test_r10_isolation(face: Any) -> None:
    await face.call("store", {"agent_id": "iso", "content": "global pool fact about falcons", "id": "g"})
    await face.call(
        "store", {"agent_id": "iso", "content": "project x fact about falcons", "id": "x", "project_id": "X"}
    )
    await face.call(
        "store", {"agent_id": "iso", "content": "project y fact about falcons", "id": "y", "project_id": "Y"}
    )
    await face.call("store", {"agent_id": "iso-other", "content": "other agent fact about falcons", "id": "o"})

    async def ids(**scope: Any) -> set[str]:
        body = await face.call("recall", {"agent_id": "iso", "query": "fact about falcons", **scope})
        return {m["id"] for m in body["messages"]}

    assert await ids(project_id="X") == {"g", "x"}
    assert await ids(project_id="") == {"g"}
    assert await ids() == {"g", "x", "y"}
    await face.call("store", {"agent_id": "iso", "content": "channel c fact about falcons", "id": "c", "channel": "C"})
    assert "c" in await ids(channel="C") and "c" not in await ids(channel="D")


async def test_r11_recall_with_context_merges_by_instant(face: Any) -> None:
    await face.call(
        "store",
        {"agent_id": "ctx", "content": "ferry timetable changes", "timestamp": "2026-03-01T12:00:00+02:00"},
    )
    body = await face.call(
        "recall_with_context",
        {
            "agent_id": "ctx",
            "query": "ferry timetable changes",
            "external_context": [
                {"role": "user", "content": "later, in UTC", "timestamp": "2026-03-01T10:30:00Z"},
                {"role": "user", "content": "earlier, naive", "timestamp": "2026-03-01 09:59:00"},
                {"role": "user", "content": "no stamp"},
            ],
        },
    )
    order = [m["content"] for m in body["messages"]]
    assert order == ["no stamp", "earlier, naive", "ferry timetable changes", "later, in UTC"]


async def test_r12_read_your_writes(face: Any) -> None:
    for i in range(20):
        await face.call("store", {"agent_id": "ryw", "content": f"unique marker walrus{i} appears here"})
        body = await face.call("recall", {"agent_id": "ryw", "query": f"unique marker walrus{i} appears"})
        assert any(f"walrus{i}" in m["content"] for m in body["messages"]), (i, body)


async def test_r12_across_processes_sharing_a_data_dir(settings: Settings) -> None:
    with server(settings) as a, server(settings) as b:
        fa, fb = HttpFace(a.url), HttpFace(b.url)
        try:
            for i in range(10):
                await fa.call("store", {"agent_id": "x", "content": f"shared directory narwhal{i} memory"})
                body = await fb.call("recall", {"agent_id": "x", "query": f"shared directory narwhal{i} memory"})
                assert any(f"narwhal{i}" in m["content"] for m in body["messages"]), body
        finally:
            await fa.close()
            await fb.close()


async def test_r2_rsf_and_cascade_modes(settings: Settings) -> None:
    for mode in ("rsf", "cascade"):
        with server(settings, recall_mode=mode, data_dir=settings.data_dir / mode) as srv:
            async with faces(srv) as (http, mcp):
                await fill(http, "m", corpus(120))
                for f in (http, mcp):
                    body = await f.call("recall", {"agent_id": "m", "query": "partner api rate limits second"})
                    assert body["messages"], (mode, body)
                    reasons = [m.get("match_reason") for m in body["messages"]]
                    if mode == "rsf":
                        assert all(r is not None and r["signal"] == "rsf" and 0 <= r["rsf"] <= 1 for r in reasons)
                    else:
                        scored = [r for r in reasons if r is not None]
                        assert all(r["signal"] == "cosine" and "rrf" not in r for r in scored)
                        # cascade fills with lexical rows that carry no match_reason (R3), pool >= 100
                        assert any(r is None for r in reasons) or len(scored) == len(reasons)


async def test_r2_rrf_evidence_lets_a_quoted_identifier_lead(settings: Settings) -> None:
    """The default rrf order weighs each vote by its retriever's evidence (docs/eval.md, "Fusion"):
    a note that alone holds the identifier a question quotes leads, even though the embedding
    prefers look-alikes sharing the question's other words. The classic order (lexical weight
    0.5) keeps every dense row above it and the limit cuts it off."""
    notes = [f"what happened with the checkout service incident number {i} after the deploy" for i in range(119)]
    notes.append("OPS-4821 closed.")
    query = {"agent_id": "ev", "query": "what happened with the checkout service incident OPS-4821", "limit": 10}
    answers = {}
    for name, extra in {"default": {}, "classic": {"rrf_evidence": False, "rrf_lexical_weight": 0.5}}.items():
        with server(settings, data_dir=settings.data_dir / name, **extra) as srv:
            async with faces(srv) as (http, mcp):
                await fill(http, "ev", notes)
                answers[name] = [await f.call("recall", query) for f in (http, mcp)]
    for body in answers["default"]:
        best = body["messages"][-1]
        assert best["content"] == "OPS-4821 closed.", body
        assert best["match_reason"]["signal"] == "rrf" and best["match_reason"]["score"] == pytest.approx(1 / 61)
    for body in answers["classic"]:
        assert len(body["messages"]) == 10
        assert all(m["content"] != "OPS-4821 closed." for m in body["messages"]), body


async def test_r5_confidence_beside_rows_and_legacy_ordering(settings: Settings) -> None:
    query = {"agent_id": "c", "query": "backup storage tape object store", "limit": 8}
    results = {}
    for name, extra in {
        "off": {},
        "fusion": {"confidence_enabled": True},
        "legacy": {"confidence_enabled": True, "confidence_ordering": "legacy"},
    }.items():
        with server(settings, data_dir=settings.data_dir / name, **extra) as srv:
            async with faces(srv) as (http, _):
                await fill(http, "c", corpus(80))
                results[name] = (await http.call("recall", query))["messages"]

    def same(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in m.items() if k not in ("confidence", "timestamp")} for m in rows]

    assert same(results["fusion"]) == same(results["off"])  # same rows, same order: confidence does not rank
    assert all("confidence" in m for m in results["fusion"])
    legacy_conf = [m["confidence"] for m in results["legacy"]]
    assert legacy_conf == sorted(legacy_conf)  # legacy re-sorts by confidence (ascending out)
    assert all(m["match_reason"]["signal"] == "confidence" for m in results["legacy"])


async def test_r6_autocut_inert_under_fusion(settings: Settings) -> None:
    query = {"agent_id": "a6", "query": "kubernetes autoscaler node limits", "limit": 10}
    counts = []
    for n, min_results in enumerate((1, 10)):
        with server(settings, data_dir=settings.data_dir / f"a{n}", autocut_min_results=min_results) as srv:
            async with faces(srv) as (http, _):
                await fill(http, "a6", corpus(80))
                counts.append(len((await http.call("recall", query))["messages"]))
    assert counts[0] == counts[1]


async def test_r7_episode_penalty_off_by_default_and_floor_when_on(settings: Settings) -> None:
    for name, extra in {"default": {}, "on": {"episode_penalty_enabled": True, "episode_decay_rate": 1e6}}.items():
        with server(settings, data_dir=settings.data_dir / name, **extra) as srv:
            async with faces(srv) as (http, _):
                await fill(http, "ep", corpus(60))
                await http.call("archive_episode", {"agent_id": "ep", "summary": "unrelated wrap-up"})
                body = await http.call("recall", {"agent_id": "ep", "query": "green tea preferences platform"})
                priors = [
                    m["match_reason"].get("prior") for m in body["messages"] if m.get("ref", "").startswith("mem:")
                ]
                assert priors, body
                if name == "default":
                    assert priors == [None] * len(priors)
                else:
                    assert all(p == pytest.approx(0.5) for p in priors)  # the floor


async def test_r8_window_is_a_recency_prior_and_reach_adds_the_far_list(settings: Settings) -> None:
    old = "ancient ledger mentions the obsidian vault combination"
    newer = [f"fresh note {i} about unrelated gardening topics" for i in range(30)]
    for name, extra in {"window": {"max_memories": 10}, "reach": {"max_memories": 10, "vector_reach": 100}}.items():
        with server(settings, data_dir=settings.data_dir / name, recall_retrievers="vector", **extra) as srv:
            async with faces(srv) as (http, _):
                await fill(http, "w", [old, *newer])
                body = await http.call(
                    "recall", {"agent_id": "w", "query": "obsidian vault combination", "trace": True}
                )
                found = any("obsidian" in m["content"] for m in body["messages"])
                assert found == (name == "reach"), (name, body["trace"])


async def test_r13_precision_moves_the_gate_reproducibly(settings: Settings) -> None:
    # Sessions of related memories (same topic, minutes apart), sessions days apart.
    texts, stamps = [], []
    for s, topic in enumerate(TOPICS):
        for j in range(5):
            texts.append(f"{topic} session {s} detail {j}")
            stamps.append(f"2026-0{1 + s // 6}-{1 + (s % 6) * 4:02d}T10:{10 + j:02d}:00+00:00")
    gates = {}
    for run in ("a", "b", "lenient"):
        with server(settings, data_dir=settings.data_dir / run) as srv:
            async with faces(srv) as (http, mcp):
                for i, (t, ts) in enumerate(zip(texts, stamps, strict=True)):
                    await http.call("store", {"agent_id": "p", "content": t, "id": f"p{i}", "timestamp": ts})
                level = "lenient" if run == "lenient" else "strict"
                body = await mcp.call("set_recall_precision", {"agent_id": "p", "precision": level})
                assert body["ok"] is True, body
                gates[run] = body["calibrate"]["new_threshold"]
                got = await http.call("get_recall_precision", {"agent_id": "p"})
                assert got["precision"] == level and got["overridden"] is True
    assert gates["a"] == gates["b"]  # same log, same calibration: seeded, no drift
    assert gates["lenient"] <= gates["a"]
