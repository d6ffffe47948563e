"""From a brief to rows (issue 12, points 2 and 4), over real HTTP on the emulator, on
SQLite and PostgreSQL: plan a brief, run the reviewed plan, and run a brief directly;
the leads' distinct domains feed the web-traffic step."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from .conftest import DATABASES, stack_on
from .support import all_items, api_client, submit, wait_terminal

pytestmark = pytest.mark.e2e

BRIEF = {"product": "B2B payroll software", "targetCount": 12}
ICP = {"industries": ["Logistics"], "titles": ["HR Director"], "regions": ["Europe"]}


def needs_body(workspace: str, **extra: Any) -> dict[str, Any]:
    return {
        "workspaceId": workspace,
        "needs": ["leads", "web-traffic"],
        "brief": BRIEF,
        "icp": ICP,
        **extra,
    }


def assert_chained_rows(items: list[dict[str, Any]], run: dict[str, Any]) -> None:
    leads_child, traffic_child = run["children"]
    leads = [i for i in items if i["childId"] == leads_child["id"]]
    traffic = [i for i in items if i["childId"] == traffic_child["id"]]
    assert len(leads) == 12 and leads_child["actor"] == "ultron-leadgen"
    domains = list(dict.fromkeys(i["data"]["domain"] for i in leads))
    assert traffic_child["inputBuilt"] == {"domains": len(domains)}
    assert sorted(i["data"]["domain"] for i in traffic) == sorted(domains)


@DATABASES
def test_a_reviewed_plan_runs_and_its_chain_feeds_the_domains(
    request: pytest.FixtureRequest, database: str
) -> None:
    stack = stack_on(request, database)
    ws = f"ws_e2e_plan_{secrets.token_hex(4)}"
    with api_client(stack) as api:
        planned = api.post("/plans", json=needs_body(ws, budgetUsd=1))
        assert planned.status_code == 201, planned.text
        plan = planned.json()
        assert [s["actor"] for s in plan["steps"]] == ["ultron-leadgen", "ultron-similarweb-bulk"]
        assert plan["estimatedCostUsd"] == pytest.approx(0.00005 + 12 * 0.01 + 12 * 0.002)
        run_id = submit(api, {"workspaceId": ws, "planId": plan["planId"]})
        run = wait_terminal(api, run_id, timeout=120)
        assert run["state"] == "succeeded", run
        assert run["planId"] == plan["planId"] and run["plan"]["steps"] == plan["steps"]
        assert run["budgetUsd"] == 1
        assert_chained_rows(all_items(api, run_id), run)


def test_a_brief_in_post_runs_is_planned_and_run(request: pytest.FixtureRequest) -> None:
    stack = stack_on(request, "sqlite")
    ws = f"ws_e2e_brief_{secrets.token_hex(4)}"
    with api_client(stack) as api:
        run_id = submit(api, needs_body(ws))
        run = wait_terminal(api, run_id, timeout=120)
        assert run["state"] == "succeeded", run
        assert run["plan"]["needs"] == ["leads", "web-traffic"]
        assert_chained_rows(all_items(api, run_id), run)
        refused = api.post("/plans", json={**needs_body(ws), "needs": ["web-traffic"]})
        assert refused.status_code == 422 and refused.json()["field"] == "/needs/0"
