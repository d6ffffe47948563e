"""The orchestrator's platform adapter (on apify-client) against the emulator: they agree."""

from __future__ import annotations

import json

import httpx
import pytest

from orchestrator.config.settings import Settings
from orchestrator.platform.apify import ApifyPlatform
from orchestrator.platform.port import ErrorKind, PlatformError, RunWebhook, StartOptions
from orchestrator.worker import build_platform

from .conftest import AUTH, TOKEN, RunningEmulator


@pytest.fixture
def platform(server: RunningEmulator) -> ApifyPlatform:
    # Built as the worker builds it, with the settings' rate limits and retry rules.
    settings = Settings(
        apify_api_url=server.url, apify_token=TOKEN, platform_start_timeout_seconds=5
    )
    built = build_platform(settings)
    assert isinstance(built, ApifyPlatform)
    return built


def status_reads(server: RunningEmulator) -> int:
    stats = server.control("GET", "/stats")["data"]
    return int(stats["routes"].get("GET /v2/actor-runs/{runId}", 0))


async def test_start_long_poll_and_read_pages_as_json_lines(
    server: RunningEmulator, platform: ApifyPlatform
) -> None:
    hook = RunWebhook(
        event_types=["ACTOR.RUN.SUCCEEDED"],
        request_url="http://127.0.0.1:9/webhooks/platform?child=run_adapter.0",
        headers={"X-Orchestrator-Webhook-Token": "t"},
        idempotency_key="orchestrator:run_adapter.0",
    )
    # 40 scripted seconds are 2 s at the test time scale.
    run = await platform.start_run(
        "ultron~generator",
        {"items": 2_345, "durationSecs": 40},
        StartOptions(memory_mb=256, timeout_sec=600),
        [hook],
    )
    assert run.status in ("READY", "RUNNING")
    server.control("POST", "/stats/reset")
    finished = await platform.get_run(run.id, wait_secs=30)
    assert finished is not None and finished.status == "SUCCEEDED"
    assert status_reads(server) == 1, "a long poll must be one call"

    pages = [
        await platform.dataset_page(run.dataset_id, offset, 1_000) for offset in (0, 1_000, 2_000)
    ]
    assert [len(p) for p in pages] == [1_000, 1_000, 345]
    rows = [json.loads(text) for page in pages for text in page]
    assert len(rows) == 2_345 and all(isinstance(r, dict) for r in rows)

    found = await platform.find_run_by_webhook_url("child=run_adapter.0")
    assert found is not None and found.id == run.id
    assert await platform.find_run_by_webhook_url("child=nobody") is None


async def test_missing_runs_and_refusals_map_to_the_domain(platform: ApifyPlatform) -> None:
    assert await platform.get_run("noSuchRun12345678") is None
    assert await platform.get_run("noSuchRun12345678", wait_secs=2) is None
    assert await platform.abort_run("noSuchRun12345678") is None
    with pytest.raises(PlatformError) as refused:
        await platform.start_run("ultron~generator", {}, StartOptions(memory_mb=1000))
    assert refused.value.kind is ErrorKind.PERMANENT and refused.value.status_code == 400
    with pytest.raises(PlatformError) as unknown:
        await platform.start_run("ultron~no-such-actor", {}, StartOptions())
    assert unknown.value.kind is ErrorKind.PERMANENT and unknown.value.status_code == 404


async def test_capacity_and_transient_errors_are_classified(
    server: RunningEmulator, platform: ApifyPlatform
) -> None:
    server.control(
        "POST",
        "/faults/http",
        {
            "method": "POST",
            "path": "/v2/actors/*/runs",
            "status": 402,
            "errorType": "concurrent-runs-limit-exceeded",
            "count": 1,
        },
    )
    with pytest.raises(PlatformError) as capacity:
        await platform.start_run("ultron~generator", {"items": 1}, StartOptions())
    assert capacity.value.kind is ErrorKind.CAPACITY
    # Starts are never retried by the HTTP client (a retried start could run twice).
    server.control(
        "POST", "/faults/http", {"method": "POST", "path": "/v2/actors/*/runs", "status": 503}
    )
    with pytest.raises(PlatformError) as transient:
        await platform.start_run("ultron~generator", {"items": 1}, StartOptions())
    assert transient.value.kind is ErrorKind.RETRYABLE


async def test_abort_of_a_running_run(platform: ApifyPlatform) -> None:
    run = await platform.start_run("ultron~generator", {"hang": True}, StartOptions())
    aborted = await platform.abort_run(run.id)
    assert aborted is not None and aborted.status in ("ABORTING", "ABORTED")
    final = await platform.get_run(run.id, wait_secs=10)
    assert final is not None and final.status == "ABORTED"


async def test_charge_and_item_caps_reach_the_platform_run(
    server: RunningEmulator, platform: ApifyPlatform
) -> None:
    """``maxItems`` and ``maxTotalChargeUsd`` are sent as Apify's query parameters of the
    same names; the pay-per-event leadgen stops at its charge cap."""
    run = await platform.start_run(
        "ultron~leadgen",
        {"brief": {"product": "payroll", "targetCount": 40}},
        StartOptions(memory_mb=1024, max_items=30, max_total_charge_usd=0.1),
    )
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as http:
        options = (await http.get(f"/v2/actor-runs/{run.id}")).json()["data"]["options"]
    assert options["maxItems"] == 30 and options["maxTotalChargeUsd"] == 0.1
    finished = await platform.get_run(run.id, wait_secs=30)
    assert finished is not None and finished.status in ("ABORTED", "SUCCEEDED")
    rows = await platform.dataset_page(run.dataset_id, 0, 100)
    assert 0 < len(rows) < 30  # $0.01 a lead: the $0.10 cap ends it before maxItems


async def test_account_limits_through_the_official_client(
    server: RunningEmulator, platform: ApifyPlatform
) -> None:
    run = await platform.start_run(
        "ultron~generator", {"items": 1, "durationSecs": 600}, StartOptions(memory_mb=512)
    )
    limits = await platform.account_limits()
    # The emulator's defaults (32 runs, 64 GB), in MB; our run counts as active.
    assert (limits.max_concurrent_runs, limits.max_memory_mb) == (32, 65536)
    assert limits.active_runs >= 1 and limits.active_memory_mb >= 512
    await platform.abort_run(run.id)
