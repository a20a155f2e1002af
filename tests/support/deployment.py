"""Kafka deployments for the tests: real `memstream worker` and `memstream serve --kafka`
processes on loopback against the test broker, and a face that keeps tests apart on a shared one."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from memstream.streams.log.kafka import KafkaConfig
from tests.support.broker import deployment_config, drop_topics, require_broker, stop_processes
from tests.support.faces import HttpFace, McpFace
from tests.support.master_key import with_master_key
from tests.support.proc_logs import ProcessLogs
from tests.support.servers import free_port

PROCS = Path(__file__).resolve().parents[1] / "procs"
AGENT_KEYS = ("agent_id", "target_agent_id", "source_agent_id")


async def until_every_partition_owned(
    url: str,
    partitions: int,
    *,
    timeout_s: float = 120,
    headers: dict[str, str] | None = None,
    procs: Sequence[subprocess.Popen[Any]] = (),
    log: Path | None = None,
    logs: ProcessLogs | None = None,
    also: Callable[[dict[str, Any]], bool] = lambda health: True,
) -> None:
    """Poll the router at ``url`` until its ``/health`` shows an owner for every partition (and
    ``also`` holds of it); fail at the deadline, or at once when one of ``procs`` (or of
    ``logs``) has exited, with ``log``'s text or the tails of ``logs``."""
    watched = [*procs, *(item.proc for item in logs.logged)] if logs is not None else list(procs)

    def why() -> str:
        if logs is not None:
            return logs.summary()
        return log.read_text() if log is not None else ""

    last: object = "no answer"
    try:
        async with asyncio.timeout(timeout_s), httpx.AsyncClient(headers=headers) as client:
            while True:
                try:
                    r = await client.get(f"{url}/health")
                    last = r.json() if r.status_code == 200 else f"{r.status_code} {r.text[:200]}"
                    # a 200 without the field is not a router's (another server on the port)
                    owned = r.json().get("partitions_with_owner") if r.status_code == 200 else None
                    if owned == partitions and also(r.json()):
                        return
                except httpx.TransportError as exc:
                    last = repr(exc)
                assert all(p.poll() is None for p in watched), f"a process exited\n{why()}"
                await asyncio.sleep(0.2)  # the poll's step; the timeout bounds the wait
    except TimeoutError:
        message = f"not every partition owned within {timeout_s:.0f} s; last /health: {last}"
        raise AssertionError(f"{message}\n{why()}") from None


class Deployment:
    """Two workers and one router, all real processes on loopback; stopped at the end."""

    def __init__(self, cfg: KafkaConfig) -> None:
        self.cfg = cfg
        self.procs: list[subprocess.Popen[bytes]] = []
        self.workers: list[subprocess.Popen[bytes]] = []
        self.logs = ProcessLogs("deployment")
        self.port = free_port()
        self.kafka_args = [
            "--kafka", cfg.bootstrap, "--prefix", cfg.prefix,
            "--partitions", str(cfg.partitions), "--replication", str(cfg.replication),
        ]  # fmt: skip

    def worker(self) -> subprocess.Popen[bytes]:
        args = [sys.executable, str(PROCS / "kafka_worker.py"), *self.kafka_args, "--session-timeout", "6"]
        proc = self.logs.popen("worker", args, with_master_key())
        self.procs.append(proc)
        self.workers.append(proc)
        return proc

    def router(self, **env: str) -> None:
        """Start the router; ``env``: variables of its own (e.g. ``MEMSTREAM_EXPORT_DIR``)."""
        args = [sys.executable, "-m", "memstream.api.cli", "--log-level", "WARNING", "serve", *self.kafka_args]
        args += ["--port", str(self.port)]
        self.procs.append(self.logs.popen("router", args, with_master_key(env)))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def ready(self, timeout_s: float = 90) -> None:
        """Every partition has an owner, and every worker started here (still running) owns
        some: workers started together join the group one after the other, and a test should
        not race the rebalance the later one causes (a re-embed job whose partition moves
        mid-job fails, as it should)."""

        def every_worker_answers(health: dict[str, Any]) -> bool:
            workers = sum(w.poll() is None for w in self.workers)
            return bool(health["stats"]["workers_answering"] >= min(workers, self.cfg.partitions))

        await until_every_partition_owned(
            self.url, self.cfg.partitions, timeout_s=timeout_s, logs=self.logs, also=every_worker_answers
        )

    def stop(self) -> None:
        try:
            stop_processes(self.procs)
        finally:
            self.logs.close()


@contextmanager
def shared_deployment() -> Iterator[str]:
    """One deployment (16 partitions, two workers, one router) for many tests; yields the
    router's URL. Skips (or fails, with MEMSTREAM_REQUIRE_KAFKA=1) when no broker answers."""
    asyncio.run(require_broker())
    cfg = deployment_config(16)
    kafka_args = ["--kafka", cfg.bootstrap, "--prefix", cfg.prefix, "--partitions", "16"]
    kafka_args += ["--replication", str(cfg.replication)]
    port = free_port()
    worker = [sys.executable, str(PROCS / "kafka_worker.py"), *kafka_args]
    router = [sys.executable, "-m", "memstream.api.cli", "--log-level", "WARNING", "serve", *kafka_args]
    logs = ProcessLogs("shared-deployment")
    procs = [logs.popen("worker", worker, with_master_key()) for _ in range(2)]
    procs.append(logs.popen("router", [*router, "--port", str(port)], with_master_key()))
    url = f"http://127.0.0.1:{port}"
    try:
        asyncio.run(until_every_partition_owned(url, cfg.partitions, logs=logs))
        yield url
    finally:
        stop_processes(procs)
        logs.close()
        asyncio.run(drop_topics(cfg.prefix))


class NamespacedFace:
    """A face whose agent ids carry a per-test suffix on the way in and lose it on the way out:
    on a shared deployment, a test written for a fresh server sees a fresh store."""

    def __init__(self, inner: HttpFace | McpFace, suffix: str | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.suffix = suffix if suffix is not None else f"~{uuid.uuid4().hex[:8]}"

    def _in(self, args: dict[str, Any]) -> dict[str, Any]:
        out = dict(args)
        for key in AGENT_KEYS:
            if isinstance(out.get(key), str) and out[key]:
                out[key] = out[key] + self.suffix
        if isinstance(out.get("agent_ids"), list):
            out["agent_ids"] = [a + self.suffix if isinstance(a, str) else a for a in out["agent_ids"]]
        return out

    def _out(self, value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(self.suffix, "")
        if isinstance(value, list):
            return [self._out(v) for v in value]
        if isinstance(value, dict):
            return {self._out(k): self._out(v) for k, v in value.items()}
        return value

    async def call(self, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = self._out(await self.inner.call(tool, self._in(args or {})))
        return body

    async def close(self) -> None:
        await self.inner.close()
