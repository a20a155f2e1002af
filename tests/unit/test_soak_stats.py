"""The soak benchmark's arithmetic (bench/soak.py): percentiles, the per-minute table, the
verdict and the offered schedule, on samples whose answers are known by construction."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.bench import REPO, bench_module

soak = bench_module("soak_bench", REPO / "bench" / "soak.py")
Sample = soak.Sample


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert soak.percentile(values, 0.50) == 50.0
    assert soak.percentile(values, 0.99) == 99.0
    assert soak.percentile(values, 1.0) == 100.0
    assert soak.percentile(values, 0.0) == 1.0
    assert soak.percentile([7.0, 3.0, 5.0], 0.5) == 5.0  # unsorted input
    assert soak.percentile([], 0.99) == 0.0
    with pytest.raises(ValueError, match="outside"):
        soak.percentile(values, 99)


def test_per_minute_buckets_by_due_time_and_separates_errors() -> None:
    samples = [Sample("store", 1.0 + i * 0.1, float(i + 1), True) for i in range(100)]  # minute 1: 1..100 ms
    samples += [Sample("recall", 61.0, 5000.0, False)]  # an error: counted, not in the percentiles
    samples += [Sample("recall", 70.0, 20.0, True), Sample("recall", 80.0, 40.0, True)]
    samples += [Sample("store", 200.0, 9.0, True)]  # due after the last minute (the drain): the last minute
    table = soak.per_minute(samples, 2)
    assert [row["minute"] for row in table] == [1, 2]
    first, second = table
    assert first["all"] == {"count": 100, "errors": 0, "p50_ms": 50.0, "p99_ms": 99.0}
    assert set(first["ops"]) == {"store"}
    assert second["ops"]["recall"] == {"count": 3, "errors": 1, "p50_ms": 20.0, "p99_ms": 40.0}
    assert second["ops"]["store"] == {"count": 1, "errors": 0, "p50_ms": 9.0, "p99_ms": 9.0}
    assert second["all"]["count"] == 4 and second["all"]["errors"] == 1
    with pytest.raises(ValueError):
        soak.per_minute(samples, 0)


def _minute(p99: float, ops: dict[str, float], errors: int = 0) -> dict[str, Any]:
    return {
        "all": {"count": 10, "errors": errors, "p50_ms": p99 / 2, "p99_ms": p99},
        "ops": {op: {"count": 5, "errors": 0, "p50_ms": v / 2, "p99_ms": v} for op, v in ops.items()},
    }


def _resources(t: float, rss: dict[str, float], events: int, memories: int, log_bytes: int) -> dict[str, Any]:
    return {"t_s": t, "rss_mb": rss, "events": events, "memories": memories, "log_bytes": log_bytes}


def test_verdict_p99_ratio_and_goal() -> None:
    flat = [_minute(100.0, {"store": 120.0, "recall": 80.0}), _minute(150.0, {"store": 300.0, "recall": 80.0})]
    v = soak.verdict(flat, [])
    assert v["p99_last_over_first"] == 1.5
    assert v["p99_goal_met"] is True
    assert v["p99_last_over_first_per_op"] == {"recall": 1.0, "store": 2.5}
    assert "rss_growth_mb" not in v  # one sample or none: nothing to compare
    grown = [_minute(100.0, {}), _minute(90.0, {}), _minute(201.0, {}, errors=3)]
    v = soak.verdict(grown, [])
    assert v["p99_last_over_first"] == 2.01 and v["p99_goal_met"] is False
    assert v["errors"] == 3
    no_first = soak.verdict([_minute(0.0, {}), _minute(50.0, {})], [])
    assert no_first["p99_last_over_first"] is None and no_first["p99_goal_met"] is False
    with pytest.raises(ValueError):
        soak.verdict([], [])


def test_verdict_rss_growth_against_the_data() -> None:
    start = _resources(0, {"router": 100.0, "worker1": 200.0}, events=1000, memories=400, log_bytes=2**20)
    # 20 MB more over 2,000 events: 10.24 KB per event, within the 16 KB budget
    end = _resources(600, {"router": 101.0, "worker1": 219.0}, events=3000, memories=1200, log_bytes=5 * 2**20)
    v = soak.verdict([_minute(10.0, {})], [start, end])
    assert v["rss_growth_mb"] == 20.0
    assert v["events_appended"] == 2000 and v["memories_growth"] == 800
    assert v["log_growth_mb"] == 4.0
    assert v["rss_growth_kb_per_event"] == 10.24
    assert v["rss_growth_explained"] is True
    leaking = _resources(600, {"router": 100.0, "worker1": 300.0}, events=3000, memories=1200, log_bytes=2**21)
    v = soak.verdict([_minute(10.0, {})], [start, leaking])
    assert v["rss_growth_kb_per_event"] == 51.2 and v["rss_growth_explained"] is False
    no_data = _resources(600, {"router": 100.0, "worker1": 210.0}, events=1000, memories=400, log_bytes=2**20)
    v = soak.verdict([_minute(10.0, {})], [start, no_data])
    assert v["rss_growth_kb_per_event"] is None and v["rss_growth_explained"] is False
    shrunk = _resources(600, {"router": 90.0, "worker1": 190.0}, events=1000, memories=400, log_bytes=2**20)
    assert soak.verdict([_minute(10.0, {})], [start, shrunk])["rss_growth_explained"] is True


def test_schedule_is_a_fixed_rate_of_the_mix_and_repeatable() -> None:
    plan = soak.schedule(10.0, 600.0, seed=3)
    assert len(plan) == 6000
    assert [due for due, _ in plan[:3]] == [0.0, 0.1, 0.2]
    assert plan == soak.schedule(10.0, 600.0, seed=3)
    kinds = {op for _, op in plan}
    assert kinds == {op for op, _ in soak.MIX}
    stores = sum(op == "store" for _, op in plan) / len(plan)
    assert 0.27 < stores < 0.33  # MIX gives store 30%
    with pytest.raises(ValueError):
        soak.schedule(0.0, 60.0, seed=1)


def test_checkpoint_interval_falls_where_asked() -> None:
    # writes are 45% of the mix: 20 ops/s for 1,800 s, 60% of the way: 9,720 events
    assert soak.events_by(0.6, 20.0, 1800.0) == 9720
    assert soak.events_by(0.0, 20.0, 60.0) == 1


def test_arguments_are_checked() -> None:
    assert soak.parse_args(["--mode", "kafka", "--rate", "12.5"]).rate == "12.5"
    with pytest.raises(SystemExit):
        soak.parse_args(["--rate", "fast"])
    with pytest.raises(SystemExit):
        soak.parse_args(["--rate", "-3"])
    with pytest.raises(SystemExit):
        soak.parse_args(["--agents", "40", "--clients", "32"])


def test_table_lists_every_minute_and_sample() -> None:
    table = soak.per_minute([Sample("store", 5.0, 12.0, True), Sample("recall", 65.0, 30.0, True)], 2)
    res = [_resources(0, {"server": 100.0}, 0, 0, 0), _resources(60, {"server": 120.0}, 50, 40, 2**20)]
    text = soak.format_table(table, res)
    lines = text.splitlines()
    assert lines[1].split()[:5] == ["1", "1", "0", "12.0", "12.0"]
    assert lines[2].split()[:5] == ["2", "1", "0", "30.0", "30.0"]
    assert "server=120" in text


def test_kafka_checkpoint_interval_follows_the_busiest_partition() -> None:
    names = soak.agent_names(8)  # two agents on each of 4 partitions
    assert soak.per_partition(8000, names, 4) == 2000
    assert soak.per_partition(8000, names, 1) == 8000
    assert soak.per_partition(8000, names[:3], 4) == 8000 * 2 // 3  # two of the three share one
    assert soak.per_partition(1, names, 4) == 1
