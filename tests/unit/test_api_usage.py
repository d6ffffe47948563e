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
    assert response.json()["code"] == code and response.json()["field"] == field


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
