"""Spend as callers see it: ``GET /runs/{id}``, ``GET /workspaces/{id}/usage`` and the
callback payload, on SQLite and PostgreSQL; the per-request sum and the per-day roll-up are
the storage queries'. Figures are written as the poll and settle activities write them."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime
from typing import Any

import httpx
import pytest
from apify_client._models import Run
from sqlalchemy import Engine, update

from orchestrator.activities.delivery import callback_payload
from orchestrator.db.queries import budgets as budget_queries
from orchestrator.db.queries import runs as run_queries
from orchestrator.db.queries import usage as usage_queries
from orchestrator.db.schema import scrape_children
from orchestrator.domain.lifecycle import ChildState
from orchestrator.platform.apify import _to_run
from tests.unit.api_harness import Api, api_for

LEADGEN = {"actor": "ultron-leadgen", "input": {"brief": "b"}}
SIMILARWEB = {"actor": "ultron-similarweb-bulk", "input": {"domains": ["a.com"]}}


@pytest.fixture
async def api(engine: Engine) -> AsyncIterator[Api]:
    async with api_for(engine) as a:
        yield a


def assert_problem(response: httpx.Response, status: int, code: str, field: str | None) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == code and response.json().get("field") == field


async def submit(api: Api, key: str, *runs: dict[str, Any]) -> tuple[str, list[str]]:
    created = await api.client.post("/runs", json={"runs": list(runs)}, headers=api.auth(key))
    assert created.status_code == 202, created.text
    run_id = created.json()["runId"]
    with api.engine.connect() as conn:
        return run_id, [c.id for c in run_queries.get_children(conn, run_id)]


def spend(
    engine: Engine,
    child_id: str,
    total: float,
    counts: dict[str, int] | None = None,
    *,
    finished: datetime | None = None,
    settled: bool = True,
) -> None:
    """What a child's poll and settle would record; ``finished`` ends it on that instant."""
    with engine.begin() as conn:
        run_queries.transition_child(
            conn, child_id, ChildState.RUNNING, platform_run_id=f"pr-{child_id[-6:]}"
        )
        run_queries.record_usage(conn, child_id, total, counts or {})
        if finished is not None:
            run_queries.transition_child(conn, child_id, ChildState.FAILED)
            conn.execute(
                update(scrape_children)
                .where(scrape_children.c.id == child_id)
                .values(finished_at=finished)
            )
        if settled:
            run_queries.record_usage(conn, child_id, total, counts or {}, settled=True)


async def test_get_run_shows_each_childs_cost_and_the_request_total(api: Api) -> None:
    ws = f"ws_{secrets.token_hex(4)}"
    key, _ = api.workspace_key(ws)
    run_id, (lead, web, never) = await submit(api, key, LEADGEN, SIMILARWEB, LEADGEN)
    spend(api.engine, lead, 0.25005, {"apify-actor-start": 1, "lead": 25})
    spend(api.engine, web, 0.02, settled=False)
    # A lower, lagging read changes nothing.
    with api.engine.begin() as conn:
        run_queries.record_usage(conn, web, 0.01, {})

    view = (await api.client.get(f"/runs/{run_id}", headers=api.auth(key))).json()
    assert view["usageTotalUsd"] == pytest.approx(0.27005)
    assert view["usageSettled"] is False  # the similarweb figure may still grow
    children = {c["id"]: c for c in view["children"]}
    assert children[lead]["usageTotalUsd"] == 0.25005
    assert children[lead]["chargedEventCounts"] == {"apify-actor-start": 1, "lead": 25}
    assert children[lead]["usageSettled"] is True
    assert children[web]["usageTotalUsd"] == 0.02 and children[web]["chargedEventCounts"] == {}
    assert children[never]["usageTotalUsd"] is None  # never reached the platform

    with api.engine.connect() as conn:
        assert run_queries.run_usage_total(conn, run_id) == pytest.approx(0.27005)
        run = run_queries.get_run(conn, run_id)
        assert run is not None
        payload = callback_payload(
            run,
            run_queries.get_children(conn, run_id),
            "http://api",
            usage_total_usd=run_queries.run_usage_total(conn, run_id),
        )
    assert payload["data"]["usageTotalUsd"] == pytest.approx(0.27005)
    by_child = {c["childId"]: c for c in payload["data"]["children"]}
    assert by_child[lead]["usageTotalUsd"] == 0.25005
    assert by_child[lead]["chargedEventCounts"]["lead"] == 25
    assert by_child[web]["usageSettled"] is False


