"""Submitting through the API: option rules (422 naming the field, nothing written or
started, on SQLite and PostgreSQL), the fingerprint's canonical form, an absent engine."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from orchestrator.api.schemas import CreateRunRequest
from orchestrator.db.queries import registry
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.schema import scrape_events
from orchestrator.domain.run_options import RunOptions
from orchestrator.service.commands import ActorRun, SubmitRequest
from orchestrator.service.submission import request_hash
from tests.unit.api_harness import Api, api_for

RUN = {"actor": "ultron-leadgen", "input": {"brief": "b"}}


@pytest.fixture
async def api_any_db(engine: Engine) -> AsyncIterator[Api]:
    async with api_for(engine) as a:
        yield a


def with_options(options: dict[str, Any]) -> dict[str, Any]:
    return {"workspaceId": "ws_opts", "runs": [RUN, {**RUN, "options": options}]}


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"memoryMb": 1000}, "memoryMb"),
        ({"memoryMb": 64}, "memoryMb"),
        ({"memoryMb": 65536}, "memoryMb"),
        ({"timeoutSec": 0}, "timeoutSec"),
        ({"timeoutSec": 7 * 24 * 3600 + 1}, "timeoutSec"),
        ({"maxItems": 0}, "maxItems"),
        ({"maxItems": True}, "maxItems"),  # a boolean is not read as 1
        ({"maxTotalChargeUsd": True}, "maxTotalChargeUsd"),
        ({"build": "b" * 65}, "build"),
    ],
)
async def test_options_the_platform_refuses_are_a_422_naming_the_field(
    api_any_db: Api, options: dict[str, Any], name: str
) -> None:
    api = api_any_db
    response = await api.client.post(
        "/runs", json=with_options(options), headers=api.auth(api.admin_key)
    )
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["code"] == "validation-failed"
    assert problem["field"] == f"/runs/1/options/{name}"
    assert name in problem["detail"]
    assert api.counts() == (0, 0) and api.temporal.started == []


async def test_the_largest_and_smallest_memory_are_accepted_and_stored(api_any_db: Api) -> None:
    api = api_any_db
    for memory in (128, 32768):
        response = await api.client.post(
            "/runs",
            json=with_options({"memoryMb": memory, "maxItems": 1}),
            headers=api.auth(api.admin_key),
        )
        assert response.status_code == 202, response.text
        with api.engine.connect() as conn:
            child = run_queries.get_children(conn, response.json()["runId"])[1]
        # The registry's default timeout and the actor's charge cap fill what is unset.
        assert child.options == {
            "memoryMb": memory,
            "timeoutSec": 600,
            "maxItems": 1,
            "maxTotalChargeUsd": 100,
        }
    assert api.counts() == (2, 4)


async def test_a_registry_default_the_platform_refuses_is_named_too(sqlite_engine: Engine) -> None:
    async with api_for(sqlite_engine) as api:
        with api.engine.begin() as conn:
            registry.put_actor(
                conn,
                "ultron-leadgen",
                registry.ActorEntry.model_validate(
                    {"platformActorId": "ultron~leadgen", "defaults": {"memoryMb": 1000}}
                ),
            )
        headers = api.auth(api.admin_key)
        refused = await api.client.post("/runs", json=with_options({}), headers=headers)
        assert refused.status_code == 422
        assert refused.json()["field"] == "/runs/0/options/memoryMb"
        assert "registry default of ultron-leadgen" in refused.json()["detail"]
        assert api.counts() == (0, 0)
        # Setting the option explicitly overrides the bad default.
        fixed = {"workspaceId": "ws_opts", "runs": [{**RUN, "options": {"memoryMb": 2048}}]}
        assert (await api.client.post("/runs", json=fixed, headers=headers)).status_code == 202


def test_fingerprints_are_those_stored_before_the_command_type_existed() -> None:
    # Hashes computed by the earlier implementation, which hashed the API's wire JSON.
    body = CreateRunRequest.model_validate(
        {
            "workspaceId": "ws_a",
            "skillId": "s1",
            "conversationId": "c1",
            "callbackWebhook": "https://example.com/h",
            "runs": [
                {
                    "actor": "ultron-leadgen",
                    "input": {"q": "é", "n": [1, 2]},
                    "options": {"memoryMb": 1024, "timeoutSec": 600},
                },
                {"actor": "x"},
            ],
        }
    )
    expected = "36e60ead21d7d77e81bc5cc5d19d896db04dee0e46b2422b09936a857392eeca"
    assert request_hash(body.to_command(), "ws_a") == expected
    minimal = SubmitRequest(runs=(ActorRun(actor="a"),))
    expected_minimal = "b6a317283d68d206db4d93327d987b11c850276fbf4d1aa3dad779d9421392ac"
    assert request_hash(minimal, "ws_b") == expected_minimal
    changed = SubmitRequest(runs=(ActorRun(actor="a", options=RunOptions(max_items=5)),))
    assert request_hash(changed, "ws_b") != expected_minimal
    # keepPartialRows is named only when off: its default leaves stored fingerprints as they were.
    kept = SubmitRequest(runs=(ActorRun(actor="a"),), keep_partial_rows=True)
    assert request_hash(kept, "ws_b") == expected_minimal
    dropped = SubmitRequest(runs=(ActorRun(actor="a"),), keep_partial_rows=False)
    assert request_hash(dropped, "ws_b") != expected_minimal
    # A run's charge limit counts too (so a reused key with another limit is refused).
    capped = SubmitRequest(
        runs=(ActorRun(actor="a", options=RunOptions(max_total_charge_usd=1.5)),)
    )
    assert request_hash(capped, "ws_b") != expected_minimal


async def test_keep_partial_rows_is_stored_and_shown(sqlite_engine: Engine) -> None:
    async with api_for(sqlite_engine) as api:
        headers = api.auth(api.admin_key)
        for flag in (None, False):
            body: dict[str, Any] = {"workspaceId": "ws_opts", "runs": [RUN]}
            if flag is not None:
                body["keepPartialRows"] = flag
            response = await api.client.post("/runs", json=body, headers=headers)
            assert response.status_code == 202, response.text
            run_id = response.json()["runId"]
            view = (await api.client.get(f"/runs/{run_id}", headers=headers)).json()
            assert view["keepPartialRows"] is (flag is None)
            assert view["children"][0]["partial"] is False
        refused = await api.client.post(
            "/runs",
            json={"workspaceId": "ws_opts", "runs": [RUN], "keepPartialRows": "maybe"},
            headers=headers,
        )
        assert refused.status_code == 422


async def test_without_the_workflow_engine_submit_and_abort_are_503(sqlite_engine: Engine) -> None:
    async with api_for(sqlite_engine) as api:
        api.state.temporal = None
        headers = api.auth(api.admin_key)
        submitted = await api.client.post(
            "/runs", json={"workspaceId": "ws_x", "runs": [RUN]}, headers=headers
        )
        aborted = await api.client.post("/runs/run_x/abort", headers=headers)
        for response in (submitted, aborted):
            assert response.status_code == 503, response.text
            assert response.json()["code"] == "unavailable"
        assert api.counts() == (0, 0)


async def test_a_refused_workflow_start_is_503_and_leaves_nothing_behind(
    api_any_db: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = api_any_db

    async def refuse(*_: Any, **__: Any) -> None:
        raise RuntimeError("temporal said no")

    monkeypatch.setattr(api.temporal, "start_workflow", refuse)
    events_before = event_count(api.engine)
    response = await api.client.post(
        "/runs", json={"workspaceId": "ws_x", "runs": [RUN, RUN]}, headers=api.auth(api.admin_key)
    )
    assert response.status_code == 503, response.text
    problem = response.json()
    assert problem["code"] == "unavailable" and "temporal said no" not in response.text
    # Header, children and the run.created event were deleted again.
    assert api.counts() == (0, 0) and event_count(api.engine) == events_before


def event_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(scrape_events)).scalar_one())


@pytest.mark.parametrize(
    ("options", "name"),
    [({"maxItems": 1001}, "maxItems"), ({"maxTotalChargeUsd": 2.5}, "maxTotalChargeUsd")],
)
async def test_an_option_above_its_actors_hard_cap_is_a_422_naming_the_field(
    api_any_db: Api, options: dict[str, Any], name: str
) -> None:
    api = api_any_db
    with api.engine.begin() as conn:
        registry.put_actor(
            conn,
            "ultron-leadgen",
            registry.ActorEntry.model_validate(
                {
                    "platformActorId": "ultron~leadgen",
                    "caps": {"maxItems": 1000, "maxTotalChargeUsd": 2},
                }
            ),
        )
    headers = api.auth(api.admin_key)
    refused = await api.client.post("/runs", json=with_options(options), headers=headers)
    assert refused.status_code == 422, refused.text
    assert refused.json()["code"] == "validation-failed"
    assert refused.json()["field"] == f"/runs/1/options/{name}"
    assert "hard cap" in refused.json()["detail"]
    assert api.counts() == (0, 0) and api.temporal.started == []
    # At the cap is accepted, and a run that leaves the options out gets the caps.
    at_cap = with_options({"maxItems": 1000, "maxTotalChargeUsd": 2})
    accepted = await api.client.post("/runs", json=at_cap, headers=headers)
    assert accepted.status_code == 202, accepted.text
    with api.engine.connect() as conn:
        first, second = run_queries.get_children(conn, accepted.json()["runId"])
    assert first.options == {"maxItems": 1000, "maxTotalChargeUsd": 2}
    assert second.options == {"maxItems": 1000, "maxTotalChargeUsd": 2}


def test_a_registry_entry_whose_default_exceeds_its_cap_is_refused() -> None:
    with pytest.raises(ValueError, match="above caps"):
        registry.ActorEntry.model_validate(
            {
                "platformActorId": "ultron~leadgen",
                "defaults": {"maxTotalChargeUsd": 10},
                "caps": {"maxTotalChargeUsd": 5},
            }
        )


def with_budget(budget: Any, *runs: dict[str, Any]) -> dict[str, Any]:
    return {"workspaceId": "ws_budget", "budgetUsd": budget, "runs": list(runs)}


GENERATOR = {"actor": "ultron-generator"}  # no charge cap in the registry


async def test_a_budget_is_split_into_the_childrens_charge_limits_and_shown(
    api_any_db: Api,
) -> None:
    api = api_any_db
    headers = api.auth(api.admin_key)
    body = with_budget(
        10,
        {**RUN, "options": {"maxTotalChargeUsd": 1}},  # below the equal share: kept
        GENERATOR,  # uncapped
        RUN,  # the actor's hard cap of 100 is above its share
    )
    response = await api.client.post("/runs", json=body, headers=headers)
    assert response.status_code == 202, response.text
    run_id = response.json()["runId"]
    with api.engine.connect() as conn:
        children = run_queries.get_children(conn, run_id)
        assert run_queries.get_run(conn, run_id).budget_usd == 10  # type: ignore[union-attr]
    assert [c.options["maxTotalChargeUsd"] for c in children] == [1, 4.5, 4.5]
    # The rest of each child's options is untouched by the split.
    assert children[1].options == {"memoryMb": 256, "timeoutSec": 3600, "maxTotalChargeUsd": 4.5}
    shown = await api.client.get(f"/runs/{run_id}", headers=headers)
    assert shown.status_code == 200 and shown.json()["budgetUsd"] == 10
    # Without a budget, nothing is split and the view says so.
    plain = await api.client.post(
        "/runs", json={"workspaceId": "ws_budget", "runs": [GENERATOR]}, headers=headers
    )
    plain_id = plain.json()["runId"]
    with api.engine.connect() as conn:
        assert "maxTotalChargeUsd" not in run_queries.get_children(conn, plain_id)[0].options
    assert (await api.client.get(f"/runs/{plain_id}", headers=headers)).json()["budgetUsd"] is None


@pytest.mark.parametrize(
    ("budget", "detail"),
    [
        (0, "greater than 0"),
        (-5, "greater than 0"),
        ("lots", "number"),
        (0.000001, "too small"),  # one micro-dollar cannot be split across two runs
    ],
)
async def test_a_budget_that_cannot_be_split_is_a_422_naming_it(
    api_any_db: Api, budget: Any, detail: str
) -> None:
    api = api_any_db
    response = await api.client.post(
        "/runs", json=with_budget(budget, RUN, GENERATOR), headers=api.auth(api.admin_key)
    )
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["code"] == "validation-failed"
    assert problem["field"] == "/budgetUsd"
    assert detail in problem["detail"]
    assert api.counts() == (0, 0) and api.temporal.started == []


async def test_the_budget_is_part_of_the_idempotency_fingerprint(api_any_db: Api) -> None:
    api = api_any_db
    headers = {**api.auth(api.admin_key), "Idempotency-Key": '"budget-1"'}
    first = await api.client.post("/runs", json=with_budget(5, RUN), headers=headers)
    assert first.status_code == 202, first.text
    again = await api.client.post("/runs", json=with_budget(5, RUN), headers=headers)
    assert again.json()["runId"] == first.json()["runId"]
    other = await api.client.post("/runs", json=with_budget(6, RUN), headers=headers)
    assert other.status_code == 422 and other.json()["code"] == "idempotency-key-reused"
    assert api.counts() == (1, 1)


def test_a_fingerprint_without_a_budget_is_unchanged_and_one_with_it_differs() -> None:
    minimal = SubmitRequest(runs=(ActorRun(actor="a"),))
    expected_minimal = "b6a317283d68d206db4d93327d987b11c850276fbf4d1aa3dad779d9421392ac"
    assert request_hash(minimal, "ws_b") == expected_minimal
    budgeted = SubmitRequest(runs=(ActorRun(actor="a"),), budget_usd=3.5)
    assert request_hash(budgeted, "ws_b") != expected_minimal
