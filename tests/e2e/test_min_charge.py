"""A budget split at the platform's minimum charge, end to end on the emulator: the
pay-per-event child's share is exactly its actor's ``minimalMaxTotalChargeUsd``, which the
platform accepts, and the request runs to success. (An equal split, 0.015 USD each, would
be below leadgen's minimum of 0.02 USD and its start refused with
``max-total-charge-usd-below-minimum``.)"""

from __future__ import annotations

import pytest

from orchestrator.cli.devstack import DevStack

from .support import all_items, api_client, emulator_client, submit, wait_terminal

pytestmark = pytest.mark.e2e


def test_a_budget_share_at_the_minimum_charge_starts_and_runs(stack: DevStack) -> None:
    body = {
        "workspaceId": "ws_e2e_min_charge",
        "budgetUsd": 0.03,
        "runs": [
            {"actor": "ultron-leadgen", "input": {"brief": {"targetCount": 1}}},
            {"actor": "ultron-similarweb-bulk", "input": {"domains": ["example.com"]}},
        ],
    }
    with api_client(stack) as api, emulator_client(stack) as emulator:
        run_id = submit(api, body)
        run = wait_terminal(api, run_id)
        assert run["state"] == "succeeded", run
        leadgen, similarweb = run["children"]
        platform = emulator.get(f"/v2/actor-runs/{leadgen['platformRunId']}").json()["data"]
        assert platform["pricingInfo"]["minimalMaxTotalChargeUsd"] == 0.02
        assert platform["options"]["maxTotalChargeUsd"] == 0.02  # its share: the minimum
        assert platform["status"] == "SUCCEEDED"
        other = emulator.get(f"/v2/actor-runs/{similarweb['platformRunId']}").json()["data"]
        assert other["options"]["maxTotalChargeUsd"] == 0.01  # the rest of the budget
        assert len(all_items(api, run_id)) == 2
