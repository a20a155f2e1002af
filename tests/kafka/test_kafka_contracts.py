"""The contract suites again, in Kafka mode: the same test functions, collected here with a
``face`` that speaks to `memstream serve --kafka` (HTTP and MCP) in front of two `memstream
worker` processes on the real broker.

One deployment serves the whole module; each test gets agents of its own by a per-test suffix
on every agent id it sends (and taken off every answer), so tests written for a fresh embedded
server see a fresh store here too. Tests that read the embedded log file directly (the log's
end offset, `check_health`'s figures) or start their own embedded servers stay in the embedded
suites. History, audit and point-in-time answers are also compared with the embedded server's
for one script of calls in `test_kafka_reads.py`.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.contract.test_context_packet import (  # noqa: F401  (collected here, with this module's face)
    test_a7_know_and_escalate_class_misses,
    test_a7_superseded_by_a_declared_supersedes_relation,
    test_a7_superseded_by_a_newer_version_under_the_same_msg_id,
    test_verify_memory_refuses_what_is_not_there,
)
from tests.contract.test_contract_associations import (  # noqa: F401
    test_a1_malformed_items_are_dropped_and_never_lose_the_memory,
    test_a1_retract_is_the_only_removal,
    test_a1_store_rider_declares_and_anchors,
    test_a2_declarations_change_no_recall_and_nothing_declared_changes_nothing,
    test_a3_an_alias_adds_a_vote_never_a_pass,
    test_a4_entity_relations_add_evidence_with_hops_never_items,
    test_a4_record_relation_bundles_and_role_words_label,
    test_a5_shape_shortfalls_and_budgets,
    test_a8_traverse_bfs_by_hops_both_directions_bounded,
)
from tests.contract.test_contract_history import (  # noqa: F401
    test_h1_agent_history_and_bulk_delete_are_recorded,
    test_h1_history_lists_every_event_oldest_first_and_survives_delete,
    test_h4_every_refused_command_is_audited,
)
from tests.contract.test_contract_recall import (  # noqa: F401
    test_r1_ascending_last_is_best,
    test_r2_r3_rrf_default_and_match_reason,
    test_r4_all_below_gate_returns_nothing,
    test_r9_profile_row_rules,
    test_r10_isolation,
    test_r11_recall_with_context_merges_by_instant,
    test_r12_read_your_writes,
)
from tests.contract.test_contract_standings import (  # noqa: F401
    test_s2_bad_input_is_refused,
    test_s2_contingent_only_when_every_carrier_is_set_aside,
    test_s3_recall_rows_show_standing_only_when_declared,
    test_s3_reconstruct_claims_show_standing_only_when_declared,
)
from tests.contract.test_contract_writes import (  # noqa: F401
    test_w1_store_answers_stored_skipped_rejected,
    test_w2_msg_id_dedup_spans_channels_and_sees_the_global_pool,
    test_w3_content_dedup_per_bucket,
    test_w3_racing_writers_never_both_land,
    test_w5_lock_protects_from_update_delete_and_bulk_delete,
    test_w7_every_failure_carries_ok_false_and_error,
    test_w7_successful_reads_carry_no_ok,
)
from tests.contract.test_point_in_time import (  # noqa: F401
    test_h3_as_of_offset_and_time,
    test_h3_bad_as_of_is_a_clear_error,
)
from tests.support.broker import deployment_config, drop_topics, require_broker, stop_processes
from tests.support.faces import HttpFace, McpFace
from tests.support.servers import free_port

pytestmark = [pytest.mark.kafka]

PROCS = Path(__file__).resolve().parents[1] / "procs"
AGENT_KEYS = ("agent_id", "target_agent_id", "source_agent_id")


class NamespacedFace:
    """A face whose agent ids carry a per-test suffix on the way in and lose it on the way out."""

    def __init__(self, inner: HttpFace | McpFace, suffix: str) -> None:
        self.inner = inner
        self.name = inner.name
        self.suffix = suffix

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


@pytest.fixture(scope="module")
def kafka_url() -> Iterator[str]:
    asyncio.run(require_broker())
    cfg = deployment_config(16)
    kafka_args = ["--kafka", cfg.bootstrap, "--prefix", cfg.prefix, "--partitions", "16"]
    kafka_args += ["--replication", str(cfg.replication)]
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(PROCS / "kafka_worker.py"), *kafka_args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    procs.append(
        subprocess.Popen(
            [sys.executable, "-m", "memstream.api.cli", "--log-level", "WARNING", "serve", *kafka_args,
             "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    async def ready() -> None:
        async with asyncio.timeout(120), httpx.AsyncClient() as client:
            while True:
                try:
                    r = await client.get(f"{url}/health")
                    if r.status_code == 200 and r.json()["partitions_with_owner"] == cfg.partitions:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.2)

    try:
        asyncio.run(ready())
        yield url
    finally:
        stop_processes(procs)
        asyncio.run(drop_topics(cfg.prefix))


@pytest.fixture(params=["http", "mcp"])
async def face(request: pytest.FixtureRequest, kafka_url: str) -> AsyncIterator[NamespacedFace]:
    """This module's face: Kafka mode, through the router's HTTP API and its MCP endpoint."""
    inner = HttpFace(kafka_url) if request.param == "http" else McpFace(kafka_url)
    f = NamespacedFace(inner, f"~{uuid.uuid4().hex[:8]}")
    try:
        yield f
    finally:
        await f.close()
