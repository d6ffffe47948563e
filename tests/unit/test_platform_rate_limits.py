"""Client-side rate limits and the 429 rules, without a server.

The limiter tests run on their own event loop whose clock is fake and moved by the test, so
what they check (calls per one-second window) holds whatever the machine's speed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import TypeVar

import pytest
from temporalio.exceptions import ApplicationError

from orchestrator.activities.platform import as_activity_error
from orchestrator.platform import rate_limits
from orchestrator.platform.port import ErrorKind, PlatformError
from orchestrator.platform.rate_limits import (
    PlatformRateLimiter,
    RateLimits,
    backoff_seconds,
    parse_retry_after,
)
from orchestrator.workflows.policies import ERR_RETRYABLE

T = TypeVar("T")
NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return self.now


def on_fake_clock(main: Callable[[FakeClock], Awaitable[T]]) -> T:
    """Run ``main`` on a fresh event loop whose ``time()`` is a clock the test moves."""
    clock = FakeClock()
    loop = asyncio.new_event_loop()
    loop.time = clock.time  # type: ignore[method-assign]
    try:
        return loop.run_until_complete(main(clock))
    finally:
        loop.close()


async def drive(clock: FakeClock, tasks: list[asyncio.Task[None]], step: float = 0.004) -> None:
    """Move the fake clock in small steps, letting the loop run between them, until every
    task is done (bounded, so a limiter that never lets a call through fails the test)."""
    for _ in range(100_000):
        if all(task.done() for task in tasks):
            break
        for _ in range(3):
            await asyncio.sleep(0)
        clock.now += step
    for task in tasks:
        task.result()  # re-raises a task's error; fails if one never finished


def most_in_any_second(times: list[float]) -> int:
    """The most calls in any half-open one-second window [t, t + 1)."""
    ordered = sorted(times)
    return max(sum(1 for other in ordered if start <= other < start + 1.0) for start in ordered)


def test_calls_to_one_resource_stay_at_or_under_the_limit_in_every_second() -> None:
    async def main(clock: FakeClock) -> list[float]:
        limiter = PlatformRateLimiter(RateLimits(per_resource=10, run_starts=0, overall=0))
        sent: list[float] = []

        async def call() -> None:
            await limiter.acquire("actor-runs/r1")
            sent.append(clock.now)

        tasks = [asyncio.create_task(call()) for _ in range(35)]  # a burst: 3.5 s worth
        await drive(clock, tasks)
        return sent

    sent = on_fake_clock(main)
    assert len(sent) == 35
    assert most_in_any_second(sent) <= 10
    # Paced, not starved: the burst is spread evenly rather than held back.
    assert most_in_any_second(sent) >= 9
    assert max(sent) - min(sent) < 3.6


def test_each_resource_has_its_own_limit_and_starts_have_theirs() -> None:
    async def main(clock: FakeClock) -> dict[str, list[float]]:
        limiter = PlatformRateLimiter(RateLimits(per_resource=5, run_starts=20, overall=0))
        sent: dict[str, list[float]] = {"a": [], "b": [], "start": []}

        async def call(key: str, resource: str, start: bool) -> None:
            await limiter.acquire(resource, start=start)
            sent[key].append(clock.now)

        tasks = [
            *(asyncio.create_task(call("a", "datasets/a", False)) for _ in range(10)),
            *(asyncio.create_task(call("b", "datasets/b", False)) for _ in range(10)),
            *(asyncio.create_task(call("start", "actors/x", True)) for _ in range(40)),
        ]
        await drive(clock, tasks)
        return sent

    sent = on_fake_clock(main)
    assert most_in_any_second(sent["a"]) <= 5 and most_in_any_second(sent["b"]) <= 5
    # b is not queued behind a: both resources got their full share in the same second.
    assert most_in_any_second(sent["a"] + sent["b"]) >= 9
    assert most_in_any_second(sent["start"]) <= 20
    assert most_in_any_second(sent["start"]) >= 19


def test_the_overall_limit_binds_across_resources() -> None:
    async def main(clock: FakeClock) -> list[float]:
        limiter = PlatformRateLimiter(RateLimits(per_resource=50, run_starts=50, overall=8))
        sent: list[float] = []

        async def call(n: int) -> None:
            await limiter.acquire(f"actor-runs/r{n}", start=n % 3 == 0)
            sent.append(clock.now)

        tasks = [asyncio.create_task(call(n)) for n in range(24)]
        await drive(clock, tasks)
        return sent

    sent = on_fake_clock(main)
    assert len(sent) == 24 and most_in_any_second(sent) <= 8


def test_a_limit_of_zero_is_off() -> None:
    async def main(clock: FakeClock) -> list[float]:
        limiter = PlatformRateLimiter(RateLimits(per_resource=0, run_starts=0, overall=0))
        sent: list[float] = []
        for _ in range(100):
            await limiter.acquire("datasets/d")
            sent.append(clock.now)
        return sent

    assert on_fake_clock(main) == [1000.0] * 100  # no wait at all: the clock never moved


def test_idle_resource_buckets_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rate_limits._Keyed, "SWEEP_ABOVE", 8)

    async def main(clock: FakeClock) -> int:
        keyed = rate_limits._Keyed(10)
        for n in range(100):
            await keyed.acquire(f"actor-runs/r{n}")
            clock.now += 0.2  # longer than 1/rate: every earlier bucket is empty again
        return len(keyed)

    assert on_fake_clock(main) <= 8


def test_retry_after_in_seconds_and_as_an_http_date() -> None:
    assert parse_retry_after("3", NOW) == 3.0
    assert parse_retry_after(" 0 ", NOW) == 0.0
    assert parse_retry_after("1.5", NOW) == 1.5
    later = format_datetime(NOW + timedelta(seconds=7), usegmt=True)
    assert later.endswith("GMT")
    assert parse_retry_after(later, NOW) == 7.0
    earlier = format_datetime(NOW - timedelta(minutes=1), usegmt=True)
    assert parse_retry_after(earlier, NOW) == 0.0
    for ignored in (None, "", "-1", "soon", "nan", "inf"):
        assert parse_retry_after(ignored, NOW) is None


def test_backoff_is_apifys_doubling_from_500_ms_with_jitter() -> None:
    def low(a: float, b: float) -> float:
        return a

    def high(a: float, b: float) -> float:
        return b

    assert [backoff_seconds(n, 0.5, low) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert [backoff_seconds(n, 0.5, high) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert 0.5 <= backoff_seconds(1, 0.5) <= 1.0


def test_a_long_retry_after_becomes_the_activitys_next_retry_delay() -> None:
    error = as_activity_error(
        PlatformError(ErrorKind.RETRYABLE, "slow down", status_code=429, retry_after_seconds=90),
        capacity_delay=30,
    )
    assert isinstance(error, ApplicationError) and error.type == ERR_RETRYABLE
    assert error.next_retry_delay == timedelta(seconds=90) and not error.non_retryable
    plain = as_activity_error(PlatformError(ErrorKind.RETRYABLE, "503"), capacity_delay=30)
    assert plain.next_retry_delay is None
