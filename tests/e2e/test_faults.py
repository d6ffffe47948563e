"""Platform and process faults against the emulator: nothing lost, nothing duplicated."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from orchestrator.cli.devstack import DevStack
from tests.support.waiting import eventually

from .support import (
    all_items,
    api_client,
    event_kinds,
    generator,
    platform_run_count,
    request,
    submit,
    wait_terminal,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def api(stack: DevStack) -> Iterator[httpx.Client]:
    with api_client(stack) as client:
        yield client


def add_fault(emulator: httpx.Client, kind: str, **rule: object) -> None:
    emulator.post(f"/_emulator/faults/{kind}", json=rule).raise_for_status()


def test_429_5xx_and_network_errors_are_retried(api: httpx.Client, emulator: httpx.Client) -> None:
    add_fault(emulator, "http", method="POST", path="/v2/actors/*/runs", status=429, count=2)
    add_fault(emulator, "http", method="GET", path="/v2/actor-runs/*", status=503, count=3)
    add_fault(emulator, "http", method="GET", path="/v2/datasets/*/items", status=500, count=2)
    before = platform_run_count(emulator)
    run_id = submit(api, request(generator(items=2500, durationSecs=2)))
    run = wait_terminal(api, run_id)
    assert run["state"] == "succeeded"
    assert run["itemsTotal"] == 2500
    items = all_items(api, run_id)
    assert len({(i["childId"], i["itemIndex"]) for i in items}) == 2500
    assert event_kinds(api, run_id)["child.spawn_error"] == 2
    assert platform_run_count(emulator) - before == 1


@pytest.mark.parametrize("mode", ["close", "hang"])
def test_a_lost_start_answer_never_starts_a_second_run(
    api: httpx.Client, emulator: httpx.Client, mode: str
) -> None:
    add_fault(emulator, "lost-start", count=1, mode=mode)
    before = platform_run_count(emulator)
    run_id = submit(api, request(generator(items=30, durationSecs=2)))
    run = wait_terminal(api, run_id)
    assert run["state"] == "succeeded"
    assert run["itemsTotal"] == 30
    kinds = event_kinds(api, run_id)
    assert kinds["child.spawn_recovered"] == 1
    assert platform_run_count(emulator) - before == 1, "the platform started a second run"


def test_other_4xx_fail_that_child_at_once_and_spare_its_siblings(
    api: httpx.Client, emulator: httpx.Client
) -> None:
    # A refusal the API cannot foresee (options it could, and refuses with a 422 itself).
    add_fault(
        emulator,
        "http",
        method="POST",
        path="/v2/act*/*leadgen/runs",
        status=400,
        errorType="invalid-input",
        message="Input is not valid: icp is required",
    )
    bad = {"actor": "ultron-leadgen", "input": {"brief": "b"}}
    run_id = submit(api, request(bad, generator(items=4, durationSecs=1)))
    run = wait_terminal(api, run_id)
    assert run["state"] == "partial"
    refused, fine = run["children"]
    assert refused["state"] == "failed"
    assert "icp is required" in refused["statusMessage"]
    assert fine["state"] == "succeeded" and fine["itemsIngested"] == 4
    kinds = event_kinds(api, run_id)
    assert kinds["child.spawn_attempt"] == 2  # one each: the refused start was not retried


def test_capacity_errors_wait_and_retry(api: httpx.Client, emulator: httpx.Client) -> None:
    add_fault(
        emulator,
        "http",
        method="POST",
        path="/v2/actors/*/runs",
        status=402,
        errorType="actor-memory-limit-exceeded",
        message="By launching this job you will exceed the memory limit of 8192MB",
        count=2,
    )
    run_id = submit(api, request(generator(items=10, durationSecs=1)))
    run = wait_terminal(api, run_id)
    assert run["state"] == "succeeded"
    assert event_kinds(api, run_id)["child.spawn_error"] == 2


def test_platform_statuses_end_children_with_the_platform_message(api: httpx.Client) -> None:
    run_id = submit(
        api,
        request(
            generator(items=2, finalStatus="TIMED-OUT", failureMessage="Actor timed out"),
            generator(items=2, finalStatus="ABORTED", failureMessage="Actor was aborted"),
            generator(items=2, finalStatus="FAILED", failureMessage="Actor crashed"),
        ),
    )
    run = wait_terminal(api, run_id)
    timed_out, aborted, failed = run["children"]
    assert (timed_out["state"], timed_out["platformStatus"]) == ("failed", "TIMED-OUT")
    assert timed_out["statusMessage"] == "Actor timed out"
    assert (aborted["state"], aborted["platformStatus"]) == ("aborted", "ABORTED")
    assert (failed["state"], failed["statusMessage"]) == ("failed", "Actor crashed")
    assert run["state"] == "failed"


def test_abort_ends_the_request_aborted_and_aborts_platform_runs(
    api: httpx.Client, emulator: httpx.Client
) -> None:
    run_id = submit(api, request(generator(items=5, hang=True), generator(items=5, hang=True)))
    eventually(
        lambda: all(c["state"] == "running" for c in api.get(f"/runs/{run_id}").json()["children"])
    )
    answer = api.post(f"/runs/{run_id}/abort")
    assert answer.status_code == 202
    run = wait_terminal(api, run_id)
    assert run["state"] == "aborted"
    for child in run["children"]:
        assert child["state"] == "aborted"
        platform = emulator.get(f"/v2/actor-runs/{child['platformRunId']}").json()["data"]
        assert platform["status"] == "ABORTED"
    again = api.post(f"/runs/{run_id}/abort")
    assert again.status_code == 200
    assert again.json()["aborting"] is False and "already ended" in again.json()["detail"]


def test_a_run_that_never_reaches_a_final_status_times_out_at_its_cap(
    api: httpx.Client, emulator: httpx.Client
) -> None:
    # The stack's grace is 2 s: the cap is timeoutSec + 2 s. A "stuck" run ignores its
    # platform timeout, so only our backstop can end it.
    run_id = submit(api, request(generator(items=1, stuck=True) | {"options": {"timeoutSec": 2}}))
    run = wait_terminal(api, run_id, timeout=60)
    assert run["state"] == "timed_out"
    (child,) = run["children"]
    assert child["state"] == "timed_out"
    assert "no final status" in child["statusMessage"]
    # We stop watching it, so it is aborted rather than left running (and billed).
    assert child["platformStatus"] == "ABORTED"
    platform = emulator.get(f"/v2/actor-runs/{child['platformRunId']}").json()["data"]
    assert platform["status"] == "ABORTED"
    assert event_kinds(api, run_id)["child.abort"] == 1