async def test_workspace_usage_per_finish_day_and_actor(api: Api) -> None:
    ws, other = f"ws_{secrets.token_hex(4)}", f"ws_{secrets.token_hex(4)}"
    key, _ = api.workspace_key(ws)
    other_key, _ = api.workspace_key(other)
    _, (a, b, c) = await submit(api, key, LEADGEN, LEADGEN, SIMILARWEB)
    _, (d,) = await submit(api, key, LEADGEN)
    _, (foreign,) = await submit(api, other_key, LEADGEN)
    day1 = datetime(2026, 3, 1, 23, 59, 59, tzinfo=UTC)
    day2 = datetime(2026, 3, 2, 0, 0, 1, tzinfo=UTC)
    spend(api.engine, a, 0.1, {"lead": 10}, finished=day1)
    spend(api.engine, b, 0.2, {"lead": 20, "apify-actor-start": 1}, finished=day1)
    spend(api.engine, c, 0.05, finished=day2, settled=False)
    spend(api.engine, d, 0.3, {"lead": 30}, finished=datetime(2026, 3, 5, tzinfo=UTC))
    spend(api.engine, foreign, 9.0, finished=day1)

    params = {"from": "2026-03-01", "to": "2026-03-02"}
    got = await api.client.get(f"/workspaces/{ws}/usage", params=params, headers=api.auth(key))
    assert got.status_code == 200, got.text
    report = got.json()
    assert report["workspaceId"] == ws and report["from"] == "2026-03-01"
    assert report["usageTotalUsd"] == pytest.approx(0.35)  # d is outside; foreign is not ours
    assert [day["day"] for day in report["days"]] == ["2026-03-01", "2026-03-02"]
    first, second = report["days"]
    assert first["usageTotalUsd"] == pytest.approx(0.3)
    assert first["actors"] == [
        {
            "actor": "ultron-leadgen",
            "usageTotalUsd": pytest.approx(0.3),
            "runs": 2,
            "unsettled": 0,
            "chargedEventCounts": {"lead": 30, "apify-actor-start": 1},
        }
    ]
    assert second["actors"][0]["actor"] == "ultron-similarweb-bulk"
    assert second["actors"][0]["unsettled"] == 1

    # An admin sees any workspace; the same figures.
    admin = await api.client.get(
        f"/workspaces/{ws}/usage", params=params, headers=api.auth(api.admin_key)
    )
    assert admin.json() == report
    with api.engine.connect() as conn:
        direct = usage_queries.workspace_usage(conn, ws, date(2026, 3, 1), date(2026, 3, 5))
    assert direct.usage_total_usd == pytest.approx(0.65)
    assert [d.day for d in direct.days] == [date(2026, 3, 1), date(2026, 3, 2), date(2026, 3, 5)]


async def test_workspace_usage_errors(api: Api) -> None:
    ws, other = f"ws_{secrets.token_hex(4)}", f"ws_{secrets.token_hex(4)}"
    key, _ = api.workspace_key(ws)
    api.workspace_key(other)
    c, auth = api.client, api.auth(key)
    ok = {"from": "2026-03-01", "to": "2026-03-01"}
    # Another workspace looks exactly like one that does not exist.
    assert_problem(
        await c.get(f"/workspaces/{other}/usage", params=ok, headers=auth),
        404,
        "not-found",
        "workspaceId",
    )
    assert_problem(
        await c.get("/workspaces/%20bad/usage", params=ok, headers=auth),
        404,
        "not-found",
        "workspaceId",
    )
    backwards = {"from": "2026-03-02", "to": "2026-03-01"}
    assert_problem(
        await c.get(f"/workspaces/{ws}/usage", params=backwards, headers=auth),
        422,
        "validation-failed",
        "to",
    )
    too_long = {"from": "2025-01-01", "to": "2026-03-01"}
    assert_problem(
        await c.get(f"/workspaces/{ws}/usage", params=too_long, headers=auth),
        422,
        "validation-failed",
        "from",
    )
    missing = await c.get(f"/workspaces/{ws}/usage", params={"to": "2026-03-01"}, headers=auth)
    assert missing.status_code == 422
    assert missing.headers["content-type"].startswith("application/problem+json")
    unauthenticated = await c.get(f"/workspaces/{ws}/usage", params=ok)
    assert unauthenticated.status_code == 401
    empty = (await c.get(f"/workspaces/{ws}/usage", params=ok, headers=auth)).json()
    assert empty["usageTotalUsd"] == 0 and empty["days"] == []


