"""Prometheus metrics of one engine, served at ``GET /metrics`` by the HTTP face.
See docs/operations.md, "Metrics".
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from memstream.api.services.jobs import ReembedJob

# Which face a call came in through: set by the face before it dispatches ("http", "mcp");
# calls made in-process (the CLI, tests, background jobs) are "python".
FACE: ContextVar[str] = ContextVar("memstream_face", default="python")

# Request latencies: sub-millisecond reads to multi-second imports.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
EMBED_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

__all__ = ["CONTENT_TYPE_LATEST", "FACE", "Metrics"]


class FoldProgress:
    """How far the current (or last) long fold got: a catch-up at start-up or after another
    process appended many events, or a replay for a point-in-time read."""

    def __init__(self) -> None:
        self.kind = "none"
        self.done = 0
        self.total = 0
        self.running = False
        self.started = 0.0

    def start(self, kind: str, first: int, end: int) -> None:
        self.kind, self.running, self.started = kind, True, time.monotonic()
        self.done, self.total = 0, max(end - first, 0)
        self._first = first

    def update(self, pos: int, end: int) -> None:
        """A ``ProjectionRunner.catch_up`` progress callback: ``pos`` is the next offset to fold."""
        self.done = max(pos - self._first, 0)
        self.total = max(end - self._first, self.done)

    def finish(self) -> None:
        self.done = self.total
        self.running = False


class LogEnds(Protocol):
    def end_offset(self) -> int: ...

    def audit_end_offset(self) -> int: ...


class Scraped(Protocol):
    """What a scrape reads of an engine: its log's ends, how far its read models reach, its jobs."""

    @property
    def log(self) -> LogEnds: ...

    @property
    def applied_offset(self) -> int: ...

    @property
    def jobs(self) -> Mapping[str, ReembedJob]: ...


class _EngineCollector(Collector):
    """Log and read-model figures, read at scrape time."""

    def __init__(self, engine: Scraped, metrics: Metrics) -> None:
        self.engine = engine
        self.metrics = metrics

    def collect(self) -> Iterator[GaugeMetricFamily]:
        eng = self.engine
        try:
            end = eng.log.end_offset()
            audit_end = eng.log.audit_end_offset()
            up = 1.0
        except Exception:  # a scrape must answer even when the log cannot be read
            end = audit_end = -1
            up = 0.0
        yield GaugeMetricFamily("memstream_log_readable", "1 when the log answered the scrape's queries", value=up)
        if up:
            yield GaugeMetricFamily(
                "memstream_log_end_offset", "Offset the next event will get (events in the log)", value=end
            )
            yield GaugeMetricFamily(
                "memstream_audit_end_offset", "Offset the next audit record will get", value=audit_end
            )
            applied = eng.applied_offset
            yield GaugeMetricFamily(
                "memstream_projection_offset", "Last log offset every read model has applied", value=applied
            )
            yield GaugeMetricFamily(
                "memstream_projection_lag_events",
                "Events in the log the read models have not applied yet (folded on the next read)",
                value=max(end - 1 - applied, 0),
            )
        fold = self.metrics.fold
        done = GaugeMetricFamily(
            "memstream_fold_events_done", "Events folded by the current or last long fold", labels=["kind"]
        )
        done.add_metric([fold.kind], fold.done)
        total = GaugeMetricFamily(
            "memstream_fold_events_total", "Events the current or last long fold has to fold", labels=["kind"]
        )
        total.add_metric([fold.kind], fold.total)
        yield done
        yield total
        yield GaugeMetricFamily(
            "memstream_fold_running", "1 while a long fold (rebuild, catch-up, replay) runs", value=float(fold.running)
        )
        jobs = GaugeMetricFamily(
            "memstream_job_events_done", "Progress of background admin jobs (re-embed)", labels=["job", "of"]
        )
        for name, job in sorted(eng.jobs.items()):
            jobs.add_metric([name, "done"], float(job.done))
            jobs.add_metric([name, "total"], float(job.total))
        yield jobs


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Histogram(
            "memstream_request_duration_seconds",
            "Tool call latency, by tool and face (http, mcp, python)",
            ["tool", "face"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.errors = Counter(
            "memstream_errors",
            "Failed tool calls, by tool and failure code (invalid, not_found, locked, ...)",
            ["tool", "code"],
            registry=self.registry,
        )
        self.embeds = Histogram(
            "memstream_embed_duration_seconds",
            "Embedding model call latency (one call embeds a batch of texts)",
            buckets=EMBED_BUCKETS,
            registry=self.registry,
        )
        self.embedded_texts = Counter("memstream_embedded_texts", "Texts embedded", registry=self.registry)
        self.fold = FoldProgress()
        self._latency: dict[tuple[str, str], Any] = {}
        self._errors: dict[tuple[str, str], Any] = {}

    def bind(self, engine: Scraped) -> None:
        self.registry.register(_EngineCollector(engine, self))

    def observe_call(self, tool: str, face: str, seconds: float, code: str | None) -> None:
        key = (tool, face)
        child = self._latency.get(key)
        if child is None:
            child = self._latency[key] = self.requests.labels(tool, face)
        child.observe(seconds)
        if code is not None:
            ekey = (tool, code)
            err = self._errors.get(ekey)
            if err is None:
                err = self._errors[ekey] = self.errors.labels(tool, code)
            err.inc()

    def observe_embed(self, seconds: float, texts: int) -> None:
        self.embeds.observe(seconds)
        self.embedded_texts.inc(texts)

    def render(self) -> bytes:
        return generate_latest(self.registry)
