"""The change feed's read interval rule (api/services/feed.py ``ReadPacer``) on injected clocks:
it grows with what a fan-out costs (CPU), between the floor and the cap; what a loaded machine
adds to each read (its lateness, the read, the fan-out: wall time) comes off the delivery budget;
the floor overrides; a read after a quiet spell is never delayed; one stretched fan-out moves
nothing. And the feed's reader measures its fan-outs (what the rule is fed), with no timing
assertion."""

from __future__ import annotations

import asyncio
import time

import pytest

from memstream.api.services.feed import FANOUT_SHARE, MAX_READ_INTERVAL_S, MIN_READ_INTERVAL_S, Feed, ReadPacer
from tests.unit.test_feed_fanout import ListLog, fill, take


class Clock:
    """Seconds that move only when the test moves them."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def fan_out(pacer: ReadPacer, clock: Clock, seconds: float) -> None:
    started = pacer.fanning_out()
    clock.now += seconds
    pacer.fanned_out(started)


def test_until_a_fan_out_is_measured_the_interval_is_the_floor_and_the_first_read_goes_at_once() -> None:
    clock = Clock()
    pacer = ReadPacer(0.025, cap=0.085, share=0.025, clock=clock, cpu_clock=clock)
    assert pacer.interval == 0.025
    assert pacer.delay() == 0.0  # never read: now
    pacer.reading()
    assert pacer.delay() == pytest.approx(0.025)
    clock.now += 0.01
    assert pacer.delay() == pytest.approx(0.015)


def test_the_interval_is_the_fan_out_cost_over_the_share_between_floor_and_cap() -> None:
    clock = Clock()
    pacer = ReadPacer(0.025, cap=0.085, share=0.025, clock=clock, cpu_clock=clock)
    fan_out(pacer, clock, 0.0005)  # a few subscribers: 0.5 ms / 2.5 % = 20 ms, under the floor
    assert pacer.cost == pytest.approx(0.0005) and pacer.interval == 0.025
    pacer = ReadPacer(0.025, cap=0.085, share=0.025, clock=clock, cpu_clock=clock)
    fan_out(pacer, clock, 0.0015)  # more subscribers, a costlier fan-out: 60 ms
    assert pacer.interval == pytest.approx(0.06)
    pacer = ReadPacer(0.025, cap=0.085, share=0.025, clock=clock, cpu_clock=clock)
    fan_out(pacer, clock, 0.004)  # 160 ms would write 2.5 % of the time, but delivery comes first
    assert pacer.interval == 0.085


def test_a_floor_above_the_cap_is_a_fixed_interval_and_a_zero_floor_is_allowed() -> None:
    clock = Clock()
    fixed = ReadPacer(0.2, cap=0.085, share=0.025, clock=clock, cpu_clock=clock)
    fan_out(fixed, clock, 0.0001)
    assert fixed.interval == 0.2
    fan_out(fixed, clock, 0.01)
    assert fixed.interval == 0.2
    free = ReadPacer(0.0, cap=0.085, share=0.025, clock=clock, cpu_clock=clock)
    assert free.interval == 0.0 and free.delay() == 0.0
    fan_out(free, clock, 0.0001)
    assert free.interval == pytest.approx(0.004)


def test_the_cost_is_the_median_of_recent_fan_outs_so_one_stretched_fan_out_moves_nothing() -> None:
    clock = Clock()
    pacer = ReadPacer(0.0, cap=1.0, share=0.1, clock=clock, cpu_clock=clock)
    for _ in range(ReadPacer.WINDOW - 1):
        fan_out(pacer, clock, 0.002)
    fan_out(pacer, clock, 0.5)  # the machine's other work held the loop for once
    assert pacer.cost == pytest.approx(0.002) and pacer.interval == pytest.approx(0.02)
    for _ in range(ReadPacer.WINDOW):  # the subscribers left: fan-outs got cheap, and so does the interval
        fan_out(pacer, clock, 0.0002)
    assert pacer.interval == pytest.approx(0.002)


def test_a_read_after_a_quiet_spell_is_not_delayed_whatever_the_interval() -> None:
    clock = Clock()
    pacer = ReadPacer(0.025, cap=0.085, share=0.025, clock=clock, cpu_clock=clock)
    fan_out(pacer, clock, 0.004)
    pacer.reading()
    clock.now += 0.03
    assert pacer.delay() == pytest.approx(0.055)  # a storm: the next read waits out the interval
    clock.now += 0.2
    assert pacer.delay() == 0.0  # quiet for longer than the interval: at once


def read_and_fan_out(pacer: ReadPacer, clock: Clock, read_s: float, fan_out_s: float) -> None:
    pacer.reading()
    clock.now += read_s
    fan_out(pacer, clock, fan_out_s)


def test_what_a_read_and_its_fan_out_take_comes_off_the_delivery_budget() -> None:
    clock = Clock()
    pacer = ReadPacer(0.025, cap=0.085, budget=0.09, share=0.02, clock=clock, cpu_clock=clock)
    read_and_fan_out(pacer, clock, 0.002, 0.003)  # idle: 5 ms of overhead, the cap stands
    assert pacer.overhead == pytest.approx(0.005) and pacer.interval == 0.085
    loaded = ReadPacer(0.025, cap=0.085, budget=0.09, share=0.02, clock=clock, cpu_clock=clock)
    read_and_fan_out(loaded, clock, 0.027, 0.003)  # a loaded machine: 30 ms, so 60 ms of wait
    assert loaded.overhead == pytest.approx(0.03) and loaded.interval == pytest.approx(0.06)
    read_and_fan_out(loaded, clock, 0.2, 0.003)  # once past the budget: the floor, not less
    read_and_fan_out(loaded, clock, 0.2, 0.003)
    assert loaded.overhead > 0.09 and loaded.interval == 0.025


def test_a_read_that_begins_late_counts_its_lateness() -> None:
    clock = Clock()
    pacer = ReadPacer(0.025, cap=0.085, budget=0.09, share=0.02, clock=clock, cpu_clock=clock)
    read_and_fan_out(pacer, clock, 0.001, 0.004)  # 5 ms of overhead: 85 ms
    clock.now += 0.01
    wait = pacer.delay()
    assert wait == pytest.approx(0.085 - 0.015)
    clock.now += wait + 0.03  # the sleep ended 30 ms late (a busy loop, a busy machine)
    read_and_fan_out(pacer, clock, 0.001, 0.004)
    assert pacer.overhead == pytest.approx((0.005 + 0.035) / 2)  # the median of two: their mean
    assert pacer.interval == pytest.approx(0.09 - 0.02)
    clock.now += 1.0  # quiet: the next read is not late, it is at once
    assert pacer.delay() == 0.0
    read_and_fan_out(pacer, clock, 0.001, 0.004)
    assert sorted(pacer._overheads) == pytest.approx([0.005, 0.005, 0.035])


def test_a_fan_out_costs_its_cpu_time_while_the_wait_it_adds_counts_in_wall_time() -> None:
    wall, cpu = Clock(), Clock()
    pacer = ReadPacer(0.025, cap=0.085, budget=0.09, share=0.02, clock=wall, cpu_clock=cpu)
    pacer.reading()
    wall.now += 0.002  # the read
    started = pacer.fanning_out()
    cpu.now += 0.001  # 20 subscribers' writes: 1 ms of the loop thread's CPU ...
    wall.now += 0.03  # ... spread over 30 ms while other processes held the core
    pacer.fanned_out(started)
    assert pacer.cost == pytest.approx(0.001) and pacer.overhead == pytest.approx(0.032)
    assert pacer.interval == pytest.approx(0.05)  # the cost asks 50 ms, the budget allows 58


def test_a_floor_above_the_budget_is_still_the_interval() -> None:
    clock = Clock()
    pacer = ReadPacer(0.2, cap=0.085, budget=0.09, share=0.02, clock=clock, cpu_clock=clock)
    read_and_fan_out(pacer, clock, 0.05, 0.01)
    assert pacer.interval == 0.2


def test_a_clock_going_backwards_never_counts_as_negative_cost() -> None:
    clock = Clock()
    pacer = ReadPacer(0.025, cap=0.085, share=0.025, clock=clock, cpu_clock=clock)
    fan_out(pacer, clock, -1.0)
    assert pacer.cost == 0.0 and pacer.interval == 0.025


def test_bad_parameters_are_refused() -> None:
    bad = ({"floor": -0.1}, {"cap": -1.0}, {"budget": -0.01}, {"share": 0.0}, {"share": 2})
    for kwargs in bad:
        with pytest.raises(ValueError, match="floor, cap and budget"):
            ReadPacer(**kwargs)  # type: ignore[arg-type]


def test_the_defaults_keep_a_storm_delivery_within_the_goal() -> None:
    assert MIN_READ_INTERVAL_S <= MAX_READ_INTERVAL_S < 0.1  # the cap: store->delivered p99 <= 100 ms
    assert 0 < FANOUT_SHARE <= 0.1  # the throughput goal: within 10 % of no subscribers


async def test_the_feed_reader_measures_its_fan_outs_for_the_rule() -> None:
    log = ListLog()
    feed = Feed(log, poll_seconds=5.0, min_read_interval_s=0.0)
    assert feed.pacer.floor == 0.0 and feed.pacer.cost == 0.0
    measured: list[float] = []
    real = feed.pacer.fanned_out

    def note(started: float) -> None:
        measured.append(started)
        real(started)

    feed.pacer.fanned_out = note  # type: ignore[method-assign]
    subs = [feed.subscribe() for _ in range(5)]
    expected = fill(log, 4)
    feed.notify()
    for sub in subs:
        assert [i.offset for i in await take(sub, 4)] == expected
    deadline = time.monotonic() + 30
    while not measured:  # the reader notes the fan-out once the woken subscribers have run
        assert time.monotonic() < deadline, "the reader never measured its fan-out"
        await asyncio.sleep(0.001)
    assert len(measured) == 1 and len(feed.pacer._spent) == 1
    await feed.close()
