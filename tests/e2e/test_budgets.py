"""Budgets end to end (issue 11, points 4, 5 and 7), on the emulator over real HTTP: a
pay-per-result actor is not stopped by the platform at its share, so the orchestrator
stops it when the request's (or the workspace's) budget is spent, keeps its rows, and
refuses the workspace's next request while its limit is spent."""

from __future__ import annotations

import math
import secrets
from typing import Any

import httpx
import pytest

from orchestrator.cli.devstack import DevStack
from tests.support.waiting import eventually

from .conftest import DATABASES, stack_on
from .support import (
    all_items,
    api_client,
    emulator_client,
    event_kinds,
    settled_run,
    submit,
)

pytestmark = pytest.mark.e2e

# $0.002 per row on the emulator; 400 rows over 40 emulated seconds (8 s at the e2e scale).
DOMAINS = [f"site{i}.example" for i in range(400)]
TRAFFIC = {"actor": "ultron-similarweb-bulk", "input": {"domains": DOMAINS, "durationSecs": 40}}


def workspace() -> str:
    return f"ws_e2e_budget_{secrets.token_hex(4)}"


def assert_stopped_by_budget(
    api: httpx.Client, emulator: httpx.Client, run: dict[str, Any], limit: float
) -> None:
    assert run["state"] == "aborted" and run["stopReason"] == "budget-exhausted", run
    (child,) = run["children"]
    assert child["state"] == "aborted" and child["partial"] is True
    assert child["statusMessage"].startswith("stopped:")
    assert 0 < child["itemsIngested"] < len(DOMAINS)
    platform_run = emulator.get(f"/v2/actor-runs/{child['platformRunId']}").json()["data"]
    assert platform_run["status"] == "ABORTED"
    # Every row once, and the spend is the platform's final figure.
    items = all_items(api, run["id"])
    assert sorted(i["itemIndex"] for i in items) == list(range(child["itemsIngested"]))
    assert child["usageTotalUsd"] == platform_run["usageTotalUsd"]
    assert run["usageTotalUsd"] == pytest.approx(math.fsum([child["usageTotalUsd"]]))
    assert run["usageTotalUsd"] >= limit
    assert event_kinds(api, run["id"])["run.budget_exhausted"] == 1


@DATABASES
def test_a_request_is_stopped_when_its_budget_is_spent(
    request: pytest.FixtureRequest, database: str
) -> None:
    stack = stack_on(request, database)
    with api_client(stack) as api, emulator_client(stack) as emulator:
        run_id = submit(api, {"workspaceId": workspace(), "runs": [TRAFFIC], "budgetUsd": 0.05})
        run = settled_run(api, run_id)
        assert "request's budget of $0.050000 is spent" in run["stopMessage"]
        assert_stopped_by_budget(api, emulator, run, 0.05)


@DATABASES
def test_a_workspace_over_its_limit_is_stopped_and_then_refused(
    request: pytest.FixtureRequest, database: str
) -> None:
    stack = stack_on(request, database)
    ws = workspace()
    with api_client(stack) as api, emulator_client(stack) as emulator:
        limit = api.put(f"/workspaces/{ws}/budget", json={"limitUsd": 0.04, "period": "day"})
        assert limit.status_code == 200, limit.text
        run_id = submit(api, {"workspaceId": ws, "runs": [TRAFFIC]})
        run = settled_run(api, run_id)
        assert f"workspace {ws}'s daily budget of $0.04 is spent" in run["stopMessage"]
        assert_stopped_by_budget(api, emulator, run, 0.04)

        refused = api.post("/runs", json={"workspaceId": ws, "runs": [TRAFFIC]})
        assert refused.status_code == 402, refused.text
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert refused.json()["code"] == "budget-exhausted"
        listed = api.get("/runs", params={"workspaceId": ws}).json()["runs"]
        assert [r["id"] for r in listed] == [run_id], "the refused request was stored"
        assert api.get(f"/workspaces/{ws}/budget").json()["exhausted"] is True


def test_a_worker_killed_as_the_budget_runs_out_leaves_nothing_running(
    stack: DevStack,
) -> None:
    """Point 7: the worker is killed the moment the stop is recorded (the abort cascade is
    under way or about to be); the next worker finishes it: no run left running, every row
    once, the spend the sum of the children's final figures."""
    ws = workspace()
    # Runs far longer than the worker's restart, so they are still live when it is back.
    slow = {**TRAFFIC, "input": {"domains": DOMAINS, "durationSecs": 400}}
    body = {"workspaceId": ws, "runs": [slow, slow], "budgetUsd": 0.06}
    with api_client(stack) as api, emulator_client(stack) as emulator:
        run_id = submit(api, body)
        eventually(
            lambda: api.get(f"/runs/{run_id}").json()["stopReason"] is not None,
            timeout=60,
            interval=0.05,
            description="the budget to run out",
        )
        stack.kill("worker")
        stack.start_component("worker")
        run = settled_run(api, run_id, timeout=150)
        assert run["stopReason"] == "budget-exhausted"
        assert run["state"] == "aborted"
        for child in run["children"]:
            assert child["state"] == "aborted"
            status = emulator.get(f"/v2/actor-runs/{child['platformRunId']}").json()["data"]
            assert status["status"] == "ABORTED", "a run kept running after the budget ran out"
            assert child["usageTotalUsd"] == status["usageTotalUsd"]
        items = all_items(api, run_id)
        keys = {(i["childId"], i["itemIndex"]) for i in items}
        assert len(keys) == len(items) == run["itemsTotal"]
        assert run["usageTotalUsd"] == pytest.approx(
            math.fsum(c["usageTotalUsd"] for c in run["children"])
        )
        assert event_kinds(api, run_id)["run.budget_exhausted"] == 1
