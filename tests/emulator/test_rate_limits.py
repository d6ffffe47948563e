"""Rate limits end to end: the emulator's 429s (with and without ``Retry-After``) and the
adapter's pacing and retries against them, on the official client's real HTTP stack.

Waits are recorded by an injected ``sleep`` (never measured); the pacing is checked by
counting the emulator's own 429s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from apify_emulator import EmulatorConfig
from apify_emulator.__main__ import parse_args
from orchestrator.platform.apify import ApifyPlatform
from orchestrator.platform.port import ErrorKind, PlatformError, StartOptions
from orchestrator.platform.rate_limits import RateLimits, RetryRules

from .conftest import TOKEN, RunningEmulator, local, make_config, start_emulator

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
UNLIMITED = RateLimits(per_resource=0, run_starts=0, overall=0)
# Apify's backoff from 500 ms, as the settings default it.
RULES = RetryRules(max_attempts=5, backoff_initial_seconds=0.5, retry_after_max_seconds=10)


@dataclass
class Recorder:
    """Stands in for asyncio.sleep and for the metrics counter: records, never waits
    (unless ``real``, for a wait the emulator's clock must actually see pass)."""

    real: bool = False
    sleeps: list[float] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if self.real:
            await asyncio.sleep(seconds)

    def observe(self, kind: str, status: str) -> None:
        self.calls.append((kind, status))


def adapter(
    url: str,
    recorder: Recorder,
    *,
    limits: RateLimits = UNLIMITED,
    retry: RetryRules = RULES,
) -> ApifyPlatform:
    return ApifyPlatform(
        url,
        TOKEN,
        start_timeout=timedelta(seconds=5),
        rate_limits=limits,
        retry=retry,
        observe=recorder.observe,
        sleep=recorder.sleep,
        now=lambda: NOW,
    )


def statuses(server: RunningEmulator, route: str) -> Any:
    return server.control("GET", "/stats")["data"]["routes"].get(route, 0)


def fault_429(server: RunningEmulator, path: str, method: str = "GET", **extra: Any) -> None:
    server.control("POST", "/faults/http", {"method": method, "path": path, "status": 429, **extra})


async def test_a_429_with_retry_after_seconds_is_waited_then_the_call_succeeds(
    server: RunningEmulator,
) -> None:
    recorder = Recorder()
    platform = adapter(server.url, recorder)
    run = await platform.start_run("ultron~generator", {"items": 1}, StartOptions())
    fault_429(server, "/v2/actor-runs/*", count=1, retryAfter=3)
    recorder.calls.clear()

    read = await platform.get_run(run.id)

    assert read is not None and read.id == run.id
    assert recorder.sleeps == [3.0]
    assert recorder.calls == [("status", "429"), ("status", "ok")]


async def test_a_retry_after_http_date_counts_from_now(server: RunningEmulator) -> None:
    recorder = Recorder()
    platform = adapter(server.url, recorder)
    run = await platform.start_run("ultron~generator", {"items": 1}, StartOptions())
    when = format_datetime(NOW + timedelta(seconds=7), usegmt=True)
    fault_429(server, "/v2/actor-runs/*", count=1, retryAfter=when)

    assert await platform.get_run(run.id) is not None
    assert recorder.sleeps == [7.0]


async def test_without_retry_after_it_backs_off_exponentially_from_500_ms(
    server: RunningEmulator,
) -> None:
    recorder = Recorder()
    platform = adapter(server.url, recorder)
    run = await platform.start_run("ultron~generator", {"items": 3}, StartOptions())
    await platform.get_run(run.id, wait_secs=30)
    fault_429(server, "/v2/datasets/*/items", count=3)

    rows = await platform.dataset_page(run.dataset_id, 0, 10)

    assert len(rows) == 3
    first, second, third = recorder.sleeps
    assert 0.5 <= first <= 1.0 and 1.0 <= second <= 2.0 and 2.0 <= third <= 4.0
    assert [status for _, status in recorder.calls[-4:]] == ["429", "429", "429", "ok"]


async def test_attempts_are_bounded_then_the_error_is_retryable(server: RunningEmulator) -> None:
    recorder = Recorder()
    platform = adapter(server.url, recorder, retry=replace(RULES, max_attempts=3))
    run = await platform.start_run("ultron~generator", {"items": 1}, StartOptions())
    fault_429(server, "/v2/actor-runs/*", count=None, retryAfter=2)
    recorder.calls.clear()

    with pytest.raises(PlatformError) as failed:
        await platform.get_run(run.id)

    assert failed.value.kind is ErrorKind.RETRYABLE and failed.value.status_code == 429
    assert failed.value.retry_after_seconds == 2.0
    assert recorder.sleeps == [2.0, 2.0] and len(recorder.calls) == 3


async def test_a_retry_after_over_the_cap_fails_at_once_carrying_the_wait(
    server: RunningEmulator,
) -> None:
    recorder = Recorder()
    platform = adapter(server.url, recorder, retry=replace(RULES, retry_after_max_seconds=10))
    run = await platform.start_run("ultron~generator", {"items": 1}, StartOptions())
    fault_429(server, "/v2/actor-runs/*/abort", method="POST", count=1, retryAfter=120)
    recorder.calls.clear()

    with pytest.raises(PlatformError) as failed:
        await platform.abort_run(run.id)

    assert failed.value.kind is ErrorKind.RETRYABLE
    assert failed.value.retry_after_seconds == 120.0
    assert recorder.sleeps == [] and recorder.calls == [("abort", "429")]


async def test_a_start_refused_with_429_is_not_resent_but_carries_its_retry_after(
    server: RunningEmulator,
) -> None:
    """Only the start activity resends a start (it first looks for a run a lost answer
    may have made); the Retry-After becomes that retry's delay."""
    recorder = Recorder()
    platform = adapter(server.url, recorder)
    server.control("POST", "/stats/reset")
    fault_429(server, "/v2/actors/*/runs", method="POST", count=1, retryAfter=4)

    with pytest.raises(PlatformError) as refused:
        await platform.start_run("ultron~generator", {"items": 1}, StartOptions())

    assert refused.value.kind is ErrorKind.RETRYABLE and refused.value.status_code == 429
    assert refused.value.retry_after_seconds == 4.0
    assert recorder.sleeps == [] and recorder.calls == [("start", "429")]
    stats = server.control("GET", "/stats")["data"]
    assert stats["routes"]["POST /v2/actors/{actorId}/runs"] == 1
    run = await platform.start_run("ultron~generator", {"items": 1}, StartOptions())
    assert (await platform.get_run(run.id)) is not None


async def test_a_start_answered_503_is_still_not_resent(server: RunningEmulator) -> None:
    recorder = Recorder()
    platform = adapter(server.url, recorder)
    server.control(
        "POST", "/faults/http", {"method": "POST", "path": "/v2/actors/*/runs", "status": 503}
    )
    with pytest.raises(PlatformError) as failed:
        await platform.start_run("ultron~generator", {"items": 1}, StartOptions())
    assert failed.value.kind is ErrorKind.RETRYABLE and failed.value.status_code == 503
    assert recorder.sleeps == [] and recorder.calls == [("start", "503")]


async def test_5xx_of_a_read_is_retried_with_backoff(server: RunningEmulator) -> None:
    recorder = Recorder()
    platform = adapter(server.url, recorder)
    run = await platform.start_run("ultron~generator", {"items": 1}, StartOptions())
    server.control("POST", "/faults/http", {"path": "/v2/actor-runs/*", "status": 502, "count": 2})
    recorder.calls.clear()
    assert await platform.get_run(run.id) is not None
    assert len(recorder.sleeps) == 2
    assert recorder.calls == [("status", "502"), ("status", "502"), ("status", "ok")]


# -- against an emulator that enforces a low per-resource limit ------------------------------


@pytest.fixture(scope="module")
def limited() -> Iterator[RunningEmulator]:
    running = start_emulator(make_config(rate_limit_rps=5))
    yield running
    running.stop()


async def burst_of_polls(platform: ApifyPlatform, run_id: str, n: int) -> list[Any]:
    return list(
        await asyncio.gather(*(platform.get_run(run_id) for _ in range(n)), return_exceptions=True)
    )


async def test_a_burst_of_polls_paced_by_the_adapter_gets_no_429(
    limited: RunningEmulator,
) -> None:
    paced = adapter(limited.url, Recorder(), limits=replace(UNLIMITED, per_resource=4))
    run = await paced.start_run("ultron~generator", {"hang": True}, StartOptions())
    limited.control("POST", "/stats/reset")

    answers = await burst_of_polls(paced, run.id, 12)

    assert all(getattr(a, "id", None) == run.id for a in answers), answers
    stats = limited.control("GET", "/stats")["data"]
    assert stats["routes"]["GET /v2/actor-runs/{runId}"] == 12
    assert stats["statuses"] == {"200": 12}  # not one 429

    # The same burst unpaced (and not retried) is refused: the limit is really there.
    unpaced = adapter(limited.url, Recorder(), retry=replace(RULES, max_attempts=1))
    limited.control("POST", "/stats/reset")
    answers = await burst_of_polls(unpaced, run.id, 12)
    refused = [a for a in answers if isinstance(a, PlatformError)]
    assert refused and all(a.status_code == 429 for a in refused)
    assert limited.control("GET", "/stats")["data"]["statuses"]["429"] == len(refused)
    await paced.abort_run(run.id)


async def test_the_emulators_own_retry_after_is_honoured(limited: RunningEmulator) -> None:
    limited.control("PUT", "/rate-limits", {"rps": 1, "retryAfterSecs": 1})
    try:
        # A real sleep: the emulator's window must actually pass before the retry.
        recorder = Recorder(real=True)
        platform = adapter(limited.url, recorder)
        run = await platform.start_run("ultron~generator", {"items": 1}, StartOptions())
        limited.control("POST", "/stats/reset")

        answers = await burst_of_polls(platform, run.id, 2)

        assert all(getattr(a, "id", None) == run.id for a in answers), answers
        assert 1.0 in recorder.sleeps and set(recorder.sleeps) == {1.0}
        assert ("status", "429") in recorder.calls
    finally:
        limited.control("POST", "/reset", {"runs": False, "faults": False, "stats": False})
    assert limited.control("GET", "/rate-limits")["data"] == {
        "rps": 5,
        "startRps": 400,
        "retryAfterSecs": 0,
    }


# -- the emulator alone ----------------------------------------------------------------------


async def test_retry_after_is_off_by_default_and_sent_when_configured() -> None:
    for cfg, expected in (
        (make_config(rate_limit_rps=1), None),
        (make_config(rate_limit_rps=1, rate_limit_retry_after_secs=2), "2"),
    ):
        async with local(cfg) as http:
            answers = [await http.get("/v2/actor-runs/noSuchRun12345678") for _ in range(3)]
            limited = [a for a in answers if a.status_code == 429]
            assert limited, [a.status_code for a in answers]
            assert limited[0].headers.get("retry-after") == expected
            assert limited[0].headers["x-ratelimit-limit"] == "1"


async def test_http_faults_carry_a_retry_after_and_bad_ones_are_refused() -> None:
    async with local(make_config()) as http:
        added = await http.post(
            "/_emulator/faults/http",
            json={"path": "/v2/actor-runs/*", "status": 429, "retryAfter": 4},
        )
        assert added.status_code == 201 and added.json()["data"]["retryAfter"] == 4
        answer = await http.get("/v2/actor-runs/noSuchRun12345678")
        assert answer.status_code == 429 and answer.headers["retry-after"] == "4"
        assert answer.json()["error"]["type"] == "rate-limit-exceeded"
        for bad in (-1, 1.5, True, "", "a\r\nX-Evil: 1"):
            refused = await http.post(
                "/_emulator/faults/http", json={"status": 429, "retryAfter": bad}
            )
            assert refused.status_code == 400, bad
        for bad_limits in ({"rps": -1}, {"startRps": "many"}, {"retryAfterSecs": 0.5}):
            refused = await http.put("/_emulator/rate-limits", json=bad_limits)
            assert refused.status_code == 400, bad_limits


async def test_rate_limits_can_be_changed_at_run_time() -> None:
    async with local(make_config(rate_limit_rps=0)) as http:
        assert (await http.get("/_emulator/rate-limits")).json()["data"]["rps"] == 0
        changed = await http.put("/_emulator/rate-limits", json={"rps": 2})
        assert changed.json()["data"] == {"rps": 2, "startRps": 400, "retryAfterSecs": 0}
        answers = [await http.get("/v2/actor-runs/noSuchRun12345678") for _ in range(4)]
        assert 429 in [a.status_code for a in answers]


def test_retry_after_is_set_by_env_or_flag() -> None:
    cfg = EmulatorConfig.from_env({"APIFY_EMULATOR_RATE_LIMIT_RETRY_AFTER_SECS": "3"})
    assert cfg.rate_limit_retry_after_secs == 3
    args = parse_args(["--rate-limit-retry-after-secs", "2"])
    assert args.rate_limit_retry_after_secs == 2
    assert EmulatorConfig().rate_limit_retry_after_secs == 0  # off: faithful to the docs
