"""Helpers for end-to-end tests: the API as a caller sees it, and the emulator's controls."""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx

from orchestrator.cli.devstack import DevStack
from tests.support.waiting import eventually

EMULATOR_TOKEN = "emulator-token"


def api_client(stack: DevStack) -> httpx.Client:
    """A client of the orchestrator's API, authenticated as the stack's admin if it has one."""
    return httpx.Client(base_url=stack.urls["api"], timeout=30, headers=stack.api_headers)


def emulator_client(stack: DevStack) -> httpx.Client:
    return httpx.Client(
        base_url=stack.urls["emulator"],
        timeout=30,
        headers={"Authorization": f"Bearer {EMULATOR_TOKEN}"},
    )


def submit(api: httpx.Client, body: dict[str, Any]) -> str:
    response = api.post("/runs", json=body)
    assert response.status_code == 202, response.text
    run_id: str = response.json()["runId"]
    return run_id


def wait_terminal(api: httpx.Client, run_id: str, timeout: float = 120) -> dict[str, Any]:
    def terminal() -> dict[str, Any] | None:
        run: dict[str, Any] = api.get(f"/runs/{run_id}").json()
        return run if run["terminal"] else None

    run = eventually(terminal, timeout=timeout, description=f"run {run_id} to end")
    assert run is not None
    return run


def settled_run(api: httpx.Client, run_id: str, timeout: float = 60) -> dict[str, Any]:
    """The request once it has ended and every child's cost is final."""

    def settled() -> dict[str, Any] | None:
        run: dict[str, Any] = api.get(f"/runs/{run_id}").json()
        return run if run["terminal"] and run["usageSettled"] else None

    run = eventually(settled, timeout=timeout, description=f"usage of {run_id} to settle")
    assert run is not None
    return run


def paged(api: httpx.Client, path: str, key: str, limit: int = 1000) -> list[dict[str, Any]]:
    """Every entry of a cursor-paged listing (``key`` names the list in each page)."""
    found: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": limit}
        if cursor:
            params["cursor"] = cursor
        page = api.get(path, params=params).json()
        found.extend(page[key])
        cursor = page["nextCursor"]
        if cursor is None:
            return found


def all_items(api: httpx.Client, run_id: str, limit: int = 1000) -> list[dict[str, Any]]:
    return paged(api, f"/runs/{run_id}/items", "items", limit)


def events(api: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    return paged(api, f"/runs/{run_id}/events", "events")


def event_kinds(api: httpx.Client, run_id: str) -> Counter[str]:
    return Counter(e["kind"] for e in events(api, run_id))


def platform_run_count(emulator: httpx.Client) -> int:
    """How many runs the platform has ever created."""
    total: int = emulator.get("/v2/actor-runs", params={"limit": 1}).json()["data"]["total"]
    return total


def generator(**script: Any) -> dict[str, Any]:
    return {"actor": "ultron-generator", "input": script}


def request(*runs: dict[str, Any], workspace: str = "ws_e2e") -> dict[str, Any]:
    return {"workspaceId": workspace, "runs": list(runs)}