def test_the_adapter_reads_usage_from_the_client_model_and_from_a_dict() -> None:
    raw: dict[str, Any] = {
        "id": "r1",
        "actId": "a1",
        "userId": "u1",
        "status": "SUCCEEDED",
        "startedAt": "2026-03-01T10:00:00.000Z",
        "finishedAt": "2026-03-01T10:01:00.000Z",
        "defaultDatasetId": "d1",
        "defaultKeyValueStoreId": "k1",
        "defaultRequestQueueId": "q1",
        "buildId": "b1",
        "buildNumber": "0.0.1",
        "meta": {"origin": "API"},
        "stats": {"computeUnits": 0.01, "restartCount": 0, "resurrectCount": 0},
        "options": {"build": "latest", "timeoutSecs": 0, "memoryMbytes": 1024, "diskMbytes": 2048},
        "usageTotalUsd": 0.26,
        "chargedEventCounts": {"lead": 26},
    }
    for run in (raw, Run.model_validate(raw)):
        mapped = _to_run(run)
        assert mapped.usage_total_usd == 0.26
        assert mapped.charged_event_counts == {"lead": 26}
        assert mapped.finished_at == datetime(2026, 3, 1, 10, 1, tzinfo=UTC)
    assert (
        _to_run({**raw, "usageTotalUsd": None, "chargedEventCounts": None}).usage_total_usd is None
    )


async def test_operators_set_show_and_remove_a_workspace_limit(api: Api) -> None:
    ws, other = f"ws_{secrets.token_hex(4)}", f"ws_{secrets.token_hex(4)}"
    key, _ = api.workspace_key(ws)
    api.workspace_key(other)
    c, admin = api.client, api.auth(api.admin_key)
    _, (child,) = await submit(api, key, SIMILARWEB)
    spend(api.engine, child, 0.75)

    none = (await c.get(f"/workspaces/{ws}/budget", headers=api.auth(key))).json()
    assert none["limitUsd"] is None and none["exhausted"] is False

    put = await c.put(f"/workspaces/{ws}/budget", json={"limitUsd": 2}, headers=admin)
    assert put.status_code == 200, put.text
    view = put.json()
    assert view["period"] == "month" and view["limitUsd"] == 2
    assert view["spentUsd"] == pytest.approx(0.75)
    assert view["remainingUsd"] == pytest.approx(1.25)
    assert view["exhausted"] is False
    start, end = (
        datetime.fromisoformat(view["periodStart"]),
        datetime.fromisoformat(view["periodEnd"]),
    )
    assert start.day == 1 and start.hour == 0 and start <= datetime.now(UTC) < end
    # The workspace's own key sees it; another workspace's key does not.
    own = (await c.get(f"/workspaces/{ws}/budget", headers=api.auth(key))).json()
    assert own == view
    other_key, _ = api.workspace_key(other)
    assert_problem(
        await c.get(f"/workspaces/{ws}/budget", headers=api.auth(other_key)),
        404,
        "not-found",
        "workspaceId",
    )
    # Only an operator sets it, and only to a real amount and period.
    forbidden = await c.put(f"/workspaces/{ws}/budget", json={"limitUsd": 9}, headers=api.auth(key))
    assert forbidden.status_code == 403
    for body, field in (
        ({"limitUsd": 0}, "/limitUsd"),
        ({"limitUsd": True}, "/limitUsd"),  # not read as $1
        ({"limitUsd": 5, "period": "week"}, "/period"),
        ({"limitUsd": 5, "extra": 1}, "/extra"),
    ):
        bad = await c.put(f"/workspaces/{ws}/budget", json=body, headers=admin)
        assert bad.status_code == 422, body
        assert bad.json()["field"] == field, bad.json()

    daily = await c.put(
        f"/workspaces/{ws}/budget", json={"limitUsd": 0.5, "period": "day"}, headers=admin
    )
    assert daily.json()["exhausted"] is True and daily.json()["remainingUsd"] == 0
    removed = await c.delete(f"/workspaces/{ws}/budget", headers=admin)
    assert removed.status_code == 200 and removed.json()["limitUsd"] is None
    again = await c.delete(f"/workspaces/{ws}/budget", headers=admin)
    assert again.status_code == 200


