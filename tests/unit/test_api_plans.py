"""Briefs planned and run through the API (issue 12, points 2 and 4): ``POST /plans``,
``GET /plans/{id}``, ``POST /runs`` with ``planId`` or with a brief, the plan on
``GET /runs/{id}``, and the refusals; on SQLite and PostgreSQL."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from orchestrator.db.queries import registry
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.schema import plans
from tests.unit.api_harness import Api, api_for

BRIEF = {"product": "B2B payroll software", "targetCount": 30}
ICP = {"titles": ["HR Director"], "regions": ["Europe"]}


@pytest.fixture
async def api(engine: Engine) -> AsyncIterator[Api]:
    async with api_for(engine) as a:
        yield a


def plan_body(**extra: Any) -> dict[str, Any]:
    return {"needs": ["leads", "web-traffic"], "brief": BRIEF, "icp": ICP, **extra}


def plans_of(api: Api, workspace: str) -> int:
    with api.engine.connect() as conn:
        query = select(func.count()).select_from(plans).where(plans.c.workspace_id == workspace)
        return int(conn.execute(query).scalar_one())


async def test_a_brief_is_planned_with_its_chain_cost_and_reasons(api: Api) -> None:
    ws = f"ws_{secrets.token_hex(4)}"
    key, _ = api.workspace_key(ws)
    created = await api.client.post("/plans", json=plan_body(budgetUsd=2), headers=api.auth(key))
    assert created.status_code == 201, created.text
    plan = created.json()
    assert plan["planId"].startswith("plan_") and plan["workspaceId"] == ws
    assert created.headers["location"] == f"/plans/{plan['planId']}"
    leads, traffic = plan["steps"]
    assert (leads["actor"], leads["need"], leads["input"]) == (
        "ultron-leadgen",
        "leads",
        {"brief": BRIEF, "icp": ICP},
    )
    assert leads["expectedRows"] == 30
    assert leads["estimatedCostUsd"] == pytest.approx(0.00005 + 30 * 0.01)
    assert traffic["inputFrom"] == {
        "domains": {"run": 0, "field": "domain", "distinct": True, "max": 500}
    }
    assert traffic["dependsOn"] == [0] and traffic["expectedRows"] == 30
    assert plan["estimatedCostUsd"] == pytest.approx(0.30005 + 30 * 0.002)
    assert plan["budgetUsd"] == 2 and plan["strategy"] == "catalog"
    assert "the only catalog actor" in leads["why"]
    got = await api.client.get(f"/plans/{plan['planId']}", headers=api.auth(key))
    assert got.status_code == 200 and got.json() == plan
    # Another workspace's key does not see it.
    other, _ = api.workspace_key(f"ws_{secrets.token_hex(4)}")
    hidden = await api.client.get(f"/plans/{plan['planId']}", headers=api.auth(other))
    assert hidden.status_code == 404
    assert api.temporal.started == [], "planning started something"


async def test_a_need_that_cannot_be_met_is_a_422_naming_it(api: Api) -> None:
    key, _ = api.workspace_key(f"ws_{secrets.token_hex(4)}")
    refused = await api.client.post(
        "/plans", json={"needs": ["web-traffic"], "brief": {"x": 1}}, headers=api.auth(key)
    )
    assert refused.status_code == 422, refused.text
    problem = refused.json()
    assert problem["field"] == "/needs/0"
    assert "brief.domains is not in the brief" in problem["detail"]
    unknown = await api.client.post(
        "/plans", json={"needs": ["telepathy"], "brief": {}}, headers=api.auth(key)
    )
    assert unknown.json()["field"] == "/needs/0" and "known:" in unknown.json()["detail"]


async def test_a_reviewed_plan_runs_as_its_steps_and_the_run_shows_it(api: Api) -> None:
    ws = f"ws_{secrets.token_hex(4)}"
    key, _ = api.workspace_key(ws)
    plan = (await api.client.post("/plans", json=plan_body(), headers=api.auth(key))).json()
    created = await api.client.post("/runs", json={"planId": plan["planId"]}, headers=api.auth(key))
    assert created.status_code == 202, created.text
    run_id = created.json()["runId"]
    with api.engine.connect() as conn:
        leads, traffic = run_queries.get_children(conn, run_id)
    assert (leads.actor, traffic.actor) == ("ultron-leadgen", "ultron-similarweb-bulk")
    assert leads.input == {"brief": BRIEF, "icp": ICP}
    assert traffic.input_from is not None and traffic.input_from["domains"]["run"] == 0
    view = (await api.client.get(f"/runs/{run_id}", headers=api.auth(key))).json()
    assert view["planId"] == plan["planId"]
    assert view["plan"]["steps"][1]["actor"] == view["children"][1]["actor"]


async def test_a_plan_older_than_the_catalog_is_refused_with_409(api: Api) -> None:
    key, _ = api.workspace_key(f"ws_{secrets.token_hex(4)}")
    plan = (await api.client.post("/plans", json=plan_body(), headers=api.auth(key))).json()
    with api.engine.begin() as conn:
        entry = registry.get_actor(conn, "ultron-leadgen")
        assert entry is not None
        registry.save_actor(conn, "ultron-leadgen", entry.model_copy(update={"description": "v2"}))
    before = api.counts()
    refused = await api.client.post("/runs", json={"planId": plan["planId"]}, headers=api.auth(key))
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "plan-outdated" and refused.json()["field"] == "/planId"
    assert api.counts() == before
    missing = await api.client.post(
        "/runs", json={"planId": "plan_" + "0" * 20}, headers=api.auth(key)
    )
    assert missing.status_code == 404


async def test_a_brief_in_post_runs_is_planned_stored_and_run_once(api: Api) -> None:
    ws = f"ws_{secrets.token_hex(4)}"
    key, _ = api.workspace_key(ws)
    headers = {**api.auth(key), "Idempotency-Key": "brief-1"}
    body = {**plan_body(), "budgetUsd": 1.5, "limits": {"maxItemsPerStep": 20}}
    first = await api.client.post("/runs", json=body, headers=headers)
    assert first.status_code == 202, first.text
    again = await api.client.post("/runs", json=body, headers=headers)
    assert again.json()["runId"] == first.json()["runId"]
    assert again.headers.get("idempotent-replayed") == "true"
    assert plans_of(api, ws) == 1, "a retried brief stored a second plan"
    view = (await api.client.get(f"/runs/{first.json()['runId']}", headers=api.auth(key))).json()
    assert view["plan"]["needs"] == ["leads", "web-traffic"]
    assert view["budgetUsd"] == 1.5
    assert [c["actor"] for c in view["children"]] == ["ultron-leadgen", "ultron-similarweb-bulk"]
    with api.engine.connect() as conn:
        children = run_queries.get_children(conn, first.json()["runId"])
    assert [c.options.get("maxItems") for c in children] == [20, 20]


@pytest.mark.parametrize(
    ("body", "what"),
    [
        ({}, "exactly one of"),
        ({"runs": [{"actor": "ultron-generator"}], "planId": "plan_" + "0" * 20}, "exactly one"),
        ({"needs": ["leads"]}, "go together"),
        ({"brief": {"x": 1}}, "exactly one of"),
        ({"runs": [{"actor": "ultron-generator"}], "icp": {}}, "go with"),
    ],
)
async def test_post_runs_takes_one_way_to_say_what_to_run(
    api: Api, body: dict[str, Any], what: str
) -> None:
    key, _ = api.workspace_key(f"ws_{secrets.token_hex(4)}")
    before = api.counts()
    refused = await api.client.post("/runs", json=body, headers=api.auth(key))
    assert refused.status_code == 422, refused.text
    assert what in refused.text
    assert api.counts() == before
