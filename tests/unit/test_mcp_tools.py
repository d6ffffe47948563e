"""The MCP tools in process (the SDK's in-memory client), on SQLite and PostgreSQL: paging
under the byte cap while ingestion continues, tenancy, errors shaped like the API's
problems, progress while waiting, and a cancelled submit that leaves nothing half-made."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from mcp import Client
from mcp.types import CallToolResult
from sqlalchemy import Engine
from temporalio.client import Client as TemporalClient

from orchestrator.api.errors import STATUS_OF_CODE
from orchestrator.db.queries import runs as run_queries
from orchestrator.domain.errors import NotFound
from orchestrator.mcp import server as mcp_server
from orchestrator.mcp.errors import arguments_error, domain_error_result
from orchestrator.mcp.server import build_server
from orchestrator.service.auth import Principal
from orchestrator.service.errors import Unauthorized
from tests.support.waiting import eventually_async
from tests.unit.api_harness import Api, FakeTemporal, api_for
from tests.unit.test_api_items_and_openapi import finish, ingest

WS = "ws_mcp"
RUN = {"actor": "ultron-leadgen", "input": {"brief": "b"}}


@pytest.fixture
async def api(engine: Engine) -> AsyncIterator[Api]:
    async with api_for(engine) as a:
        yield a


def tools_for(api: Api, workspace: str | None = WS) -> Client:
    principal = Principal(key_id="key_test", workspace_id=workspace)

    async def caller() -> Principal:
        return principal

    return Client(build_server(lambda: api.state, caller))


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return cast(dict[str, Any], result.structured_content)


def problem(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error, result.content
    assert result.structured_content is not None
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
    return cast(dict[str, Any], result.structured_content)


async def submitted(client: Client, runs: int = 2) -> str:
    answer = ok(await client.call_tool("submit", {"request": {"runs": [RUN] * runs}}))
    return str(answer["runId"])


async def test_pages_stay_under_the_byte_cap_and_never_skip_or_repeat(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcp_server, "PAGE_MAX_BYTES", 1500)
    async with tools_for(api) as client:
        run_id = await submitted(client)
        ingest(api.engine, run_id, 0, 0, 7)
        ingest(api.engine, run_id, 1, 0, 3)
        seen: list[tuple[str, int]] = []
        cursor: str | None = None
        for step in range(100):  # bounded
            if step == 1:  # both children keep ingesting while the caller pages
                ingest(api.engine, run_id, 0, 7, 5)
                ingest(api.engine, run_id, 1, 3, 4)
            if step == 3:
                finish(api.engine, run_id, 2)
            args: dict[str, Any] = {"runId": run_id, "limit": 6}
            if cursor:
                args["cursor"] = cursor
            page = ok(await client.call_tool("get_items", args))
            assert len(json.dumps(page, separators=(",", ":"))) <= 1500
            assert page["returned"] <= 6
            seen.extend((item["childId"], item["itemIndex"]) for item in page["items"])
            assert page["remainingRows"] == page["total"] - len(seen)
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert len(seen) == len(set(seen)) == 19
        assert page["runTerminal"] and page["total"] == 19


async def test_another_workspaces_run_is_not_found(api: Api) -> None:
    async with tools_for(api) as mine, tools_for(api, "ws_other") as theirs:
        run_id = await submitted(mine)
        for tool in ("get_run", "get_items", "abort"):
            refused = problem(await theirs.call_tool(tool, {"runId": run_id}))
            assert refused == {
                "type": "urn:orchestrator:problem:not-found",
                "title": "Not found",
                "status": 404,
                "detail": f"run {run_id} does not exist",
                "code": "not-found",
                "field": "runId",
            }
        assert api.temporal.cancelled == []
        assert ok(await mine.call_tool("get_run", {"runId": run_id}))["run"]["id"] == run_id


async def test_bad_arguments_are_a_validation_problem_naming_the_argument(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    async with tools_for(api) as client:
        wait = problem(await client.call_tool("get_run", {"runId": "run_x", "waitSecs": 46}))
        assert (wait["code"], wait["field"], wait["status"]) == (
            "validation-failed",
            "/waitSecs",
            422,
        )
        assert wait["detail"].startswith("/waitSecs: ")
        missing = problem(await client.call_tool("abort", {}))
        assert missing["field"] == "/runId"
        body = problem(
            await client.call_tool(
                "submit", {"request": {"runs": [{**RUN, "options": {"memoryMb": 1000}}]}}
            )
        )
        assert (body["code"], body["field"]) == ("validation-failed", "/runs/0/options/memoryMb")
        nested = problem(await client.call_tool("submit", {"request": {"runs": [{"input": {}}]}}))
        # Inside `request`, fields are named as POST /runs names them.
        assert nested["field"] == "/runs/0/actor"
        neither = problem(await client.call_tool("submit", {"request": {}}))
        assert (neither["code"], neither["field"]) == ("validation-failed", "/request")
    assert api.counts() == (0, 0)  # nothing was written
    assert api.temporal.started == []
    # A refused submit is an answer, not work left behind by a cancelled call.
    assert not [r for r in caplog.records if "cancelled tool call" in r.getMessage()]


async def test_a_key_that_stopped_working_and_a_crash_are_problems_without_internals(
    api: Api,
) -> None:
    async def revoked() -> Principal:
        raise Unauthorized("the API key is invalid or revoked")

    async with Client(build_server(lambda: api.state, revoked)) as client:
        refused = problem(await client.call_tool("list_actors", {}))
        assert (refused["code"], refused["status"]) == ("unauthorized", 401)

    def broken() -> Any:
        raise RuntimeError("secret internals: ork_abc")

    async def anyone() -> Principal:
        return Principal(key_id="k", workspace_id=WS)

    async with Client(build_server(broken, anyone)) as client:
        crashed = problem(await client.call_tool("list_actors", {}))
        assert crashed["code"] == "internal-error"
        assert "secret" not in json.dumps(crashed)


async def test_every_code_maps_to_the_apis_status() -> None:
    for code, status in STATUS_OF_CODE.items():
        error = NotFound("x")
        error.code = code
        result = domain_error_result(error)
        assert result.is_error
        assert result.structured_content is not None
        assert result.structured_content["status"] == status


def test_an_arguments_error_names_the_first_bad_argument() -> None:
    from pydantic import BaseModel, ValidationError

    class Args(BaseModel):
        limit: int

    with pytest.raises(ValidationError) as caught:
        Args.model_validate({"limit": "many"})
    error = arguments_error(caught.value)
    assert (error.code, error.field) == ("validation-failed", "/limit")


async def test_get_run_waits_until_the_run_ends_and_reports_progress(api: Api) -> None:
    reports: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    async with tools_for(api) as client:
        run_id = await submitted(client, runs=1)
        waiting = asyncio.ensure_future(
            client.call_tool(
                "get_run", {"runId": run_id, "waitSecs": 30}, progress_callback=on_progress
            )
        )
        await eventually_async(lambda: reports, description="a progress notification")
        finish(api.engine, run_id, 1)
        status = ok(await waiting)
    assert status["run"]["terminal"] and status["run"]["state"] == "succeeded"
    assert status["waitedSecs"] < 30
    values = [value for value, _, _ in reports]
    assert values == sorted(values) and reports[0][1] == 30
    assert "0/1 actor runs ended" in (reports[0][2] or "")


PLAN = {
    "needs": ["leads", "web-traffic"],
    "brief": {"product": "B2B payroll software", "targetCount": 30},
    "icp": {"titles": ["HR Director"]},
}


async def test_a_plan_shows_its_cost_spends_nothing_and_runs_by_its_id(api: Api) -> None:
    async with tools_for(api) as client:
        plan = ok(await client.call_tool("plan", {"request": {**PLAN, "budgetUsd": 2}}))
        assert plan["planId"].startswith("plan_") and plan["workspaceId"] == WS
        assert [step["actor"] for step in plan["steps"]] == [
            "ultron-leadgen",
            "ultron-similarweb-bulk",
        ]
        assert plan["estimatedCostUsd"] > 0 and plan["budgetUsd"] == 2
        assert api.temporal.started == [] and api.counts() == (0, 0)

        run_id = ok(await client.call_tool("submit", {"request": {"planId": plan["planId"]}}))[
            "runId"
        ]
        status = ok(await client.call_tool("get_run", {"runId": run_id}))
        assert status["run"]["planId"] == plan["planId"]
        assert status["run"]["plan"]["steps"] == plan["steps"]
        assert [c["actor"] for c in status["run"]["children"]] == [
            "ultron-leadgen",
            "ultron-similarweb-bulk",
        ]

        unmet = problem(
            await client.call_tool("plan", {"request": {"needs": ["web-traffic"], "brief": {}}})
        )
        assert (unmet["code"], unmet["field"]) == ("validation-failed", "/needs/0")

    async with tools_for(api, "ws_other") as theirs:
        hidden = problem(await theirs.call_tool("submit", {"request": {"planId": plan["planId"]}}))
        assert (hidden["code"], hidden["field"]) == ("not-found", "/planId")
    assert len(api.temporal.started) == 1


class SlowStart(FakeTemporal):
    """A Temporal client whose workflow start takes a while (so a call can be cancelled)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def start_workflow(self, workflow: str, arg: Any, *, id: str, **_: Any) -> None:
        self.entered.set()
        await self.release.wait()
        self.started.append(id)


async def test_a_submit_cancelled_between_store_and_start_still_starts_its_workflow(
    api: Api,
) -> None:
    slow = SlowStart()
    api.state.temporal = cast(TemporalClient, slow)
    async with tools_for(api) as client:
        call = asyncio.ensure_future(client.call_tool("submit", {"request": {"runs": [RUN]}}))
        await asyncio.wait_for(slow.entered.wait(), 30)
        # The client gives up while the request is stored and its workflow is starting
        # (in process the tool runs in the caller's task, so this cancels the tool too).
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        slow.release.set()
        await eventually_async(lambda: slow.started, description="the workflow start")
    (workflow_id,) = slow.started
    with api.engine.connect() as conn:
        run = run_queries.get_run(conn, workflow_id.removeprefix("scrape/"))
    assert run is not None and run.children_total == 1
    assert api.counts() == (1, 1)
