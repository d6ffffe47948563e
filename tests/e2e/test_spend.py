"""Spend end to end: a pay-per-event actor (leadgen) and a pay-per-result one (similarweb)
on the emulator; the orchestrator's settled figures are the platform's final ones."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orchestrator.cli.devstack import DevStack

from .support import (
    api_client,
    emulator_client,
    event_kinds,
    settled_run,
    submit,
    wait_terminal,
)

pytestmark = pytest.mark.e2e

WORKSPACE = "ws_e2e_spend"


def test_each_childs_settled_cost_is_the_platforms_and_the_request_sums_them(
    stack: DevStack,
) -> None:
    body = {
        "workspaceId": WORKSPACE,
        "runs": [
            {"actor": "ultron-leadgen", "input": {"brief": {"targetCount": 12}}},
            {
                "actor": "ultron-similarweb-bulk",
                "input": {"domains": ["example.com", "example.org", "example.net"]},
            },
        ],
    }
    with api_client(stack) as api, emulator_client(stack) as emulator:
        run_id = submit(api, body)
        assert wait_terminal(api, run_id)["state"] == "succeeded"
        run = settled_run(api, run_id)
        platform_figures: list[float] = []
        for child in run["children"]:
            platform_run = emulator.get(f"/v2/actor-runs/{child['platformRunId']}").json()["data"]
            # The emulator's figure is final from finishedAt + its usage lag, which settling
            # waited for: it is what the platform bills.
            assert child["usageSettled"] is True
            assert child["usageTotalUsd"] == platform_run["usageTotalUsd"], child["actor"]
            assert child["chargedEventCounts"] == platform_run.get("chargedEventCounts", {})
            assert child["usageTotalUsd"] > 0
            platform_figures.append(platform_run["usageTotalUsd"])
        leadgen, similarweb = run["children"]
        assert leadgen["chargedEventCounts"]["lead"] == 12  # pay per event: one per row
        assert similarweb["chargedEventCounts"] == {}  # pay per result: no events
        assert run["usageTotalUsd"] == pytest.approx(sum(platform_figures))

        assert event_kinds(api, run_id)["child.usage_settled"] == 2
        today = datetime.now(UTC).date().isoformat()
        report = api.get(
            f"/workspaces/{WORKSPACE}/usage", params={"from": today, "to": today}
        ).json()
        (day,) = report["days"]
        by_actor = {a["actor"]: a for a in day["actors"]}
        assert by_actor["ultron-leadgen"]["usageTotalUsd"] >= leadgen["usageTotalUsd"]
        assert by_actor["ultron-similarweb-bulk"]["usageTotalUsd"] >= similarweb["usageTotalUsd"]
