"""Operations (issue 6): Prometheus metrics at /metrics, JSON call logs, the health verdict."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from memstream.api.services.engine import EmbeddedEngine
from memstream.api.services.logs import configure
from memstream.api.services.settings import Settings, load_settings
from tests.support.calls import call
from tests.support.embedders import HashEmbedder
from tests.support.logs import isolated_logging
from tests.support.servers import ServerThread, log_end


def scrape(server: ServerThread) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = httpx.get(f"{server.url}/metrics", timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(values: dict[Any, float], name: str, **labels: str) -> float:
    return values.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_move_when_calls_happen(face: Any, http_server: ServerThread) -> None:
    before = scrape(http_server)
    count = "memstream_request_duration_seconds_count"
    assert (await face.call("store", {"agent_id": "m", "content": "metrics are moving"}))["result"] == "stored"
    assert (await face.call("recall", {"agent_id": "m", "query": "metrics"}))["messages"]
    bad = await face.call("store", {"agent_id": "m", "content": 5})
    assert bad["ok"] is False
    await face.call("no_such_tool", {})
    after = scrape(http_server)
    for tool in ("store", "recall"):
        delta = sample(after, count, tool=tool, face=face.name) - sample(before, count, tool=tool, face=face.name)
        assert delta == (2 if tool == "store" else 1), tool
    errors = "memstream_errors_total"
    assert (
        sample(after, errors, tool="store", code="invalid") - sample(before, errors, tool="store", code="invalid") == 1
    )
    assert (
        sample(after, errors, tool="unknown", code="unknown_tool")
        == sample(before, errors, tool="unknown", code="unknown_tool") + 1
    )
    assert not [k for k in after if dict(k[1]).get("tool") == "no_such_tool"], "unknown names must not become labels"
    assert (
        sample(after, "memstream_embed_duration_seconds_count")
        >= sample(before, "memstream_embed_duration_seconds_count") + 2
    )  # the store's text and the recall's query
    events, audits = log_end(http_server)
    assert sample(after, "memstream_log_end_offset") == events
    assert sample(after, "memstream_audit_end_offset") == audits
    assert sample(after, "memstream_projection_lag_events") == 0  # the recall folded everything
    assert sample(after, "memstream_log_readable") == 1


async def test_lag_and_fold_progress(settings: Settings) -> None:
    """Writes from another process show as projection lag until a read folds them; the start-up
    fold reports events folded / total."""
    first = EmbeddedEngine(settings, embedder=HashEmbedder())
    await first.start()
    for i in range(30):
        await call(first, "store", agent_id="f", content=f"fold progress number {i}")
    await first.close()
    snapshots = settings.snapshot_dir
    for f in snapshots.glob("*"):
        f.unlink()  # no checkpoints: start-up folds the whole log

    eng = EmbeddedEngine(settings, embedder=HashEmbedder())
    await eng.start()
    other = EmbeddedEngine(settings, embedder=HashEmbedder())
    await other.start()
    try:
        values = _values(eng)
        assert values[("memstream_fold_events_done", (("kind", "start-up"),))] == 30
        assert values[("memstream_fold_events_total", (("kind", "start-up"),))] == 30
        assert values[("memstream_fold_running", ())] == 0
        for i in range(5):
            await call(other, "store", agent_id="g", content=f"written elsewhere {i}")
        assert _values(eng)[("memstream_projection_lag_events", ())] == 5
        await call(eng, "recall", agent_id="g", query="elsewhere")
        assert _values(eng)[("memstream_projection_lag_events", ())] == 0
    finally:
        await other.close()
        await eng.close()


def _values(engine: EmbeddedEngine) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(engine.metrics.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """The CLI's logging set-up with MEMSTREAM_LOG_FORMAT=json, into a buffer; undone after."""
    buf = io.StringIO()
    with isolated_logging():
        configure("INFO", fmt="json", stream=buf)
        yield buf


async def test_json_call_logs_carry_the_fields_and_no_content(engine: EmbeddedEngine, json_logs: io.StringIO) -> None:
    from memstream.api.tools.registry import Caller

    secret = "the launch code is zebra-42"
    who = Caller(client_id="logger-client")
    assert (await call(engine, "store", who, agent_id="logme", content=secret))["result"] == "stored"
    await call(engine, "recall", who, agent_id="logme", query="launch code zebra-42")
    await call(engine, "delete_memory", who, agent_id="logme", memory_id=999_999)
    text = json_logs.getvalue()
    assert "zebra" not in text and "launch" not in text, "content or queries reached the log"
    lines = [orjson.loads(line) for line in text.splitlines()]
    calls = [x for x in lines if x["logger"] == "memstream.calls"]
    assert [c["tool"] for c in calls] == ["store", "recall", "delete_memory"]
    for c in calls:
        assert c["client_id"] == "logger-client" and c["agent"] == "logme" and c["face"] == "python"
        assert isinstance(c["duration_ms"], float) and c["duration_ms"] >= 0
        assert {"ts", "level", "msg"} <= set(c)
    assert [c["outcome"] for c in calls] == ["ok", "ok", "error"]
    assert calls[2]["error_code"] == "not_found"


async def test_health_verdicts(tmp_path: Any) -> None:
    settings = load_settings(env={}, data_dir=tmp_path / "h", sync="NORMAL", snapshot_every=5)
    eng = EmbeddedEngine(settings, embedder=HashEmbedder())
    await eng.start()
    try:
        for i in range(6):
            await call(eng, "store", agent_id="h", content=f"health check {i}")
        ok = await call(eng, "check_health")
        assert ok["status"] == "healthy", ok
        assert ok["stats"]["log_end_offset"] == 6 and ok["stats"]["projection_lag"] == 0
        await eng.checkpoints_written()  # the ones the stores and the health read made due, written beside
        ok = await call(eng, "check_health")
        assert ok["status"] == "healthy", ok
        assert "checkpoints" in ok["checks_run"] and ok["stats"]["checkpoint_age_s"]["decision"] is not None
        for f in settings.snapshot_dir.glob("*.snap"):
            f.unlink()  # checkpoints gone on a log past one interval: the next start replays
        degraded = await call(eng, "check_health")
        assert degraded["status"] == "degraded"
        assert [i["check"] for i in degraded["issues"]] == ["checkpoints"]
        eng.bus._task.cancel()  # the committer dies: nothing can be written
        with contextlib.suppress(BaseException):
            await eng.bus._task
        bad = await call(eng, "check_health")
        assert bad["status"] == "unhealthy"
        assert any(i["check"] == "log_writable" and i["severity"] == "critical" for i in bad["issues"])
    finally:
        eng.bus._task = None
        await eng.close()


async def test_health_endpoint_status_codes(http_server: ServerThread) -> None:
    async with httpx.AsyncClient(base_url=http_server.url) as client:
        r = await client.get("/health")
        assert r.status_code == 200 and r.json()["status"] == "healthy"
        eng = http_server.app.state.engine
        task = eng.bus._task
        eng.bus._task = None  # as if the committer had stopped
        try:
            r = await client.get("/health")
            assert r.status_code == 503 and r.json()["status"] == "unhealthy"
        finally:
            eng.bus._task = task
