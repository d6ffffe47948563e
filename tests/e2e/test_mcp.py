"""The MCP server end to end: the SDK's own client over Streamable HTTP against the stack.

One workspace key lists the catalog, plans a brief and runs the plan, submits a 10,000-row
run, waits for it with progress, pages through every row (no page above the byte cap, every
row exactly once) and aborts a long run; a key of another workspace is refused its runs;
bad arguments and unknown actors come back as tool errors carrying the HTTP API's problem
codes; ``orchestrator mcp`` serves the same tools over stdio.
"""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from orchestrator.cli.devstack import DevStack
from orchestrator.mcp.server import MAX_WAIT_SECS, PAGE_MAX_BYTES

pytestmark = pytest.mark.e2e

ROWS = 10_000


def workspace_keys(stack: DevStack, count: int) -> list[str]:
    keys = []
    with httpx.Client(base_url=stack.urls["api"], timeout=30, headers=stack.api_headers) as admin:
        for _ in range(count):
            workspace = f"ws_mcp_{secrets.token_hex(3)}"
            issued = admin.post("/admin/keys", json={"workspaceId": workspace, "name": "mcp"})
            assert issued.status_code == 201, issued.text
            keys.append(issued.json()["apiKey"])
    return keys


@asynccontextmanager
async def mcp_session(stack: DevStack, key: str) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60, read=120)) as http,
        streamable_http_client(stack.urls["api"] + "/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return cast(dict[str, Any], result.structured_content)


def problem(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error
    assert result.structured_content is not None
    # The text a model reads is the same problem.
    text = result.content[0]
    assert getattr(text, "text", None) is not None
    assert json.loads(text.text) == result.structured_content  # type: ignore[union-attr]
    return cast(dict[str, Any], result.structured_content)


async def wait_until_ended(session: ClientSession, run_id: str) -> tuple[dict[str, Any], int]:
    """get_run with the longest wait until the run ends; the run and the progress count."""
    reports: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append(progress)

    for _ in range(8):  # bounded: 8 waits of 45 s
        status = ok(
            await session.call_tool(
                "get_run",
                {"runId": run_id, "waitSecs": MAX_WAIT_SECS},
                progress_callback=on_progress,
            )
        )
        if status["run"]["terminal"]:
            return status["run"], len(reports)
    raise AssertionError(f"run {run_id} did not end")


async def test_an_agent_runs_a_request_through_the_tools(stack: DevStack) -> None:
    key, other_key = workspace_keys(stack, 2)
    async with mcp_session(stack, key) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert {"list_actors", "plan", "submit", "get_run", "get_items", "abort"} <= set(tools)
        assert tools["get_items"].output_schema is not None

        catalog = ok(await session.call_tool("list_actors", {}))
        names = {actor["name"] for actor in catalog["actors"]}
        assert "ultron-generator" in names

        run = {"actor": "ultron-generator", "input": {"items": ROWS, "itemBytes": 200}}
        submitted = ok(await session.call_tool("submit", {"request": {"runs": [run]}}))
        run_id = submitted["runId"]
        assert submitted["state"] == "queued"

        ended, progress_seen = await wait_until_ended(session, run_id)
        assert ended["state"] == "succeeded"
        assert ended["itemsTotal"] == ROWS
        assert progress_seen >= 1  # it was still running when the first wait began

        seen: set[tuple[str, int]] = set()
        cursor: str | None = None
        pages = 0
        while True:
            args: dict[str, Any] = {"runId": run_id, "limit": 500}
            if cursor is not None:
                args["cursor"] = cursor
            page = ok(await session.call_tool("get_items", args))
            pages += 1
            size = len(json.dumps(page, separators=(",", ":")).encode())
            assert size <= PAGE_MAX_BYTES, f"page {pages} is {size} bytes"
            assert page["total"] == ROWS
            for item in page["items"]:
                where = (item["childId"], item["itemIndex"])
                assert where not in seen, f"row {where} returned twice"
                seen.add(where)
            assert page["remainingRows"] == ROWS - len(seen)
            cursor = page["nextCursor"]
            if cursor is None:
                break
            assert pages < ROWS  # bounded
        assert len(seen) == ROWS
        assert pages > ROWS // 500  # the byte cap, not the limit, cut the pages

        # Only some fields: smaller rows.
        narrow = ok(
            await session.call_tool("get_items", {"runId": run_id, "limit": 3, "fields": ["id"]})
        )
        assert narrow["returned"] == 3
        assert all(set(item["data"]) == {"id"} for item in narrow["items"])

        # A bad argument: the HTTP API's 422, naming the argument.
        too_many = problem(await session.call_tool("get_items", {"runId": run_id, "limit": 10**6}))
        assert (too_many["code"], too_many["field"], too_many["status"]) == (
            "validation-failed",
            "/limit",
            422,
        )
        unknown = problem(
            await session.call_tool("submit", {"request": {"runs": [{"actor": "no-such"}]}})
        )
        assert (unknown["code"], unknown["field"]) == ("unknown-actor", "/runs/0/actor")
        bad_cursor = problem(
            await session.call_tool("get_items", {"runId": run_id, "cursor": "bm90LWpzb24"})
        )
        assert (bad_cursor["code"], bad_cursor["field"]) == ("validation-failed", "cursor")

        # Plan a brief (nothing spent), then run the plan by its id.
        brief = {"needs": ["leads"], "brief": {"product": "payroll", "targetCount": 5}}
        plan = ok(await session.call_tool("plan", {"request": brief}))
        assert plan["steps"][0]["actor"] == "ultron-leadgen"
        assert plan["estimatedCostUsd"] > 0
        planned = ok(await session.call_tool("submit", {"request": {"planId": plan["planId"]}}))
        shown = ok(await session.call_tool("get_run", {"runId": planned["runId"]}))["run"]
        assert shown["planId"] == plan["planId"]
        assert [c["actor"] for c in shown["children"]] == ["ultron-leadgen"]
        ok(await session.call_tool("abort", {"runId": planned["runId"]}))

        # Abort a long run.
        long_run = {"actor": "ultron-generator", "input": {"items": 5, "durationSecs": 300}}
        long_id = ok(await session.call_tool("submit", {"request": {"runs": [long_run]}}))["runId"]
        aborted = ok(await session.call_tool("abort", {"runId": long_id}))
        assert aborted["aborting"] is True
        final, _ = await wait_until_ended(session, long_id)
        assert final["state"] == "aborted"
        again = ok(await session.call_tool("abort", {"runId": long_id}))
        assert again["aborting"] is False

    async with mcp_session(stack, other_key) as other:
        for tool, args in (
            ("get_run", {"runId": run_id}),
            ("get_items", {"runId": run_id}),
            ("abort", {"runId": run_id}),
        ):
            refused = problem(await other.call_tool(tool, args))
            assert (refused["code"], refused["status"]) == ("not-found", 404), tool
            assert refused["field"] == "runId"


def test_mcp_needs_a_valid_key(stack: DevStack) -> None:
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    with httpx.Client(base_url=stack.urls["api"], timeout=30) as api:
        missing = api.post("/mcp", json=hello, headers=accept)
        wrong = api.post(
            "/mcp", json=hello, headers={**accept, "Authorization": "Bearer ork_nope_nope"}
        )
    assert missing.status_code == 401
    assert wrong.status_code == 401
    assert "Bearer" in wrong.headers["WWW-Authenticate"]


async def test_orchestrator_mcp_serves_the_same_tools_over_stdio(stack: DevStack) -> None:
    (key,) = workspace_keys(stack, 1)
    command = StdioServerParameters(
        command=sys.executable,
        args=["-m", "orchestrator", "mcp"],
        env={**stack.env, "ORCHESTRATOR_API_KEY": key},
    )
    async with (
        stdio_client(command) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        catalog = ok(await session.call_tool("list_actors", {}))
        assert "ultron-generator" in {actor["name"] for actor in catalog["actors"]}
        run = {"actor": "ultron-generator", "input": {"items": 3, "durationSecs": 1}}
        run_id = ok(await session.call_tool("submit", {"request": {"runs": [run]}}))["runId"]
        ended, _ = await wait_until_ended(session, run_id)
        assert (ended["state"], ended["itemsTotal"]) == ("succeeded", 3)
        page = ok(await session.call_tool("get_items", {"runId": run_id}))
        assert (page["returned"], page["nextCursor"]) == (3, None)
