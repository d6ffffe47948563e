"""The platform's minimum charge at submission, through the API on SQLite and PostgreSQL: a
child's charge limit below its actor's minimum and a budget below the children's minimums
are 422s naming the field, with nothing stored or started; a budget is split so no child is
given less than its minimum."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import Engine

from orchestrator.db.queries import registry
from orchestrator.db.queries import runs as run_queries
from tests.unit.api_harness import Api, api_for

LEADGEN = {"actor": "ultron-leadgen", "input": {"brief": "b"}}  # minimum 0.02 USD (bundled)
GENERATOR = {"actor": "ultron-generator"}  # FREE: no minimum
SIMILARWEB = {"actor": "ultron-similarweb-bulk"}  # pay per result: no minimum


@pytest.fixture
async def api(engine: Engine) -> AsyncIterator[Api]:
    async with api_for(engine) as a:
        yield a


def request(*runs: dict[str, Any], budget: float | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"workspaceId": "ws_min", "runs": list(runs)}
    if budget is not None:
        body["budgetUsd"] = budget
    return body


def refused(response: Any, field: str) -> dict[str, Any]:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem: dict[str, Any] = response.json()
    assert problem["code"] == "validation-failed" and problem["field"] == field
    return problem


async def test_a_charge_limit_below_the_actors_minimum_is_a_422_naming_it(api: Api) -> None:
    headers = api.auth(api.admin_key)
    low = {**LEADGEN, "options": {"maxTotalChargeUsd": 0.019}}
    response = await api.client.post("/runs", json=request(GENERATOR, low), headers=headers)
    problem = refused(response, "/runs/1/options/maxTotalChargeUsd")
    assert "minimum charge of 0.02 USD" in problem["detail"]
    assert api.counts() == (0, 0) and api.temporal.started == []
    # Any limit is fine for an actor without a minimum; at the minimum is fine for leadgen.
    ok = await api.client.post(
        "/runs",
        json=request(
            {**GENERATOR, "options": {"maxTotalChargeUsd": 0.000001}},
            {**LEADGEN, "options": {"maxTotalChargeUsd": 0.02}},
        ),
        headers=headers,
    )
    assert ok.status_code == 202, ok.text
    assert api.counts() == (1, 2)


async def test_a_registry_default_below_the_minimum_at_the_runs_memory_is_named(
    api: Api,
) -> None:
    # The entry is valid at its default memory (one start event), but 32 GB costs 32 start
    # events (32 x 0.001 = 0.032 USD), above the default limit.
    with api.engine.begin() as conn:
        registry.put_actor(
            conn,
            "ultron-leadgen",
            registry.ActorEntry.model_validate(
                {
                    "platformActorId": "ultron~leadgen",
                    "defaults": {"maxTotalChargeUsd": 0.03},
                    "pricing": {
                        "pricingModel": "PAY_PER_EVENT",
                        "pricingPerEvent": {
                            "actorChargeEvents": {"apify-actor-start": {"eventPriceUsd": 0.001}}
                        },
                    },
                }
            ),
        )
    headers = api.auth(api.admin_key)
    big = {**LEADGEN, "options": {"memoryMb": 32768}}
    response = await api.client.post("/runs", json=request(big), headers=headers)
    problem = refused(response, "/runs/0/options/maxTotalChargeUsd")
    assert "0.032 USD" in problem["detail"] and "registry default" in problem["detail"]
    assert api.counts() == (0, 0) and api.temporal.started == []
    at_default_memory = await api.client.post("/runs", json=request(LEADGEN), headers=headers)
    assert at_default_memory.status_code == 202, at_default_memory.text


async def test_a_budget_below_the_childrens_minimums_is_a_422_naming_it(api: Api) -> None:
    headers = api.auth(api.admin_key)
    # Two leadgen runs need 0.02 USD each, the generator one micro-dollar.
    body = request(LEADGEN, GENERATOR, LEADGEN, budget=0.04)
    problem = refused(await api.client.post("/runs", json=body, headers=headers), "/budgetUsd")
    detail = problem["detail"]
    assert "at least 0.040001 USD" in detail
    assert "/runs/0 (ultron-leadgen): 0.02 USD" in detail
    assert "/runs/2 (ultron-leadgen): 0.02 USD" in detail
    assert "ultron-generator" not in detail
    assert api.counts() == (0, 0) and api.temporal.started == []


async def test_a_budget_is_split_with_each_childs_minimum_as_its_floor(api: Api) -> None:
    headers = api.auth(api.admin_key)
    # An equal split would give each child 0.015 USD, below leadgen's minimum: leadgen gets
    # its 0.02 and the others share the rest.
    body = request(LEADGEN, GENERATOR, SIMILARWEB, budget=0.045)
    response = await api.client.post("/runs", json=body, headers=headers)
    assert response.status_code == 202, response.text
    with api.engine.connect() as conn:
        children = run_queries.get_children(conn, response.json()["runId"])
    assert [c.options["maxTotalChargeUsd"] for c in children] == [0.02, 0.0125, 0.0125]
    assert api.temporal.started != []