async def test_a_spent_workspace_limit_refuses_new_requests_with_402(api: Api) -> None:
    ws = f"ws_{secrets.token_hex(4)}"
    key, _ = api.workspace_key(ws)
    c, auth = api.client, api.auth(key)
    first = await c.post(
        "/runs", json={"runs": [SIMILARWEB]}, headers={**auth, "Idempotency-Key": "k-402"}
    )
    assert first.status_code == 202
    with api.engine.connect() as conn:
        (child,) = [ch.id for ch in run_queries.get_children(conn, first.json()["runId"])]
    spend(api.engine, child, 1.5)
    await c.put(f"/workspaces/{ws}/budget", json={"limitUsd": 1.5}, headers=api.auth(api.admin_key))
    before = api.counts()
    refused = await c.post("/runs", json={"runs": [LEADGEN]}, headers=auth)
    assert_problem(refused, 402, "budget-exhausted", None)
    assert "monthly budget of $1.50 is spent" in refused.json()["detail"]
    assert api.counts() == before, "a refused request left rows behind"
    # A retry of a request accepted before the limit was spent is still answered with it.
    replay = await c.post(
        "/runs", json={"runs": [SIMILARWEB]}, headers={**auth, "Idempotency-Key": "k-402"}
    )
    assert replay.status_code in (200, 202) and replay.json()["runId"] == first.json()["runId"]


async def test_a_stopped_request_says_why_on_its_status_and_callback(api: Api) -> None:
    ws = f"ws_{secrets.token_hex(4)}"
    key, _ = api.workspace_key(ws)
    created = await api.client.post(
        "/runs",
        json={"runs": [SIMILARWEB, LEADGEN], "budgetUsd": 1.0},
        headers=api.auth(key),
    )
    run_id = created.json()["runId"]
    with api.engine.connect() as conn:
        web, lead = (c.id for c in run_queries.get_children(conn, run_id))
    spend(api.engine, web, 0.6)
    with api.engine.begin() as conn:
        assert budget_queries.enforce_budgets(conn, run_id) is None  # 0.6 of 1.0
    spend(api.engine, lead, 0.4)
    with api.engine.begin() as conn:
        assert budget_queries.enforce_budgets(conn, run_id) == "budget-exhausted"
        # Idempotent: the reason stays, and the event is recorded once.
        assert budget_queries.enforce_budgets(conn, run_id) == "budget-exhausted"
    view = (await api.client.get(f"/runs/{run_id}", headers=api.auth(key))).json()
    assert view["stopReason"] == "budget-exhausted"
    assert "request's budget of $1.000000 is spent ($1.000000 so far)" in view["stopMessage"]
    events = (await api.client.get(f"/runs/{run_id}/events", headers=api.auth(key))).json()
    (stop,) = [e for e in events["events"] if e["kind"] == "run.budget_exhausted"]
    assert stop["data"]["reason"] == "budget-exhausted" and stop["data"]["budget"] == "request"
    with api.engine.connect() as conn:
        run = run_queries.get_run(conn, run_id)
        assert run is not None
        payload = callback_payload(run, run_queries.get_children(conn, run_id), "http://api")
    assert payload["data"]["stopReason"] == "budget-exhausted"
    assert payload["data"]["budgetUsd"] == 1.0
